/**
 * Capped exponential backoff with full jitter (delay drawn uniformly from [0, min(cap, base * 2^n))),
 * with the clock, the sleep and the randomness injectable so tests can run it fast and deterministically.
 */

export interface BackoffPolicy {
  readonly baseMs: number;
  readonly capMs: number;
  /** Retries after the first try; then the caller gives up. */
  readonly maxRetries: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { baseMs: 25, capMs: 1_000, maxRetries: 8 };

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms`, or early when `signal` aborts (never rejects). */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /** Uniform in [0, 1). */
  random(): number;
}

export function realSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted || ms <= 0) {
      resolve();
      return;
    }
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

export const realClock: Clock = { now: () => Date.now(), sleep: realSleep, random: () => Math.random() };

export function backoffDelay(retry: number, policy: BackoffPolicy, random: () => number): number {
  const ceiling = Math.min(policy.capMs, policy.baseMs * 2 ** retry);
  return Math.floor(random() * ceiling);
}

/** Error names DynamoDB returns for throttling and transient faults: retry, do not give up. */
export const RETRYABLE_ERROR_NAMES = [
  'ProvisionedThroughputExceededException',
  'ThrottlingException',
  'RequestLimitExceeded',
  'InternalServerError',
  'ServiceUnavailable',
  'LimitExceededException',
] as const;
