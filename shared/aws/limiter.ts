/** Runs at most `concurrency` tasks at once, in the order they were queued (bounded parallelism, P1). */
export class Limiter {
  private active = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly concurrency: number) {
    if (concurrency < 1) throw new RangeError('concurrency must be at least 1');
  }

  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.active >= this.concurrency) {
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    } else {
      this.active += 1;
    }
    try {
      return await task();
    } finally {
      const next = this.waiting.shift();
      // The slot passes straight to the next task, so `active` stays counted.
      if (next === undefined) this.active -= 1;
      else next();
    }
  }
}
