import type { WorkerEvent } from '../../../shared/services/worker/index.js';

/**
 * `npm run demo:rl`'s view of the worker: it counts the rollouts cut mid-generation (their prefixes
 * saved, P1-P2) and resumed from them (P4-P6), from the worker's own events, and it lets the demo's
 * operator cut land while a rollout is generating. The reference model generates a slice in well under
 * a millisecond, faster than any poll, so the cut holds one sample at a slice boundary while the demo
 * writes `cut#<pool>` and the worker's poll sees it; the sample then stops at its next boundary.
 */

/** How long a held sample waits once the cut is requested: several of the worker's cut polls. */
const HOLD_AFTER_REQUEST_MS = 400;

interface Hold {
  readonly arrive: (held: boolean) => void;
  readonly released: Promise<void>;
}

export class RolloutCuts {
  /** Rollouts (sequences) whose prefix a cut saved. */
  cut = 0;
  /** Rollouts that went on from a restored prefix. */
  resumed = 0;
  /** Rollouts whose prefix could not be used (started over; still exact, just not resumed). */
  regenerated = 0;
  /** Sample requests that were cut, in order. */
  readonly cutRequests: string[] = [];
  #hold: Hold | undefined;

  /** For the worker handler's `onEvent`. */
  readonly onEvent = async (event: WorkerEvent): Promise<void> => {
    switch (event.kind) {
      case 'sample-cut':
        this.cut += event.report.saved;
        this.cutRequests.push(event.request_id);
        return;
      case 'sample-resumed':
        this.resumed += event.sequences.filter((sequence) => sequence.from === 'restored').length;
        this.regenerated += event.sequences.filter((sequence) => sequence.from === 'regenerate').length;
        return;
      case 'sample-slice': {
        const hold = this.#hold;
        if (hold === undefined) return;
        this.#hold = undefined;
        hold.arrive(true);
        await hold.released;
        return;
      }
      default:
    }
  };

  /**
   * Waits for the next sample slice, then runs `requestCut` while that sample is held, and lets it go
   * on once the worker has had time to see the request. Resolves false when `cancel` came first.
   */
  async cutAtNextSlice(requestCut: () => Promise<unknown>): Promise<boolean> {
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    const held = await new Promise<boolean>((arrive) => (this.#hold = { arrive, released }));
    if (!held) return false;
    try {
      await requestCut();
      await new Promise((resolve) => setTimeout(resolve, HOLD_AFTER_REQUEST_MS));
    } finally {
      release();
    }
    return true;
  }

  /** Gives up a pending `cutAtNextSlice` (no slice came). */
  cancel(): void {
    this.#hold?.arrive(false);
    this.#hold = undefined;
  }
}
