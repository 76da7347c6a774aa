import type { LiveRow } from '../domain/records.js';
import { ConfigError } from '../errors.js';
import { WorkItemBudget } from './budget.js';
import { MIN_COMMIT_ACTIONS, type PlanLimits, TRANSACT_WRITE_MAX_ACTIONS } from './limits.js';
import { type ModelProposal, proposeRun, tokensOf } from './model-run.js';
import type {
  DeferredModel,
  Plan,
  PlanCounters,
  PlannedModel,
  PlannedSample,
  PlannedStep,
  Snapshot,
} from './plan-types.js';
import { compareIds, indexSnapshot } from './snapshot-index.js';

type Candidate =
  | { readonly key: string; readonly kind: 'model'; readonly modelId: string; readonly proposal: RunProposal }
  | { readonly key: string; readonly kind: 'sample'; readonly row: LiveRow };

type RunProposal = Extract<ModelProposal, { kind: 'run' }>;

/**
 * One tick's decision (R1-R5), pure. Every model's share is a contiguous run of seqs after its
 * planned_through (R5), cut by the tick rule (R2) and the caps; models in flight are skipped (R3);
 * samples follow R4. Models and samples are taken oldest pending request first, so a long backlog
 * cannot starve other models; once a work-item cap is hit, everything younger waits for the next
 * tick (so a large request at the front is never overtaken forever). O(n log n) in the scan's size.
 */
export function plan(snapshot: Snapshot, limits: PlanLimits, now: number): Plan {
  assertLimits(limits);
  const counters = emptyCounters();
  const indexed = indexSnapshot(snapshot, counters);
  const deferred: DeferredModel[] = [];
  const candidates: Candidate[] = [];

  for (const [modelId, rows] of indexed.byModel) {
    const proposal = proposeRun(snapshot.models.get(modelId), rows, limits, now, counters);
    if (proposal.kind === 'deferred') deferred.push({ model_id: modelId, reason: proposal.reason });
    else candidates.push({ key: rows.oldest, kind: 'model', modelId, proposal });
  }
  for (const row of indexed.samples) candidates.push({ key: row.request_id, kind: 'sample', row });
  candidates.sort((a, b) => compareIds(a.key, b.key));

  const budget = new WorkItemBudget(limits);
  const models: PlannedModel[] = [];
  const samples: PlannedSample[] = [];
  /** R4: the one checkpoint per model this work item samples from. */
  const checkpointOf = new Map<string, string>();
  let capReached = false;

  for (const candidate of candidates) {
    if (candidate.kind === 'model') {
      if (capReached) {
        deferred.push({ model_id: candidate.modelId, reason: 'work_item_full' });
        continue;
      }
      const { steps, stop } = candidate.proposal;
      let taken = 0;
      while (taken < steps.length && budget.fits(steps[taken]!.tokens)) budget.add(steps[taken++]!.tokens);
      if (taken < steps.length) capReached = true;
      if (taken === 0) {
        deferred.push({ model_id: candidate.modelId, reason: 'work_item_full' });
        continue;
      }
      const planned = plannedModel(snapshot, candidate.modelId, steps.slice(0, taken));
      models.push({ ...planned, stopped_by: taken < steps.length ? budget.exhaustedBy() : stop });
      continue;
    }

    const { row } = candidate;
    if (capReached) {
      counters.samples_deferred_cap++;
      continue;
    }
    const chosen = checkpointOf.get(row.model_id);
    if (row.checkpoint_id !== undefined && chosen !== undefined && chosen !== row.checkpoint_id) {
      counters.samples_deferred_checkpoint++;
      continue;
    }
    const tokens = tokensOf(row);
    if (!budget.fits(tokens)) {
      capReached = true;
      counters.samples_deferred_cap++;
      continue;
    }
    budget.add(tokens);
    if (row.checkpoint_id !== undefined) checkpointOf.set(row.model_id, row.checkpoint_id);
    samples.push({
      request_id: row.request_id,
      model_id: row.model_id,
      ...(row.checkpoint_id === undefined ? {} : { checkpoint_id: row.checkpoint_id }),
      tokens,
    });
  }

  for (const planned of models) {
    counters.steps_planned += planned.steps.length;
    for (const step of planned.steps) if (step.fail !== undefined) counters.fail_steps_planned++;
  }
  counters.samples_planned = samples.length;
  counters.requests = budget.requests;
  counters.tokens = budget.tokens;
  return { planned_at: now, models, samples, deferred, cap_reached: capReached, counters };
}

function plannedModel(
  snapshot: Snapshot,
  modelId: string,
  steps: readonly PlannedStep[],
): Omit<PlannedModel, 'stopped_by'> {
  // proposeRun only proposes runs for models present in the snapshot.
  const model = snapshot.models.get(modelId)!;
  return {
    model_id: modelId,
    tenant: model.tenant,
    expected_epoch: model.epoch,
    first_seq: steps[0]!.seq,
    last_seq: steps[steps.length - 1]!.seq,
    steps,
    base_applied_through: model.applied_through,
    ...(model.state_ref === undefined ? {} : { base_state_ref: model.state_ref }),
  };
}

function assertLimits(limits: PlanLimits): void {
  for (const [name, value] of Object.entries(limits)) {
    if (!Number.isInteger(value) || value < 1) {
      throw new ConfigError(`Plan limit ${name} must be a positive integer, got ${value}`, {
        context: { limit: name },
      });
    }
  }
  // The model row plus the costliest step must fit, or a lone save could never be dispatched.
  if (limits.maxCommitActions < MIN_COMMIT_ACTIONS || limits.maxCommitActions > TRANSACT_WRITE_MAX_ACTIONS) {
    const range = `${MIN_COMMIT_ACTIONS}..${TRANSACT_WRITE_MAX_ACTIONS}`;
    throw new ConfigError(`Plan limit maxCommitActions must lie in ${range}`, {
      context: { limit: 'maxCommitActions' },
    });
  }
}

function emptyCounters(): PlanCounters {
  return {
    rows_scanned: 0,
    rows_duplicate: 0,
    rows_not_pending: 0,
    rows_already_planned: 0,
    rows_malformed: 0,
    rows_duplicate_seq: 0,
    models_lease_expired: 0,
    steps_planned: 0,
    fail_steps_planned: 0,
    samples_planned: 0,
    samples_already_claimed: 0,
    samples_deferred_checkpoint: 0,
    samples_deferred_cap: 0,
    requests: 0,
    tokens: 0,
  };
}
