import { requestIdTime } from '../../base/ids.js';
import { DEFAULT_PLAN_LIMITS, type PlanLimits } from '../../domain/planning/limits.js';
import type { DeferReason, RunStop } from '../../domain/planning/plan-types.js';
import { plan } from '../../domain/planning/planner.js';
import { compareIds } from '../../domain/planning/snapshot-index.js';
import { isBarrier } from '../../domain/planning/tick-rule.js';
import type { LiveRow, ModelRow, RequestType } from '../../domain/records.js';
import type { CutRequestRecord, DrainRecord } from './controls.js';

/**
 * The operator's picture of a pool's queues, computed (purely) from what a tick reads: one scan of
 * the `live` index and the model rows it names. The CLI (`status`) and the status page show it.
 * Ages are in milliseconds relative to `generated_at`; times are epoch milliseconds.
 */

/** What the next tick would do for a model, as the planner decides it from the same snapshot. */
export interface NextTick {
  /** Training steps it would dispatch (seqs `first_seq..last_seq`). */
  readonly steps: number;
  readonly first_seq?: number;
  readonly last_seq?: number;
  /** Why the dispatched run ends there, e.g. `barrier` (R2). */
  readonly stopped_by?: RunStop;
  /** Why the model gets no steps, e.g. `inflight` (R3) or `head_not_visible` (R5). */
  readonly waits_for?: DeferReason;
  /** Samples of this model it would dispatch (R4). */
  readonly samples: number;
}

export interface InFlightStatus {
  /** The work item id on the model row (`<model_id>@<epoch>`). */
  readonly work_item: string;
  readonly epoch: number;
  readonly attempts: number;
  readonly lease_until: number | undefined;
  /** Time since the lease was granted or last renewed (`lease_until - lease length`). */
  readonly lease_age_ms: number | undefined;
  /** Negative once expired. */
  readonly lease_expires_in_ms: number | undefined;
  readonly lease_expired: boolean;
}

/** `base`: samples of a bare base model (no model row). `missing_row`: a broken invariant, shown as such. */
export type ModelState = 'active' | 'unloaded' | 'base' | 'missing_row';

export interface ModelQueueStatus {
  readonly model_id: string;
  readonly tenant?: string;
  readonly state: ModelState;
  /** Non-terminal requests (training steps and samples), those in flight included. */
  readonly pending: number;
  readonly pending_samples: number;
  /** Training steps planned into the work item in flight and not committed yet. */
  readonly in_flight_steps: number;
  readonly applied_through?: number;
  readonly planned_through?: number;
  /** The first barrier (optim_step, load_weights) not yet planned: passes after it wait for it (R2). */
  readonly first_barrier?: { readonly seq: number; readonly request_type: RequestType };
  readonly next_tick: NextTick;
  readonly in_flight?: InFlightStatus;
  readonly last_completed_at?: number;
  readonly last_completed_age_ms?: number;
  readonly oldest_pending_at?: number;
  readonly oldest_pending_age_ms?: number;
}

export interface PoolTotals {
  readonly models: number;
  readonly pending: number;
  readonly pending_samples: number;
  readonly in_flight_steps: number;
  readonly models_in_flight: number;
  readonly leases_expired: number;
  readonly next_tick_steps: number;
  readonly next_tick_samples: number;
  /** The next tick's work item would be full; more work waits for the tick after. */
  readonly next_tick_full: boolean;
  readonly oldest_pending_at?: number;
  readonly oldest_pending_age_ms?: number;
}

export interface QueueDepth {
  readonly visible: number;
  readonly in_flight: number;
}

/**
 * The dead-letter queues: `work_dlq` holds work items the worker failed on at every delivery (the
 * work queue's redrive), `stream_dlq` the failure records of stream batches the scheduler's mappings
 * gave up on. Anything on either needs an operator (`deadLetterCount`).
 */
export interface DeadLetterDepths {
  readonly work_dlq: QueueDepth;
  readonly stream_dlq: QueueDepth;
}

/** Messages on a dead-letter queue, whether or not someone is reading them right now. */
export function deadLetterCount(depth: QueueDepth): number {
  return depth.visible + depth.in_flight;
}

