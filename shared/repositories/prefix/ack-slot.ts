import type { SaveAck } from './types.js';

/** One call's acknowledgement: settled once, by whoever knows first (its group, or its own signal). */
export class AckSlot {
  readonly promise: Promise<SaveAck>;
  private resolve!: (ack: SaveAck) => void;
  private done = false;
  private readonly cleanups: (() => void)[] = [];

  constructor(readonly callId: string) {
    this.promise = new Promise((resolve) => {
      this.resolve = resolve;
    });
  }

  get settled(): boolean {
    return this.done;
  }

  /** Runs when the slot settles (to drop signal listeners). */
  onSettle(cleanup: () => void): void {
    if (this.done) cleanup();
    else this.cleanups.push(cleanup);
  }

  /** First answer wins; returns whether this one did. */
  settle(ack: SaveAck): boolean {
    if (this.done) return false;
    this.done = true;
    this.resolve(ack);
    for (const cleanup of this.cleanups.splice(0)) cleanup();
    return true;
  }
}
