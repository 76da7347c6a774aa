/**
 * Test fixtures for the planner suites (planner*.test.ts, scheduling-*.test.ts): row builders and an
 * independent, literal transcription of SkyRL's finders (docs/design.md#r2) used as an oracle.
 */
import fc from 'fast-check';
import type { PlanLimits } from '../../shared/domain/planning/limits.js';
import type { Plan, Snapshot } from '../../shared/domain/planning/plan-types.js';
import type { LiveRow, ModelRow, RequestType, TrainingRequestType } from '../../shared/domain/records.js';
import { seededRandom } from './seeded-random.js';

/** Time-ordered request ids that sort as strings: `r00000001`, `r00000002`, ... */
export function rid(n: number): string {
  return `r${String(n).padStart(8, '0')}`;
}

export function modelRow(modelId: string, fields: Partial<ModelRow> = {}): ModelRow {
  return {
    model_id: modelId,
    tenant: 'tenant-1',
    session_id: 'sess-1',
    base_model: 'tiny',
    lora_config: { rank: 4 },
    status: 'active',
    epoch: 0,
    planned_through: 0,
    applied_through: 0,
    attempts: 0,
    created_at: 0,
    ...fields,
  };
}

export interface QueueEntry {
  readonly model: string;
  readonly type: RequestType;
  readonly checkpoint?: string;
  readonly tokens?: number;
}

/**
 * Pending rows for a global queue in submit order: request ids follow queue order, training
 * requests take per-model seqs after `startSeq[model]` (default 0).
 */
export function rowsOf(
  queue: readonly QueueEntry[],
  startSeq: Readonly<Record<string, number>> = {},
): LiveRow[] {
  const next = new Map<string, number>();
  return queue.map((entry, index) => {
    const base = {
      request_id: rid(index + 1),
      model_id: entry.model,
      request_type: entry.type,
      status: 'pending' as const,
      ...(entry.tokens === undefined ? {} : { tokens: entry.tokens }),
    };
    if (entry.type === 'sample') {
      return entry.checkpoint === undefined ? base : { ...base, checkpoint_id: entry.checkpoint };
    }
    const seq = (next.get(entry.model) ?? startSeq[entry.model] ?? 0) + 1;
    next.set(entry.model, seq);
    return { ...base, seq };
  });
}

export function snapshotOf(
  live: readonly LiveRow[],
  models: readonly ModelRow[],
  sampleClaims: readonly string[] = [],
): Snapshot {
  return {
    live,
    models: new Map(models.map((model) => [model.model_id, model])),
    sampleClaims: new Set(sampleClaims),
  };
}

/** Caps large enough never to bind (commit actions stay at the transaction's 100). */
export const UNCAPPED: PlanLimits = {
  maxStepsPerModel: 1_000_000,
  maxCommitActions: 100,
  maxWorkItemRequests: 1_000_000,
  maxWorkItemTokens: 1_000_000_000,
  maxAttempts: 3,
};

/** Every request id a plan dispatches (training steps and samples). */
export function dispatchedIds(plan: Plan): Set<string> {
  const ids = new Set<string>();
  for (const model of plan.models) for (const step of model.steps) ids.add(step.request_id);
  for (const sample of plan.samples) ids.add(sample.request_id);
  return ids;
}

// ---- SkyRL's finders, transcribed literally (own type lists, global id order, pending rows only) ----

const SKYRL_BARRIERS = ['optim_step', 'load_weights'];
const SKYRL_PASSES = ['forward_backward', 'forward'];
const SKYRL_SINGLES = [
  'create_model',
  'optim_step',
  'save_weights',
  'save_weights_for_sampler',
  'load_weights',
  'unload_model',
];

export interface SkyrlRow {
  readonly id: string;
  readonly model: string;
  readonly type: RequestType;
  readonly checkpoint?: string;
}

/** B[model]: the smallest pending barrier id per model. */
function skyrlBarriers(rows: readonly SkyrlRow[]): Map<string, string> {
  const barrier = new Map<string, string>();
  for (const row of rows) {
    if (!SKYRL_BARRIERS.includes(row.type)) continue;
    const current = barrier.get(row.model);
    if (current === undefined || row.id < current) barrier.set(row.model, row.id);
  }
  return barrier;
}

export function skyrlPasses(rows: readonly SkyrlRow[]): string[] {
  const barrier = skyrlBarriers(rows);
  return rows
    .filter((row) => SKYRL_PASSES.includes(row.type))
    .filter((row) => {
      const b = barrier.get(row.model);
      return b === undefined || row.id < b;
    })
    .map((row) => row.id)
    .sort();
}

export function skyrlSingles(rows: readonly SkyrlRow[]): string[] {
  const barrier = skyrlBarriers(rows);
  // P[model]: the first pass with id >= B[model].
  const firstBlocked = new Map<string, string>();
  for (const row of rows) {
    if (!SKYRL_PASSES.includes(row.type)) continue;
    const b = barrier.get(row.model);
    if (b === undefined || row.id < b) continue;
    const current = firstBlocked.get(row.model);
    if (current === undefined || row.id < current) firstBlocked.set(row.model, row.id);
  }
  return rows
    .filter((row) => SKYRL_SINGLES.includes(row.type))
    .filter((row) => {
      const p = firstBlocked.get(row.model);
      return p === undefined || row.id < p;
    })
    .map((row) => row.id)
    .sort();
}

export function skyrlSamples(rows: readonly SkyrlRow[]): string[] {
  const claimed = new Map<string, string>();
  const taken: string[] = [];
  for (const row of [...rows].sort((a, b) => (a.id < b.id ? -1 : 1))) {
    if (row.type !== 'sample') continue;
    if (row.checkpoint === undefined) {
      taken.push(row.id);
      continue;
    }
    const owner = claimed.get(row.model);
    if (owner === undefined) claimed.set(row.model, row.checkpoint);
    if (owner === undefined || owner === row.checkpoint) taken.push(row.id);
  }
  return taken;
}

export function skyrlRowsOf(live: readonly LiveRow[]): SkyrlRow[] {
  return live.map((row) => ({
    id: row.request_id,
    model: row.model_id,
    type: row.request_type,
    ...(row.checkpoint_id === undefined ? {} : { checkpoint: row.checkpoint_id }),
  }));
}

export const prng = seededRandom;

// ---- fast-check arbitraries shared by the property suites ----

/** Training request types, weighted towards passes and barriers (where R2 bites). */
export const trainingType: fc.Arbitrary<TrainingRequestType> = fc.oneof(
  { weight: 5, arbitrary: fc.constantFrom<TrainingRequestType>('forward_backward', 'forward') },
  { weight: 3, arbitrary: fc.constantFrom<TrainingRequestType>('optim_step', 'load_weights') },
  {
    weight: 2,
    arbitrary: fc.constantFrom<TrainingRequestType>(
      'save_weights',
      'save_weights_for_sampler',
      'create_model',
      'unload_model',
    ),
  },
);

export const limitsArb: fc.Arbitrary<PlanLimits> = fc.record({
  maxStepsPerModel: fc.integer({ min: 1, max: 12 }),
  maxCommitActions: fc.integer({ min: 4, max: 100 }),
  maxWorkItemRequests: fc.integer({ min: 1, max: 40 }),
  maxWorkItemTokens: fc.integer({ min: 1, max: 300 }),
  maxAttempts: fc.integer({ min: 1, max: 4 }),
});
