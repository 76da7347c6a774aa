/** Resolves after `ms`, or at once when `signal` aborts (never rejects: pollers check the signal). */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

/** Capped exponential backoff: 100 ms, 200 ms, ... up to `capMs`. */
export function backoffMs(attempt: number, capMs = 2_000): number {
  return Math.min(capMs, 100 * 2 ** Math.max(0, attempt - 1));
}
