import { RETRYABLE_ERROR_NAMES } from '../prefix/backoff.js';

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
