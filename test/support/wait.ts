/** Polls `check` until it returns a value other than undefined/false, or fails after `timeoutMs`. */
export async function waitFor<T>(
  what: string,
  check: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 10_000,
  intervalMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** Lets time pass, to show that something does NOT happen within it. */
export function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A point a worker stops at until the test lets it go on (a stalled or paused process). */
export function gate<E>(matches: (event: E) => boolean): {
  readonly onEvent: (event: E) => Promise<void>;
  readonly arrived: Promise<void>;
  open(): void;
} {
  let arrive: () => void = () => {};
  let release: () => void = () => {};
  const arrived = new Promise<void>((resolve) => (arrive = resolve));
  const released = new Promise<void>((resolve) => (release = resolve));
  let fired = false;
  return {
    arrived,
    open: () => release(),
    onEvent: async (event) => {
      if (fired || !matches(event)) return;
      fired = true;
      arrive();
      await released;
    },
  };
}
