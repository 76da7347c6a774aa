import {
  InternalServerError,
  ProvisionedThroughputExceededException,
  TransactionCanceledException,
} from '@aws-sdk/client-dynamodb';
import { S3ServiceException } from '@aws-sdk/client-s3';
import { RequestThrottled, SQSServiceException } from '@aws-sdk/client-sqs';

/**
 * The errors the fault library throws, built as the SDK builds them from a real answer: the
 * service's own exception class (or its service exception with the wire name), `$fault` and the
 * HTTP status in `$metadata`, so code that matches by `name`, `instanceof`, `$fault` or status sees
 * what AWS would send. Every message ends with "(injected)" so a log line can be traced to a fault.
 */

export type Service = 'dynamodb' | 's3' | 'sqs';

/** Names per service, for callers that classify errors by name (see `isAwsError`). */
export const INJECTED_ERROR_NAMES = {
  throttle: {
    dynamodb: 'ProvisionedThroughputExceededException',
    s3: 'SlowDown',
    sqs: 'RequestThrottled',
  },
  serverError: { dynamodb: 'InternalServerError', s3: 'InternalError', sqs: 'InternalFailure' },
  transactionConflict: { dynamodb: 'TransactionCanceledException' },
  timeout: 'TimeoutError',
} as const;

function metadata(httpStatusCode: number) {
  return { httpStatusCode, requestId: 'injected', attempts: 1, totalRetryDelay: 0 };
}

export function throttleError(service: Service, operation: string): Error {
  switch (service) {
    case 'dynamodb':
      return new ProvisionedThroughputExceededException({
        message: `The level of configured provisioned throughput for the table was exceeded (${operation}, injected)`,
        $metadata: metadata(400),
      });
    case 's3':
      return new S3ServiceException({
        name: INJECTED_ERROR_NAMES.throttle.s3,
        $fault: 'server',
        $metadata: metadata(503),
        message: `Please reduce your request rate (${operation}, injected)`,
      });
    case 'sqs':
      return new RequestThrottled({
        message: `Request is throttled (${operation}, injected)`,
        $metadata: metadata(400),
      });
  }
}

export function serverError(service: Service, operation: string): Error {
  const message = `We encountered an internal error. Please try again (${operation}, injected)`;
  switch (service) {
    case 'dynamodb':
      return new InternalServerError({ message, $metadata: metadata(500) });
    case 's3':
      return new S3ServiceException({
        name: INJECTED_ERROR_NAMES.serverError.s3,
        $fault: 'server',
        $metadata: metadata(500),
        message,
      });
    case 'sqs':
      return new SQSServiceException({
        name: INJECTED_ERROR_NAMES.serverError.sqs,
        $fault: 'server',
        $metadata: metadata(500),
        message,
      });
  }
}

/** Cancelled before any item is examined: `conflicting` says which item lost the race. */
export function transactionConflictError(items: number, conflicting: number): Error {
  const codes = Array.from({ length: items }, (_, index) =>
    index === conflicting ? 'TransactionConflict' : 'None',
  );
  return new TransactionCanceledException({
    message: `Transaction cancelled, please refer cancellation reasons for specific reasons [${codes.join(', ')}] (injected)`,
    $metadata: metadata(400),
    CancellationReasons: codes.map((Code) =>
      Code === 'None' ? { Code } : { Code, Message: 'Transaction is ongoing for the item' },
    ),
  });
}

/** What the SDK's HTTP handler throws when the socket times out: the request may have been applied. */
export function timeoutError(operation: string): Error {
  return Object.assign(
    new Error(`Connection timed out after the request was sent (${operation}, injected)`),
    {
      name: INJECTED_ERROR_NAMES.timeout,
      code: 'ETIMEDOUT',
      $metadata: {},
    },
  );
}
