import { TinkerError } from '../../base/errors.js';
import type { ModelRow } from '../records.js';
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
  /** What the claim replaced, so a pass that cannot dispatch it can give it back (`releaseFor`). */
  readonly before: { readonly planned_through: number };
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
    before: { planned_through: model.planned_through },
  };
}

/**
 * A pass's release of a claim it won but could not dispatch (a payload read, the work item's PUT or
 * the manifest's send threw, E7), as data:
 * `SET planned_through = :planned_through REMOVE inflight, lease_until IF epoch = :epoch AND inflight = :inflight`.
 * The condition makes it exact: a row that moved on (re-planned, committed by a worker that got an
 * ambiguously sent manifest, claimed again) or a claim that never landed is left alone. Attempts are
 * not charged: the failure was the infrastructure's, and no step of the model ran.
 *
 * The epoch stays at the claimed value: it is neither put back nor bumped again. Putting it back would
 * hand the next claim this claim's token again (`<model>@<epoch>`, E1), and a manifest whose send
 * failed ambiguously may still reach a worker, whose renewal (`IF inflight = :token`) and commit
 * (`IF inflight = :token AND applied_through = :base`, E4) must fail for good. Kept, it fences as a
 * bump would: the next claim is conditional on this epoch and sets the next one (E2), so the token
 * and the (model, epoch) blob keys of E3 are never issued again, and a tick holding a snapshot from
 * before the claim loses its claim although planned_through is back where it saw it (E2's reason for
 * claiming on the epoch). A zombie's E5 re-read sees its own epoch with nothing in flight but
 * applied_through below its last seq, so it does not mistake the release for its commit. A second
 * bump would add no fence and would make the release look like a re-plan, which it is not.
 */
export interface ModelRelease {
  readonly model_id: string;
  readonly condition: { readonly epoch: number; readonly inflight: string };
  readonly set: { readonly planned_through: number };
  readonly remove: readonly ['inflight', 'lease_until'];
}

export function releaseFor(claim: ModelClaim): ModelRelease {
  return {
    model_id: claim.model_id,
    condition: { epoch: claim.set.epoch, inflight: claim.set.inflight },
    set: { planned_through: claim.before.planned_through },
    remove: ['inflight', 'lease_until'],
  };
}

/** A sample's claim as the pass wrote it: `registry` item `claim#<request_id>` (R4). */
export interface SampleClaimWritten {
  readonly request_id: string;
  /** The work item id of the pass that wrote it. */
  readonly claim_token: string;
}

/**
 * The release of a sample claim a pass could not dispatch, as data: `DELETE IF claim_token = :token`.
 * A claim another work item holds by now (this one's expired and was claimed again) is left alone.
 */
export interface SampleRelease {
  readonly request_id: string;
  readonly condition: { readonly claim_token: string };
}

export function sampleReleaseFor(claim: SampleClaimWritten): SampleRelease {
  return { request_id: claim.request_id, condition: { claim_token: claim.claim_token } };
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

/** Claim items outlive their lease by this much before TTL removes them (nothing reads them then). */
const CLAIM_TTL_AFTER_LEASE_S = 24 * 3600;

/** TTL (epoch seconds) of a sample claim whose lease ends at `leaseUntil` (ms). */
export function sampleClaimTtl(leaseUntil: number): number {
  return Math.ceil(leaseUntil / 1000) + CLAIM_TTL_AFTER_LEASE_S;
}
