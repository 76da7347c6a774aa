import type { FutureError } from '../records.js';
import type { ModelClaim } from './claim.js';
import type { Plan } from './plan-types.js';
import type { WorkItem, WorkItemModel, WorkItemSample, WorkItemStep } from './work-item.js';

/** A sample whose per-request claim this tick won (R4). */
export interface SampleClaimed {
  readonly tenant: string;
  readonly claim_token: string;
}

export interface AssembleInput {
  readonly workItemId: string;
  readonly pool: string;
  readonly now: number;
  readonly plan: Plan;
  /** Claims that succeeded, by model id; a planned model without one is left out (another tick won). */
  readonly claims: ReadonlyMap<string, ModelClaim>;
  /** Samples whose claim succeeded, by request id; other planned samples are left out. */
  readonly sampleClaims: ReadonlyMap<string, SampleClaimed>;
  /** Parsed request payloads by request id, as read from S3; absent means the object is missing. */
  readonly payloads: ReadonlyMap<string, unknown>;
}

const MISSING_PAYLOAD: FutureError = { message: 'The request payload is missing', category: 'server' };

/**
 * R6: exactly the payloads the claimed part of a plan needs (fail steps need none). Call after the
 * claims, so a tick that dispatches nothing reads nothing.
 */
export function payloadsToRead(
  plan: Plan,
  claims: ReadonlyMap<string, ModelClaim>,
  sampleClaims: ReadonlyMap<string, SampleClaimed>,
): string[] {
  const ids: string[] = [];
  for (const model of plan.models) {
    if (!claims.has(model.model_id)) continue;
    for (const step of model.steps) if (step.fail === undefined) ids.push(step.request_id);
  }
  for (const sample of plan.samples) if (sampleClaims.has(sample.request_id)) ids.push(sample.request_id);
  return ids;
}

/**
 * The work item of a claimed plan, or undefined when nothing was claimed. A training step whose
 * payload is missing becomes a fail step rather than being dropped, so its model's seqs stay
 * contiguous (R5); a sample whose payload is missing becomes a fail entry, which its worker commits
 * under the sample's claim (the scheduler never writes request rows).
 */
export function assembleWorkItem(input: AssembleInput): WorkItem | undefined {
  const models: WorkItemModel[] = [];
  for (const planned of input.plan.models) {
    const claim = input.claims.get(planned.model_id);
    if (claim === undefined) continue;
    const steps = planned.steps.map((step): WorkItemStep => {
      const base = { request_id: step.request_id, seq: step.seq, request_type: step.request_type };
      if (step.fail !== undefined) return { ...base, fail: step.fail };
      const payload = input.payloads.get(step.request_id);
      return payload === undefined ? { ...base, fail: MISSING_PAYLOAD } : { ...base, payload };
    });
    models.push({
      model_id: planned.model_id,
      tenant: planned.tenant,
      epoch: claim.set.epoch,
      inflight: claim.set.inflight,
      base_applied_through: planned.base_applied_through,
      ...(planned.base_state_ref === undefined ? {} : { base_state_ref: planned.base_state_ref }),
      steps,
    });
  }

  const samples: WorkItemSample[] = [];
  for (const planned of input.plan.samples) {
    const claimed = input.sampleClaims.get(planned.request_id);
    if (claimed === undefined) continue;
    const payload = input.payloads.get(planned.request_id);
    samples.push({
      request_id: planned.request_id,
      tenant: claimed.tenant,
      model_id: planned.model_id,
      ...(planned.checkpoint_id === undefined ? {} : { checkpoint_id: planned.checkpoint_id }),
      claim_token: claimed.claim_token,
      ...(payload === undefined ? { fail: MISSING_PAYLOAD } : { payload }),
    });
  }

  if (models.length === 0 && samples.length === 0) return undefined;
  return { work_item_id: input.workItemId, pool: input.pool, created_at: input.now, models, samples };
}
