import { holdWait } from '../../domain/planning/coalesce.js';
import type { Plan } from '../../domain/planning/plan-types.js';

/**
 * The models one round of a tick held back (S5), as its plans last decided: a plan that holds a model
 * records it, a later plan of the same round that dispatches or defers it (its window ended, or a
 * pass read it again after another tick claimed it) removes it. The tick waits out the earliest hold
 * and plans exactly these models again from a fresh read.
 */
export class HeldModels {
  readonly #until = new Map<string, number>();

  note(planned: Pick<Plan, 'models' | 'deferred' | 'held'>): void {
    for (const model of planned.models) this.#until.delete(model.model_id);
    for (const model of planned.deferred) this.#until.delete(model.model_id);
    for (const model of planned.held) this.#until.set(model.model_id, model.until);
  }

  get size(): number {
    return this.#until.size;
  }

  ids(): Set<string> {
    return new Set(this.#until.keys());
  }

  /** Ms until the earliest hold ends (at most `capMs`), or undefined when nothing is held. */
  wait(now: number, capMs: number): number | undefined {
    return holdWait(
      [...this.#until].map(([model_id, until]) => ({ model_id, until })),
      now,
      capMs,
    );
  }
}
