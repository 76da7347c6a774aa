/**
 * The planner's contract, restated independently of its code, for the property suites: given the
 * snapshot and limits a plan was made from, every assertion here must hold (R1-R5, E4 caps).
 */
import { expect } from 'vitest';
import type { PlanLimits } from '../../shared/domain/planning/limits.js';
import type { Plan, PlannedModel, Snapshot } from '../../shared/domain/planning/plan-types.js';
import type { LiveRow, RequestType } from '../../shared/domain/records.js';

const PASSES: readonly RequestType[] = ['forward', 'forward_backward'];
const BARRIERS: readonly RequestType[] = ['optim_step', 'load_weights'];

/** Actions in a model's commit: the model row, each future, a name record per save, a session per sampler save. */
function commitActions(model: PlannedModel): number {
  let actions = 1;
  for (const step of model.steps) {
    if (step.fail !== undefined) actions += 1;
    else if (step.request_type === 'save_weights') actions += 2;
    else if (step.request_type === 'save_weights_for_sampler') actions += 3;
    else actions += 1;
  }
  return actions;
}

function hasPassAfterBarrier(types: readonly RequestType[]): boolean {
  let barrier = false;
  for (const type of types) {
    if (barrier && PASSES.includes(type)) return true;
    if (BARRIERS.includes(type)) barrier = true;
  }
  return false;
}

/** What the scan says about each request once duplicates are resolved (terminal copies win). */
function pendingView(snapshot: Snapshot): Map<string, LiveRow> {
  const terminal = new Set(snapshot.live.filter((r) => r.status !== 'pending').map((r) => r.request_id));
  const view = new Map<string, LiveRow>();
  for (const row of snapshot.live) if (!terminal.has(row.request_id)) view.set(row.request_id, row);
  return view;
}

