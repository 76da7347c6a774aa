import type { ModelRow } from '../domain/records.js';
import { TinkerError } from '../errors.js';
import { attemptsExhausted } from './model-run.js';
import type { PlannedModel } from './plan-types.js';

/** A claim or re-plan was asked for with a row that does not match what was planned: a caller bug. */
export class PlanMismatchError extends TinkerError {
  readonly status = 500;
}

/** The work item id a model row carries while in flight (E1): unique per (model, epoch). */
export function inflightToken(modelId: string, epoch: number): string {
  return `${modelId}@${epoch}`;
}

/**
 * The conditional UpdateItem of a claim (E2), as data:
 * `SET epoch = :epoch, inflight = :inflight, lease_until = :lease_until, planned_through = :planned_through`
 * `IF epoch = :expected_epoch AND attribute_not_exists(inflight)`.
 * A lost condition means another tick claimed or re-planned the model first: drop it from the item.
 */
export interface ModelClaim {
  readonly model_id: string;
  readonly condition: { readonly expected_epoch: number; readonly inflight_absent: true };
  readonly set: {
    readonly epoch: number;
    readonly inflight: string;
    readonly lease_until: number;
    readonly planned_through: number;
  };
}

export function claimFor(model: ModelRow, planned: PlannedModel, now: number, leaseMs: number): ModelClaim {
  if (
    model.model_id !== planned.model_id ||
    model.epoch !== planned.expected_epoch ||
    model.inflight !== undefined ||
    model.planned_through + 1 !== planned.first_seq
  ) {
    throw new PlanMismatchError('Claim asked for a model row that is not the one planned', {
      context: { model_id: planned.model_id, expected_epoch: planned.expected_epoch, epoch: model.epoch },
    });
  }
  const epoch = model.epoch + 1;
  return {
    model_id: model.model_id,
    condition: { expected_epoch: model.epoch, inflight_absent: true },
    set: {
      epoch,
      inflight: inflightToken(model.model_id, epoch),
      lease_until: now + leaseMs,
      planned_through: planned.last_seq,
    },
  };
}

/** True when a model is in flight and its lease has ended: the sweeper may re-plan it. */
export function leaseExpired(model: ModelRow, now: number): boolean {
  return model.inflight !== undefined && (model.lease_until === undefined || model.lease_until <= now);
}

/**
 * The sweeper's re-plan (E2), as data:
 * `SET planned_through = :planned_through, epoch = :epoch, attempts = :attempts REMOVE inflight, lease_until`
 * `IF epoch = :expected_epoch AND inflight = :inflight AND (attribute_not_exists(lease_until) OR lease_until <= :now)`.
 * The lease clause loses to a worker that renewed meanwhile (E7). `planned_through` returns to the
 * `applied_through` of the strongly consistent read; the epoch bump fences the old work item (E3, E4).
 */
export interface ModelReplan {
  readonly model_id: string;
  readonly condition: {
    readonly expected_epoch: number;
    readonly inflight: string;
    /** The lease must have ended by this time. */
    readonly lease_ended_by: number;
  };
  readonly set: { readonly planned_through: number; readonly epoch: number; readonly attempts: number };
  readonly remove: readonly ['inflight', 'lease_until'];
  /**
   * Attempts reached K: the planner will dispatch the model's next step alone as a server-error
   * fail step; the commit of that step must reset `attempts` to 0 so the model carries on.
   */
  readonly exhausted: boolean;
}

/** `undefined` when the model is not in flight (nothing to re-plan). */
export function replanFor(model: ModelRow, now: number, maxAttempts: number): ModelReplan | undefined {
  if (model.inflight === undefined) return undefined;
  const attempts = model.attempts + 1;
  return {
    model_id: model.model_id,
    condition: { expected_epoch: model.epoch, inflight: model.inflight, lease_ended_by: now },
    set: { planned_through: model.applied_through, epoch: model.epoch + 1, attempts },
    remove: ['inflight', 'lease_until'],
    exhausted: attemptsExhausted(attempts, maxAttempts),
  };
}
