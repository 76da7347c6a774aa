import type { FutureError, LiveRow, ModelRow } from '../records.js';
import { COMMIT_MODEL_ROW_ACTIONS, commitActionsOf, type PlanLimits } from './limits.js';
import type { DeferReason, PlanCounters, PlannedStep, RunStop } from './plan-types.js';
import { DUPLICATE_SEQ, type ModelRows, type TrainingRow } from './snapshot-index.js';
import { tickPrefixLength } from './tick-rule.js';

/** One model's share of a tick before the work item's caps are applied. */
export type ModelProposal =
  | { readonly kind: 'deferred'; readonly reason: DeferReason }
  | { readonly kind: 'run'; readonly steps: readonly PlannedStep[]; readonly stop: RunStop };

/** E2: after K failed attempts the model's first step fails with a server error. */
export function attemptsExhausted(attempts: number, maxAttempts: number): boolean {
  return attempts >= maxAttempts;
}

export function tokensOf(row: Pick<LiveRow, 'tokens'>): number {
  return row.tokens !== undefined && row.tokens > 0 ? row.tokens : 0;
}

/**
 * The run one model may dispatch this tick (R2, R3, R5), capped per model: the contiguous visible
 * seqs after planned_through, cut at the first pass after a barrier, at `maxStepsPerModel` and at the
 * commit transaction's action budget. Never skips a seq.
 */
export function proposeRun(
  model: ModelRow | undefined,
  rows: ModelRows,
  limits: PlanLimits,
  now: number,
  counters: PlanCounters,
): ModelProposal {
  if (model === undefined) return { kind: 'deferred', reason: 'missing_model_row' };
  if (model.inflight !== undefined) {
    if (model.lease_until === undefined || model.lease_until <= now) counters.models_lease_expired++;
    return { kind: 'deferred', reason: 'inflight' };
  }
  if (model.planned_through !== model.applied_through) {
    return { kind: 'deferred', reason: 'row_inconsistent' };
  }

  const exhausted = attemptsExhausted(model.attempts, limits.maxAttempts);
  const { run, end } = contiguousRun(model, rows, exhausted ? 1 : limits.maxStepsPerModel + 1);
  if (run.length === 0) {
    return { kind: 'deferred', reason: end === 'duplicate_seq' ? 'duplicate_seq' : 'head_not_visible' };
  }
  if (exhausted) {
    // Alone, so its commit lands even if a later step is what keeps failing the work item.
    const fail: FutureError = {
      message: `Request failed after ${model.attempts} attempts`,
      category: 'server',
    };
    return { kind: 'run', steps: [toStep(run[0]!, fail)], stop: 'attempts_exhausted' };
  }

  const unloaded: FutureError | undefined =
    model.status === 'unloaded'
      ? { message: `Model ${model.model_id} is unloaded`, category: 'user' }
      : undefined;
  // Fail steps change no state, so the barrier rule does not apply to them.
  const r2 = unloaded ? run.length : tickPrefixLength(run.map((row) => row.request_type));
  const length = Math.min(r2, limits.maxStepsPerModel);
  let stop: RunStop = length === run.length ? end : r2 === length ? 'barrier' : 'model_steps';

  const steps: PlannedStep[] = [];
  let actions = COMMIT_MODEL_ROW_ACTIONS;
  for (const row of run.slice(0, length)) {
    const cost = unloaded ? 1 : commitActionsOf(row.request_type);
    if (actions + cost > limits.maxCommitActions) {
      stop = 'commit_actions';
      break;
    }
    actions += cost;
    steps.push(toStep(row, unloaded));
  }
  return { kind: 'run', steps, stop };
}

function contiguousRun(
  model: ModelRow,
  rows: ModelRows,
  limit: number,
): { run: TrainingRow[]; end: 'end_of_run' | 'duplicate_seq' } {
  const run: TrainingRow[] = [];
  for (let seq = model.planned_through + 1; run.length < limit; seq++) {
    const row = rows.bySeq.get(seq);
    if (row === undefined) return { run, end: 'end_of_run' };
    if (row === DUPLICATE_SEQ) return { run, end: 'duplicate_seq' };
    run.push(row);
  }
  return { run, end: 'end_of_run' };
}

function toStep(row: TrainingRow, fail: FutureError | undefined): PlannedStep {
  const step = { request_id: row.request_id, seq: row.seq, request_type: row.request_type };
  return fail === undefined ? { ...step, tokens: tokensOf(row) } : { ...step, tokens: 0, fail };
}