export function checkPlanInvariants(snapshot: Snapshot, limits: PlanLimits, plan: Plan): void {
  const pending = pendingView(snapshot);
  const bySeq = new Map<string, LiveRow[]>();
  for (const row of pending.values()) {
    if (row.seq === undefined || row.request_type === 'sample') continue;
    const key = `${row.model_id}#${row.seq}`;
    bySeq.set(key, [...(bySeq.get(key) ?? []), row]);
  }
  const onlyRowAt = (model: string, seq: number): LiveRow | undefined => {
    const rows = bySeq.get(`${model}#${seq}`);
    return rows?.length === 1 ? rows[0] : undefined;
  };

  // (d) each model at most once; only idle, consistent models with a row.
  const plannedIds = plan.models.map((m) => m.model_id);
  expect(new Set(plannedIds).size).toBe(plannedIds.length);
  let requests = plan.samples.length;
  let tokens = 0;
  for (const model of plan.models) {
    const row = snapshot.models.get(model.model_id);
    expect(row, 'planned model has a row').toBeDefined();
    if (row === undefined) continue;
    expect(row.inflight, 'R3: no model in flight is planned').toBeUndefined();
    expect(row.planned_through).toBe(row.applied_through);
    expect(model.expected_epoch).toBe(row.epoch);
    expect(model.base_applied_through).toBe(row.applied_through);
    expect(model.base_state_ref).toBe(row.state_ref);
    expect(model.tenant).toBe(row.tenant);

    // (a) exactly seqs planned_through+1..k, each a visible pending row of this model.
    expect(model.steps.length).toBeGreaterThan(0);
    expect(model.first_seq).toBe(row.planned_through + 1);
    expect(model.steps.map((s) => s.seq)).toEqual(model.steps.map((_, i) => model.first_seq + i));
    expect(model.last_seq).toBe(model.first_seq + model.steps.length - 1);
    for (const step of model.steps) {
      const live = onlyRowAt(model.model_id, step.seq);
      expect(live?.request_id, 'step is the one visible pending row at its seq').toBe(step.request_id);
      expect(step.request_type).toBe(live?.request_type);
      const expected = step.fail === undefined ? Math.max(0, live?.tokens ?? 0) : 0;
      expect(step.tokens).toBe(expected);
      requests++;
      tokens += step.tokens;
    }

    // Fail steps: exactly for exhausted attempts (first step, alone) or an unloaded model (all).
    const exhausted = row.attempts >= limits.maxAttempts;
    if (exhausted) {
      expect(model.steps).toHaveLength(1);
      expect(model.steps[0]?.fail?.category).toBe('server');
    } else if (row.status === 'unloaded') {
      for (const step of model.steps) expect(step.fail?.category).toBe('user');
    } else {
      for (const step of model.steps) expect(step.fail).toBeUndefined();
      // (b) R2: no pass after a barrier.
      expect(hasPassAfterBarrier(model.steps.map((s) => s.request_type))).toBe(false);
    }

    // (e) per-model caps.
    expect(model.steps.length).toBeLessThanOrEqual(limits.maxStepsPerModel);
    expect(commitActions(model)).toBeLessThanOrEqual(limits.maxCommitActions);
  }

  // (f) samples: visible, pending, unclaimed, once each, one checkpoint per model.
  const sampleIds = plan.samples.map((s) => s.request_id);
  expect(new Set(sampleIds).size).toBe(sampleIds.length);
  const checkpointOf = new Map<string, string>();
  for (const sample of plan.samples) {
    const live = pending.get(sample.request_id);
    expect(live?.request_type).toBe('sample');
    expect(snapshot.sampleClaims?.has(sample.request_id) ?? false, 'no sample claimed twice').toBe(false);
    expect(sample.checkpoint_id).toBe(live?.checkpoint_id);
    expect(sample.tokens).toBe(Math.max(0, live?.tokens ?? 0));
    tokens += sample.tokens;
    if (sample.checkpoint_id === undefined) continue;
    const chosen = checkpointOf.get(sample.model_id) ?? sample.checkpoint_id;
    expect(sample.checkpoint_id, 'R4: one checkpoint per model').toBe(chosen);
    checkpointOf.set(sample.model_id, chosen);
  }

  // (e) work-item caps (a lone oversized request is the one allowed excess).
  expect(requests).toBeLessThanOrEqual(limits.maxWorkItemRequests);
  expect(tokens <= limits.maxWorkItemTokens || requests === 1).toBe(true);
  expect(plan.counters).toMatchObject({ requests, tokens });

  checkMaximality(snapshot, limits, plan, pending, onlyRowAt);
}

/** Oldest visible pending request of each model above its planned_through: its fairness key. */
function oldestKeys(snapshot: Snapshot, pending: Map<string, LiveRow>): Map<string, string> {
  const oldest = new Map<string, string>();
  for (const row of pending.values()) {
    if (row.request_type === 'sample' || row.seq === undefined) continue;
    const model = snapshot.models.get(row.model_id);
    if (model !== undefined && row.seq <= model.planned_through) continue;
    const current = oldest.get(row.model_id);
    if (current === undefined || row.request_id < current) oldest.set(row.model_id, row.request_id);
  }
  return oldest;
}

