import { setImmediate as nextTurn } from 'node:timers/promises';

/**
 * Keeps long CPU work (encoding a cut) from holding the event loop: `maybeYield` gives the loop a
 * turn once `sliceMs` of work has passed since the last one, so timers, signals and I/O (the writes
 * already in flight) are served between rows. Measured on the monotonic clock, not the store's
 * injectable one: this is about CPU time, not about deadlines.
 */
export class Pacer {
  /** The first call yields: work queued by a caller starts after the caller has carried on. */
  private sliceStart = Number.NEGATIVE_INFINITY;

  constructor(private readonly sliceMs: number) {}

  async maybeYield(): Promise<void> {
    if (performance.now() - this.sliceStart < this.sliceMs) return;
    await nextTurn();
    this.sliceStart = performance.now();
  }
}

/**
 * Counts writes queued or in flight, so the encoder stays a bounded distance ahead of the writer
 * (memory stays bounded, and no row is encoded long before it can be written).
 */
export class Backlog {
  private outstanding = 0;
  private waiters: (() => void)[] = [];

  constructor(private readonly limit: number) {
    if (limit < 1) throw new RangeError('backlog limit must be at least 1');
  }

  /** Tracks `work` until it settles. */
  add(work: Promise<unknown>): void {
    this.outstanding += 1;
    const settled = (): void => {
      this.outstanding -= 1;
      for (const wake of this.waiters.splice(0)) wake();
    };
    work.then(settled, settled);
  }

  /** Resolves once fewer than `limit` writes are outstanding. */
  async room(): Promise<void> {
    while (this.outstanding >= this.limit) {
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }
}
