import DataLoader from 'dataloader';
import type { Backend, PassItem, PassOutcome } from '../../backend/backend.js';

/**
 * Fuses the passes of different models into one `runPasses` call (R2: passes of several models may be
 * fused). Each model's part awaits its pass before its next step, so a batch never holds two passes
 * of one model, as `runPasses` requires. Passes that reach the batcher in the same tick (or within
 * `windowMs`) run together; a backend error (not a user error) rejects every pass of the batch.
 */
export class PassBatcher {
  readonly #loader: DataLoader<PassItem, PassOutcome>;
  #batches = 0;

  constructor(backend: Backend, windowMs = 0) {
    this.#loader = new DataLoader<PassItem, PassOutcome>(
      async (items) => {
        this.#batches++;
        return backend.runPasses(items);
      },
      {
        cache: false,
        batchScheduleFn: (run) => (windowMs > 0 ? setTimeout(run, windowMs) : setImmediate(run)),
      },
    );
  }

  run(item: PassItem): Promise<PassOutcome> {
    return this.#loader.load(item);
  }

  /** `runPasses` calls made so far. */
  get batches(): number {
    return this.#batches;
  }
}