export interface PoolQueueStatus {
  readonly pool: string;
  readonly generated_at: number;
  readonly draining?: { readonly since: number; readonly requested_by: string; readonly reason?: string };
  readonly cut_requested_at?: number;
  readonly work_queue?: QueueDepth;
  readonly dead_letters?: DeadLetterDepths;
  readonly totals: PoolTotals;
  /** Oldest pending request first: the order in which the planner serves models. */
  readonly models: readonly ModelQueueStatus[];
}

export interface QueueStatusInput {
  readonly pool: string;
  readonly now: number;
  /** One scan of the pool's `live` index (any order; duplicates and terminal rows are tolerated). */
  readonly live: readonly LiveRow[];
  /** The model rows of the models the scan names (absent ones are reported as such). */
  readonly models: ReadonlyMap<string, ModelRow>;
  /** Lease length the scheduler grants and workers renew (tunable LEASE_SECONDS). */
  readonly leaseMs: number;
  readonly limits?: PlanLimits;
  readonly drain?: DrainRecord;
  readonly cut?: CutRequestRecord;
  readonly workQueue?: QueueDepth;
  readonly deadLetters?: DeadLetterDepths;
}

interface Accumulator {
  pending: number;
  samples: number;
  inFlightSteps: number;
  oldest?: string;
  firstBarrier?: { seq: number; request_type: RequestType };
}

/** Age in seconds of the oldest pending request (0 when none): what the scheduler's tick reports. */
export function oldestPendingAgeSeconds(
  live: readonly Pick<LiveRow, 'request_id' | 'status'>[],
  now: number,
): number {
  let oldest: string | undefined;
  for (const row of live) {
    if (row.status === 'pending' && (oldest === undefined || compareIds(row.request_id, oldest) < 0)) {
      oldest = row.request_id;
    }
  }
  return oldest === undefined ? 0 : Math.max(0, Math.floor((now - requestIdTime(oldest)) / 1000));
}

export function queueStatus(input: QueueStatusInput): PoolQueueStatus {
  const { now } = input;
  const rows = pendingRows(input.live);
  const byModel = new Map<string, Accumulator>();
  for (const row of rows) {
    let acc = byModel.get(row.model_id);
    if (acc === undefined) {
      acc = { pending: 0, samples: 0, inFlightSteps: 0 };
      byModel.set(row.model_id, acc);
    }
    acc.pending++;
    if (acc.oldest === undefined || compareIds(row.request_id, acc.oldest) < 0) acc.oldest = row.request_id;
    if (row.request_type === 'sample' || row.seq === undefined) {
      acc.samples++;
      continue;
    }
    const model = input.models.get(row.model_id);
    const planned = model?.planned_through ?? 0;
    if (row.seq <= planned) {
      if (row.seq > (model?.applied_through ?? 0)) acc.inFlightSteps++;
      continue;
    }
    if (isBarrier(row.request_type) && (acc.firstBarrier === undefined || row.seq < acc.firstBarrier.seq)) {
      acc.firstBarrier = { seq: row.seq, request_type: row.request_type };
    }
  }

  // The planner itself says what the next tick would do, so the picture cannot disagree with it.
  const next = plan({ live: rows, models: input.models }, input.limits ?? DEFAULT_PLAN_LIMITS, now);
  const nextTicks = new Map<string, { -readonly [K in keyof NextTick]: NextTick[K] }>();
  const nextOf = (modelId: string) => {
    let entry = nextTicks.get(modelId);
    if (entry === undefined) {
      entry = { steps: 0, samples: 0 };
      nextTicks.set(modelId, entry);
    }
    return entry;
  };
  for (const planned of next.models) {
    Object.assign(nextOf(planned.model_id), {
      steps: planned.steps.length,
      first_seq: planned.first_seq,
      last_seq: planned.last_seq,
      stopped_by: planned.stopped_by,
    });
  }
  for (const deferred of next.deferred) nextOf(deferred.model_id).waits_for = deferred.reason;
  for (const sample of next.samples) nextOf(sample.model_id).samples++;

  const models: ModelQueueStatus[] = [];
  for (const [modelId, acc] of byModel) {
    models.push(
      modelStatus(modelId, acc, input.models.get(modelId), nextTicks.get(modelId), now, input.leaseMs),
    );
  }
  models.sort(
    (a, b) => (a.oldest_pending_at ?? 0) - (b.oldest_pending_at ?? 0) || compareIds(a.model_id, b.model_id),
  );

  const oldest = models.reduce<number | undefined>(
    (min, model) =>
      model.oldest_pending_at === undefined || (min !== undefined && min <= model.oldest_pending_at)
        ? min
        : model.oldest_pending_at,
    undefined,
  );
  const totals: PoolTotals = {
    models: models.length,
    pending: sum(models, (model) => model.pending),
    pending_samples: sum(models, (model) => model.pending_samples),
    in_flight_steps: sum(models, (model) => model.in_flight_steps),
    models_in_flight: models.filter((model) => model.in_flight !== undefined).length,
    leases_expired: models.filter((model) => model.in_flight?.lease_expired === true).length,
    next_tick_steps: sum(models, (model) => model.next_tick.steps),
    next_tick_samples: sum(models, (model) => model.next_tick.samples),
    next_tick_full: next.cap_reached,
    ...(oldest === undefined ? {} : { oldest_pending_at: oldest, oldest_pending_age_ms: now - oldest }),
  };

  return {
    pool: input.pool,
    generated_at: now,
    ...(input.drain === undefined
      ? {}
      : {
          draining: {
            since: input.drain.since,
            requested_by: input.drain.requested_by,
            ...(input.drain.reason === undefined ? {} : { reason: input.drain.reason }),
          },
        }),
    ...(input.cut === undefined ? {} : { cut_requested_at: input.cut.requested_at }),
    ...(input.workQueue === undefined ? {} : { work_queue: input.workQueue }),
    ...(input.deadLetters === undefined ? {} : { dead_letters: input.deadLetters }),
    totals,
    models,
  };
}

