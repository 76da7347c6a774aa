import { ConfigError } from '../../base/errors.js';

/**
 * Which of the work items a worker process has received it runs now (`bin/worker.ts`,
 * `--max-work-items`): at most `limit` at once, and never two that name the same model.
 *
 * Why per model: a model's resident state has one owner at a time (./residency.ts takes it out while a
 * work item runs). The scheduler dispatches one work item per model at a time, but SQS may deliver a
 * message twice; a duplicate running beside the original would miss the resident state the original
 * took, rebuild it from the snapshot and the replay log (a second copy in the engine, S4's cost), and
 * then lose the commit fence anyway (E4). Run after it instead, it finds the model committed and ends
 * at once (`not_inflight`). Sample parts touch no model state (they load committed sampler
 * checkpoints), so work items that only sample, the many calls of an RL loop's sampling round, overlap
 * with anything and share the engine's decode steps (B1).
 *
 * A work item whose models are unknown (a bare manifest, as tests and operators send; the scheduler
 * always names its parts, `manifestOf`) is exclusive: it runs alone.
 *
 * Order: waiting work items are admitted in arrival order, except that one may pass an earlier one it
 * does not conflict with; so a duplicate waiting for its model holds back only the work of that model.
 */
export type WorkItemModels = readonly string[] | 'all';

interface Entry {
  readonly models: WorkItemModels;
  readonly admit: (release: () => void) => void;
}

function conflict(a: WorkItemModels, b: WorkItemModels): boolean {
  if (a === 'all' || b === 'all') return true;
  return a.some((model) => b.includes(model));
}

export class WorkItemAdmission {
  readonly #running = new Set<Entry>();
  #waiting: Entry[] = [];

  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) {
      throw new ConfigError(`work items at once must be a positive integer, got ${limit}`);
    }
  }

  /** Work items running now. */
  get running(): number {
    return this.#running.size;
  }

  /** Work items waiting for a slot or for a model another one holds. */
  get waiting(): number {
    return this.#waiting.length;
  }

  /**
   * Resolves once the work item may run, with the function that ends its turn (call it once, when it
   * ended); with undefined when `signal` aborts first (it never ran).
   */
  admit(models: WorkItemModels, signal?: AbortSignal): Promise<(() => void) | undefined> {
    if (signal?.aborted) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const onAbort = () => {
        const index = this.#waiting.indexOf(entry);
        if (index < 0) return;
        this.#waiting.splice(index, 1);
        resolve(undefined);
        // Its place no longer holds back the ones behind it.
        this.#pump();
      };
      const entry: Entry = {
        models,
        admit: (release) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(release);
        },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiting.push(entry);
      this.#pump();
    });
  }

  #pump(): void {
    const passed: Entry[] = [];
    const still: Entry[] = [];
    for (const entry of this.#waiting) {
      const blocked =
        this.#running.size >= this.limit ||
        [...this.#running, ...still].some((other) => conflict(other.models, entry.models));
      if (blocked) {
        still.push(entry);
        continue;
      }
      this.#running.add(entry);
      passed.push(entry);
    }
    this.#waiting = still;
    for (const entry of passed) {
      let released = false;
      entry.admit(() => {
        if (released) return;
        released = true;
        this.#running.delete(entry);
        this.#pump();
      });
    }
  }
}