/** The plan is not trivially small: whatever is left out is left out for a stated, true reason. */
function checkMaximality(
  snapshot: Snapshot,
  limits: PlanLimits,
  plan: Plan,
  pending: Map<string, LiveRow>,
  onlyRowAt: (model: string, seq: number) => LiveRow | undefined,
): void {
  const oldest = oldestKeys(snapshot, pending);
  const planned = new Map(plan.models.map((m) => [m.model_id, m]));

  // Fairness, across tenants then within each: a tenant with a model waiting for room got every
  // round's request, so no tenant got more than one request more than it; and within that tenant,
  // everything planned is older than the model that waits.
  const tenantOfModel = (modelId: string) => snapshot.models.get(modelId)?.tenant ?? '';
  const tenantOfSample = (requestId: string) => {
    const row = pending.get(requestId);
    return row?.tenant ?? tenantOfModel(row?.model_id ?? '');
  };
  const requestsOf = new Map<string, number>();
  const plannedKeysOf = new Map<string, string[]>();
  const note = (tenant: string, key: string, requests: number) => {
    requestsOf.set(tenant, (requestsOf.get(tenant) ?? 0) + requests);
    plannedKeysOf.set(tenant, [...(plannedKeysOf.get(tenant) ?? []), key]);
  };
  for (const model of plan.models)
    note(tenantOfModel(model.model_id), oldest.get(model.model_id)!, model.steps.length);
  for (const sample of plan.samples) note(tenantOfSample(sample.request_id), sample.request_id, 1);
  const mostRequests = Math.max(0, ...requestsOf.values());
  for (const waiting of plan.deferred.filter((d) => d.reason === 'work_item_full')) {
    expect(plan.cap_reached).toBe(true);
    const tenant = tenantOfModel(waiting.model_id);
    expect(mostRequests, 'round-robin: at most one request more than a waiting tenant').toBeLessThanOrEqual(
      (requestsOf.get(tenant) ?? 0) + 1,
    );
    const key = oldest.get(waiting.model_id)!;
    for (const planned of plannedKeysOf.get(tenant) ?? []) expect(key > planned).toBe(true);
  }

  for (const [modelId, model] of planned) {
    const row = snapshot.models.get(modelId)!;
    const next = model.last_seq + 1;
    const nextRow = onlyRowAt(modelId, next);
    const reason = model.stopped_by;
    if (reason === 'end_of_run') expect(nextRow).toBeUndefined();
    if (reason === 'duplicate_seq') expect(bySeqCount(pending, modelId, next)).toBeGreaterThan(1);
    if (reason === 'barrier') {
      expect(PASSES.includes(nextRow!.request_type)).toBe(true);
      expect(model.steps.some((s) => BARRIERS.includes(s.request_type))).toBe(true);
    }
    if (reason === 'model_steps') expect(model.steps.length).toBe(limits.maxStepsPerModel);
    if (reason === 'attempts_exhausted') expect(row.attempts).toBeGreaterThanOrEqual(limits.maxAttempts);
    if (reason === 'commit_actions') expect(nextRow).toBeDefined();
    if (reason === 'work_item_requests' || reason === 'work_item_tokens') expect(plan.cap_reached).toBe(true);
  }
  if (plan.cap_reached) return;

  // No cap reached: every eligible model is planned or held for the rest of its SDK step (S5), every
  // base sample and matching sample is taken. A held model is neither planned nor deferred.
  const held = new Set(plan.held.map((m) => m.model_id));
  for (const [modelId, key] of oldest) {
    void key;
    const row = snapshot.models.get(modelId);
    const eligible =
      row !== undefined &&
      row.inflight === undefined &&
      row.planned_through === row.applied_through &&
      onlyRowAt(modelId, row.planned_through + 1) !== undefined;
    expect(planned.has(modelId) || held.has(modelId), `eligible model ${modelId} is planned`).toBe(eligible);
    if (held.has(modelId)) expect(planned.has(modelId)).toBe(false);
  }
  for (const modelId of held) expect(plan.deferred.some((d) => d.model_id === modelId)).toBe(false);
  const firstCheckpoint = new Map<string, string>();
  const candidates = [...pending.values()]
    .filter((r) => r.request_type === 'sample' && !(snapshot.sampleClaims?.has(r.request_id) ?? false))
    .sort((a, b) => (a.request_id < b.request_id ? -1 : 1));
  const taken = new Set(plan.samples.map((s) => s.request_id));
  for (const sample of candidates) {
    if (sample.checkpoint_id === undefined) {
      expect(taken.has(sample.request_id), 'base samples are always taken under the caps').toBe(true);
      continue;
    }
    const chosen = firstCheckpoint.get(sample.model_id) ?? sample.checkpoint_id;
    firstCheckpoint.set(sample.model_id, chosen);
    expect(taken.has(sample.request_id)).toBe(chosen === sample.checkpoint_id);
  }
}

function bySeqCount(pending: Map<string, LiveRow>, modelId: string, seq: number): number {
  let count = 0;
  for (const row of pending.values()) if (row.model_id === modelId && row.seq === seq) count++;
  return count;
}
