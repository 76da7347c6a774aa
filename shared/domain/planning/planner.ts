import { ConfigError } from '../../base/errors.js';
import type { LiveRow } from '../records.js';
import { WorkItemBudget } from './budget.js';
import { holdUntil } from './coalesce.js';
import { MIN_COMMIT_ACTIONS, type PlanLimits, TRANSACT_WRITE_MAX_ACTIONS } from './limits.js';
import { type ModelProposal, proposeRun, tokensOf } from './model-run.js';
import type {
  DeferredModel,
  HeldModel,
  Plan,
  PlanCounters,
  PlannedModel,
  PlannedSample,
  PlannedStep,
  PlanOptions,
  Snapshot,
} from './plan-types.js';
import { compareIds, indexSnapshot } from './snapshot-index.js';

type Candidate =
  | {
      readonly key: string;
      readonly kind: 'model';
      readonly modelId: string;
      readonly tenant: string;
      readonly proposal: RunProposal;
    }
  | { readonly key: string; readonly kind: 'sample'; readonly tenant: string; readonly row: LiveRow };

type RunProposal = Extract<ModelProposal, { kind: 'run' }>;

/** A tenant's candidates, oldest first, and how far the round-robin has taken them. */
interface TenantQueue {
  readonly candidates: Candidate[];
  /** Index of the candidate being taken. */
  next: number;
  /** Steps of that candidate (a model) taken so far. */
  taken: number;
}

/**
 * One tick's decision (R1-R5), pure. Every model's share is a contiguous run of seqs after its
 * planned_through (R5), cut by the tick rule (R2) and the caps; models in flight are skipped (R3);
 * samples follow R4.
 *
 * Fair across tenants, then across models: the work item is filled round-robin, one request (a
 * model's next step, or a sample) per tenant per round, tenants in the order of their oldest
 * pending request, and each tenant's requests oldest pending first (its models by their oldest
 * request, a model's steps in seq order). So a tenant's oldest request is preceded by at most one
 * request of each other tenant, whatever their backlogs: with T tenants waiting it is among the
 * plan's first T requests, and dispatched by this plan unless those T - 1 requests fill the work
 * item. Once a request does not fit, everything else waits for the next plan, so a large request
 * is never overtaken forever (its tenant's turn comes first once it is the oldest pending).
 * With a coalescing window (S5), a model whose run ends with a forward_backward that has just
 * arrived is held back whole (`Plan.held`) instead of being a candidate. O(n log n) in the scan's size.
 */
