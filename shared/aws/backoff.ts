/**
 * Capped exponential backoff with full jitter (delay drawn uniformly from [0, min(cap, base * 2^n))),
 * with the clock, the sleep and the randomness injectable so tests can run it fast and deterministically.
 * The one sleep and the one backoff of the code base: every retry loop and poller uses these.
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

/** The un-jittered delay before retry `retry` (0-based): `min(cap, base * 2^retry)`. */
export function exponentialDelay(retry: number, policy: Pick<BackoffPolicy, 'baseMs' | 'capMs'>): number {
  return Math.min(policy.capMs, policy.baseMs * 2 ** retry);
}

/** The jittered delay before retry `retry`: uniform in [0, exponentialDelay(retry)). */
export function backoffDelay(retry: number, policy: BackoffPolicy, random: () => number): number {
  return Math.floor(random() * exponentialDelay(retry, policy));
}
