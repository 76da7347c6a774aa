/** Error names DynamoDB returns for throttling and transient faults: retry, do not give up. */
export const RETRYABLE_ERROR_NAMES = [
  'ProvisionedThroughputExceededException',
  'ThrottlingException',
  'RequestLimitExceeded',
  'InternalServerError',
  'ServiceUnavailable',
  'LimitExceededException',
] as const;

/**
 * Transient AWS failures across DynamoDB, S3 and SQS (matched by error `name`): the API answers them
 * with 503 so clients retry, never with a 500.
 */
export const TRANSIENT_AWS_ERROR_NAMES = [
  ...RETRYABLE_ERROR_NAMES,
  'SlowDown',
  'InternalError',
  'RequestThrottled',
  'InternalFailure',
  'TimeoutError',
  'RequestTimeout',
] as const;