export function plan(snapshot: Snapshot, limits: PlanLimits, now: number, options: PlanOptions = {}): Plan {
  assertLimits(limits);
  const counters = emptyCounters();
  const indexed = indexSnapshot(snapshot, counters);
  const deferred: DeferredModel[] = [];
  const held: HeldModel[] = [];
  const candidates: Candidate[] = [];
  const windowMs = options.coalesceMs ?? 0;

  for (const [modelId, rows] of indexed.byModel) {
    const model = snapshot.models.get(modelId);
    const proposal = proposeRun(model, rows, limits, now, counters);
    if (proposal.kind === 'deferred') {
      deferred.push({ model_id: modelId, reason: proposal.reason });
      continue;
    }
    const until = holdUntil(proposal.steps, proposal.stop, limits, now, windowMs);
    if (until !== undefined) {
      held.push({ model_id: modelId, until });
      continue;
    }
    // proposeRun proposes runs only for models present in the snapshot.
    candidates.push({ key: rows.oldest, kind: 'model', modelId, tenant: model!.tenant, proposal });
  }
  for (const row of indexed.samples) {
    candidates.push({ key: row.request_id, kind: 'sample', tenant: tenantOf(row, snapshot), row });
  }
  const tenants = tenantQueues(candidates);

  const budget = new WorkItemBudget(limits);
  /** Steps taken per model, in the order models were first taken (the plan's dispatch order). */
  const stepsOf = new Map<string, { readonly candidate: Candidate & { kind: 'model' }; taken: number }>();
  const samples: PlannedSample[] = [];
  /** R4: the one checkpoint per model this work item samples from. */
  const checkpointOf = new Map<string, string>();
  let capReached = false;

  /** Takes the tenant's next request: false when the tenant has none left or the work item is full. */
  const takeOne = (queue: TenantQueue): boolean => {
    for (;;) {
      const candidate = queue.candidates[queue.next];
      if (candidate === undefined) return false;
      if (candidate.kind === 'model') {
        const step = candidate.proposal.steps[queue.taken];
        if (step === undefined) {
          queue.next++;
          queue.taken = 0;
          continue;
        }
        if (!budget.fits(step.tokens)) {
          capReached = true;
          return false;
        }
        budget.add(step.tokens);
        queue.taken++;
        const entry = stepsOf.get(candidate.modelId);
        if (entry === undefined) stepsOf.set(candidate.modelId, { candidate, taken: 1 });
        else entry.taken++;
        return true;
      }
      const { row } = candidate;
      queue.next++;
      const chosen = checkpointOf.get(row.model_id);
      if (row.checkpoint_id !== undefined && chosen !== undefined && chosen !== row.checkpoint_id) {
        // Waits for a work item sampling its checkpoint; the tenant's turn goes on.
        counters.samples_deferred_checkpoint++;
        continue;
      }
      const tokens = tokensOf(row);
      if (!budget.fits(tokens)) {
        capReached = true;
        queue.next--;
        return false;
      }
      budget.add(tokens);
      if (row.checkpoint_id !== undefined) checkpointOf.set(row.model_id, row.checkpoint_id);
      samples.push({
        request_id: row.request_id,
        model_id: row.model_id,
        ...(row.checkpoint_id === undefined ? {} : { checkpoint_id: row.checkpoint_id }),
        tokens,
      });
      return true;
    }
  };

  let active = tenants;
  while (active.length > 0 && !capReached) {
    const still: TenantQueue[] = [];
    for (const queue of active) {
      if (!takeOne(queue)) {
        if (capReached) break;
        continue;
      }
      still.push(queue);
    }
    active = still;
  }

  const models: PlannedModel[] = [];
  for (const { candidate, taken } of stepsOf.values()) {
    const { steps, stop } = candidate.proposal;
    const planned = plannedModel(snapshot, candidate.modelId, steps.slice(0, taken));
    models.push({ ...planned, stopped_by: taken < steps.length ? budget.exhaustedBy() : stop });
  }
  // What the work item had no room for waits for the next plan.
  for (const queue of tenants) {
    for (const candidate of queue.candidates) {
      if (candidate.kind === 'model' && !stepsOf.has(candidate.modelId)) {
        deferred.push({ model_id: candidate.modelId, reason: 'work_item_full' });
      }
    }
    if (!capReached) continue;
    for (let i = queue.next; i < queue.candidates.length; i++) {
      if (queue.candidates[i]!.kind === 'sample') counters.samples_deferred_cap++;
    }
  }
  samples.sort((a, b) => compareIds(a.request_id, b.request_id));

  for (const planned of models) {
    counters.steps_planned += planned.steps.length;
    for (const step of planned.steps) if (step.fail !== undefined) counters.fail_steps_planned++;
  }
  counters.samples_planned = samples.length;
  counters.models_held = held.length;
  counters.requests = budget.requests;
  counters.tokens = budget.tokens;
  return { planned_at: now, models, samples, deferred, held, cap_reached: capReached, counters };
}

/**
 * The tenant a sample is fair-shared under: the row's own (the `live` index projects it), else its
 * model row's when the snapshot holds one. A row from before the projection had it shares the
 * anonymous tenant '' with its like, which only makes them share one turn per round.
 */
function tenantOf(row: LiveRow, snapshot: Snapshot): string {
  return row.tenant ?? snapshot.models.get(row.model_id)?.tenant ?? '';
}

/** Candidates grouped by tenant, oldest first within each; tenants by their oldest candidate. */
function tenantQueues(candidates: Candidate[]): TenantQueue[] {
  candidates.sort((a, b) => compareIds(a.key, b.key));
  const byTenant = new Map<string, TenantQueue>();
  for (const candidate of candidates) {
    let queue = byTenant.get(candidate.tenant);
    if (queue === undefined) {
      queue = { candidates: [], next: 0, taken: 0 };
      byTenant.set(candidate.tenant, queue);
    }
    queue.candidates.push(candidate);
  }
  // Insertion order is the order of each tenant's oldest candidate.
  return [...byTenant.values()];
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
    models_held: 0,
    requests: 0,
    tokens: 0,
  };
}