/** Pending rows, each request once (a terminal copy in the scan wins over a stale pending one). */
function pendingRows(live: readonly LiveRow[]): LiveRow[] {
  const byId = new Map<string, LiveRow>();
  for (const row of live) {
    const seen = byId.get(row.request_id);
    if (seen === undefined || (seen.status === 'pending' && row.status !== 'pending')) {
      byId.set(row.request_id, row);
    }
  }
  return [...byId.values()].filter((row) => row.status === 'pending');
}

function modelStatus(
  modelId: string,
  acc: Accumulator,
  model: ModelRow | undefined,
  next: NextTick | undefined,
  now: number,
  leaseMs: number,
): ModelQueueStatus {
  const oldestAt = acc.oldest === undefined ? undefined : requestIdTime(acc.oldest);
  const state =
    model?.status ?? (acc.samples === acc.pending && modelId.startsWith('base:') ? 'base' : 'missing_row');
  return {
    model_id: modelId,
    ...(model === undefined ? {} : { tenant: model.tenant }),
    state,
    pending: acc.pending,
    pending_samples: acc.samples,
    in_flight_steps: acc.inFlightSteps,
    ...(model === undefined
      ? {}
      : { applied_through: model.applied_through, planned_through: model.planned_through }),
    ...(acc.firstBarrier === undefined ? {} : { first_barrier: acc.firstBarrier }),
    next_tick: next ?? { steps: 0, samples: 0 },
    ...(model?.inflight === undefined ? {} : { in_flight: inFlight(model, model.inflight, now, leaseMs) }),
    ...(model?.last_completed_at === undefined
      ? {}
      : { last_completed_at: model.last_completed_at, last_completed_age_ms: now - model.last_completed_at }),
    ...(oldestAt === undefined ? {} : { oldest_pending_at: oldestAt, oldest_pending_age_ms: now - oldestAt }),
  };
}

function inFlight(model: ModelRow, workItem: string, now: number, leaseMs: number): InFlightStatus {
  const until = model.lease_until;
  return {
    work_item: workItem,
    epoch: model.epoch,
    attempts: model.attempts,
    lease_until: until,
    lease_age_ms: until === undefined ? undefined : Math.max(0, now - (until - leaseMs)),
    lease_expires_in_ms: until === undefined ? undefined : until - now,
    lease_expired: until === undefined || until <= now,
  };
}

function sum<T>(items: readonly T[], value: (item: T) => number): number {
  return items.reduce((total, item) => total + value(item), 0);
}
