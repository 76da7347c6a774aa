import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { dispatchOrder, fairnessScene } from '../../bench/support/tenant-fairness.js';
import { ConfigError } from '../../shared/base/errors.js';
import { DEFAULT_PLAN_LIMITS, type PlanLimits, planLimitsFrom } from '../../shared/domain/planning/limits.js';
import { plan } from '../../shared/domain/planning/planner.js';
import { tickPrefixLength } from '../../shared/domain/planning/tick-rule.js';
import type { LiveRow } from '../../shared/domain/records.js';
import {
  dispatchedIds,
  modelRow,
  type QueueEntry,
  rid,
  rowsOf,
  skyrlPasses,
  skyrlRowsOf,
  skyrlSamples,
  skyrlSingles,
  snapshotOf,
  UNCAPPED,
} from '../support/scheduling-fixtures.js';
import { checkPlanInvariants } from '../support/scheduling-invariants.js';

const NOW = 1_000_000;

const trainingTypeOrSample = fc.constantFrom(
  'forward_backward',
  'forward',
  'optim_step',
  'save_weights',
  'load_weights',
  'sample',
) as fc.Arbitrary<'forward_backward' | 'forward' | 'optim_step' | 'save_weights' | 'load_weights' | 'sample'>;

function stepsOf(result: ReturnType<typeof plan>, modelId: string) {
  return result.models.find((model) => model.model_id === modelId)?.steps ?? [];
}

function typesOf(result: ReturnType<typeof plan>, modelId: string) {
  return stepsOf(result, modelId).map((step) => `${step.request_type}#${step.seq}`);
}

function deferralOf(result: ReturnType<typeof plan>, modelId: string) {
  return result.deferred.find((entry) => entry.model_id === modelId)?.reason;
}

describe("SkyRL's regression cases, adapted (per-model seqs, global request_id order)", () => {
  /** Runs SkyRL's literal finders and the planner on the same queue, so both sides of each case are checked. */
  function both(queue: QueueEntry[]) {
    const live = rowsOf(queue);
    const models = [...new Set(queue.filter((e) => e.type !== 'sample').map((e) => e.model))].map((id) =>
      modelRow(id),
    );
    const skyrl = skyrlRowsOf(live);
    return { live, result: plan(snapshotOf(live, models), UNCAPPED, NOW), skyrl };
  }

  it('one model [fb, optim, fb, optim]: the first optim is the only single; the tick dispatches fb1, optim2', () => {
    const { result, skyrl } = both([
      { model: 'a', type: 'forward_backward' },
      { model: 'a', type: 'optim_step' },
      { model: 'a', type: 'forward_backward' },
      { model: 'a', type: 'optim_step' },
    ]);
    expect(skyrlSingles(skyrl)).toEqual([rid(2)]);
    expect(skyrlPasses(skyrl)).toEqual([rid(1)]);
    expect(typesOf(result, 'a')).toEqual(['forward_backward#1', 'optim_step#2']);
    expect(result.models[0]?.stopped_by).toBe('barrier');
  });

  it('model_a optim and model_b optim with no passes: both', () => {
    const { result, skyrl } = both([
      { model: 'a', type: 'optim_step' },
      { model: 'b', type: 'optim_step' },
    ]);
    expect(skyrlSingles(skyrl)).toEqual([rid(1), rid(2)]);
    expect(typesOf(result, 'a')).toEqual(['optim_step#1']);
    expect(typesOf(result, 'b')).toEqual(['optim_step#1']);
  });

  it('model_a [fb1, optim2, fb3, optim4], model_b [optim5]: singles {optim2, optim5}', () => {
    const { result, skyrl } = both([
      { model: 'a', type: 'forward_backward' },
      { model: 'a', type: 'optim_step' },
      { model: 'a', type: 'forward_backward' },
      { model: 'a', type: 'optim_step' },
      { model: 'b', type: 'optim_step' },
    ]);
    expect(skyrlSingles(skyrl)).toEqual([rid(2), rid(5)]);
    expect(typesOf(result, 'a')).toEqual(['forward_backward#1', 'optim_step#2']);
    expect(typesOf(result, 'b')).toEqual(['optim_step#1']);
    expect(dispatchedIds(result)).toEqual(new Set([...skyrlPasses(skyrl), ...skyrlSingles(skyrl)]));
  });

  it('[fb a, optim a, fb a, fb b]: passes {1st, 4th}', () => {
    const { result, skyrl } = both([
      { model: 'a', type: 'forward_backward' },
      { model: 'a', type: 'optim_step' },
      { model: 'a', type: 'forward_backward' },
      { model: 'b', type: 'forward_backward' },
    ]);
    expect(skyrlPasses(skyrl)).toEqual([rid(1), rid(4)]);
    const passes = result.models.flatMap((m) => m.steps).filter((s) => s.request_type === 'forward_backward');
    expect(passes.map((s) => s.request_id).sort()).toEqual([rid(1), rid(4)]);
  });

  it('samples a ckpt_1, ckpt_2, ckpt_1 plus a base sample: {1st, 3rd, base}', () => {
    const { result, skyrl } = both([
      { model: 'a', type: 'sample', checkpoint: 'ckpt_1' },
      { model: 'a', type: 'sample', checkpoint: 'ckpt_2' },
      { model: 'a', type: 'sample', checkpoint: 'ckpt_1' },
      { model: 'base:tiny', type: 'sample' },
    ]);
    expect(skyrlSamples(skyrl)).toEqual([rid(1), rid(3), rid(4)]);
    expect(result.samples.map((s) => s.request_id)).toEqual([rid(1), rid(3), rid(4)]);
    expect(result.counters.samples_deferred_checkpoint).toBe(1);
  });

  it('525 pending passes over several models: all 525 in one plan', () => {
    const queue: QueueEntry[] = Array.from({ length: 525 }, (_, i) => ({
      model: `m${i % 7}`,
      type: 'forward_backward',
    }));
    const { result, skyrl } = both(queue);
    expect(skyrlPasses(skyrl)).toHaveLength(525);
    expect(dispatchedIds(result).size).toBe(525);
  });

  it('525 pending passes of one model: every one dispatched once, in order, in runs of at most 90', () => {
    const live = rowsOf(
      Array.from({ length: 525 }, () => ({ model: 'a', type: 'forward_backward' as const })),
    );
    let row = modelRow('a');
    const dispatched: number[] = [];
    for (let tick = 0; tick < 10 && dispatched.length < 525; tick++) {
      const result = plan(snapshotOf(live, [row]), DEFAULT_PLAN_LIMITS, NOW);
      const model = result.models[0]!;
      expect(model.steps.length).toBeLessThanOrEqual(90);
      dispatched.push(...model.steps.map((step) => step.seq));
      row = {
        ...row,
        epoch: row.epoch + 1,
        planned_through: model.last_seq,
        applied_through: model.last_seq,
      };
    }
    expect(dispatched).toEqual(Array.from({ length: 525 }, (_, i) => i + 1));
  });
});

describe('runs: contiguous from planned_through + 1 (R5)', () => {
  it('stops at the first seq the scan does not show, never skipping it', () => {
    const live = rowsOf(
      Array.from({ length: 6 }, () => ({ model: 'a', type: 'forward' as const })),
      { a: 2 },
    ).filter((row) => row.seq !== 5);
    const result = plan(
      snapshotOf(live, [modelRow('a', { planned_through: 2, applied_through: 2 })]),
      UNCAPPED,
      NOW,
    );
    expect(stepsOf(result, 'a').map((s) => s.seq)).toEqual([3, 4]);
    expect(result.models[0]).toMatchObject({ first_seq: 3, last_seq: 4, stopped_by: 'end_of_run' });
  });

  it('plans nothing for a model whose next seq is not visible yet', () => {
    const live = rowsOf(
      [
        { model: 'a', type: 'forward' },
        { model: 'a', type: 'forward' },
      ],
      { a: 3 },
    );
    const result = plan(
      snapshotOf(live, [modelRow('a', { planned_through: 2, applied_through: 2 })]),
      UNCAPPED,
      NOW,
    );
    expect(result.models).toEqual([]);
    expect(deferralOf(result, 'a')).toBe('head_not_visible');
  });

  it('ignores stale rows at or below planned_through and terminal rows the index still shows', () => {
    const pending = rowsOf(Array.from({ length: 5 }, () => ({ model: 'a', type: 'forward' as const })));
    const live: LiveRow[] = [
      { ...pending[0]!, status: 'pending' }, // seq 1, already applied: a stale index entry
      { ...pending[1]!, status: 'completed' }, // seq 2, terminal
      pending[2]!,
      { ...pending[3]!, status: 'failed' }, // seq 4: a terminal row above planned_through ends the run
      pending[4]!,
    ];
    const result = plan(
      snapshotOf(live, [modelRow('a', { planned_through: 2, applied_through: 2 })]),
      UNCAPPED,
      NOW,
    );
    expect(stepsOf(result, 'a').map((s) => s.seq)).toEqual([3]);
    expect(result.counters).toMatchObject({ rows_already_planned: 1, rows_not_pending: 2 });
  });

  it('a terminal copy of a row wins over a stale pending copy of the same request', () => {
    const [first, second] = rowsOf([
      { model: 'a', type: 'forward' },
      { model: 'a', type: 'forward' },
    ]);
    const live = [first!, second!, { ...first!, status: 'completed' as const }];
    const result = plan(snapshotOf(live, [modelRow('a')]), UNCAPPED, NOW);
    expect(result.models).toEqual([]);
    expect(result.counters.rows_duplicate).toBe(1);
  });

  it('accepts the scan in any order', () => {
    const live = rowsOf(
      Array.from({ length: 4 }, () => ({ model: 'a', type: 'forward' as const })),
    ).reverse();
    const result = plan(snapshotOf(live, [modelRow('a')]), UNCAPPED, NOW);
    expect(stepsOf(result, 'a').map((s) => s.seq)).toEqual([1, 2, 3, 4]);
  });

  it('stops before a seq that two request ids claim, and never guesses between them', () => {
    const live = rowsOf(Array.from({ length: 3 }, () => ({ model: 'a', type: 'forward' as const })));
    live.push({ ...live[1]!, request_id: rid(99) });
    const result = plan(snapshotOf(live, [modelRow('a')]), UNCAPPED, NOW);
    expect(stepsOf(result, 'a').map((s) => s.seq)).toEqual([1]);
    expect(result.models[0]?.stopped_by).toBe('duplicate_seq');
    expect(result.counters.rows_duplicate_seq).toBe(2);
  });

  it('ignores training rows without a seq', () => {
    const live: LiveRow[] = [
      { request_id: rid(1), model_id: 'a', request_type: 'forward', status: 'pending' },
    ];
    const result = plan(snapshotOf(live, [modelRow('a')]), UNCAPPED, NOW);
    expect(result.models).toEqual([]);
    expect(result.counters.rows_malformed).toBe(1);
  });

  it('carries the base state and the epoch read into the plan', () => {
    const live = rowsOf([{ model: 'a', type: 'forward' }], { a: 4 });
    const row = modelRow('a', {
      epoch: 7,
      planned_through: 4,
      applied_through: 4,
      state_ref: 'state/a/7.bin',
    });
    const result = plan(snapshotOf(live, [row]), UNCAPPED, NOW);
    expect(result.models[0]).toEqual({
      model_id: 'a',
      tenant: 'tenant-1',
      expected_epoch: 7,
      first_seq: 5,
      last_seq: 5,
      steps: [{ request_id: rid(1), seq: 5, request_type: 'forward', tokens: 0 }],
      base_applied_through: 4,
      base_state_ref: 'state/a/7.bin',
      stopped_by: 'end_of_run',
    });
  });
});

describe('models that are not planned (R3)', () => {
  const live = rowsOf([{ model: 'a', type: 'forward' }], { a: 3 });

  it('skips a model in flight, whether or not its lease has ended, and counts expired leases', () => {
    for (const lease_until of [NOW + 1, NOW - 1]) {
      const row = modelRow('a', {
        inflight: 'a@4',
        epoch: 4,
        planned_through: 3,
        applied_through: 1,
        lease_until,
      });
      const result = plan(snapshotOf(live, [row]), UNCAPPED, NOW);
      expect(result.models).toEqual([]);
      expect(deferralOf(result, 'a')).toBe('inflight');
      expect(result.counters.models_lease_expired).toBe(lease_until < NOW ? 1 : 0);
    }
  });

  it('skips a model whose row is missing from the snapshot', () => {
    const result = plan(snapshotOf(live, []), UNCAPPED, NOW);
    expect(result.models).toEqual([]);
    expect(deferralOf(result, 'a')).toBe('missing_model_row');
  });

  it('skips an idle model whose planned_through and applied_through disagree', () => {
    const row = modelRow('a', { planned_through: 3, applied_through: 2 });
    const result = plan(snapshotOf(live, [row]), UNCAPPED, NOW);
    expect(result.models).toEqual([]);
    expect(deferralOf(result, 'a')).toBe('row_inconsistent');
  });
});

describe('caps: truncate, never skip', () => {
  it('per model: at most maxStepsPerModel steps', () => {
    const live = rowsOf(Array.from({ length: 10 }, () => ({ model: 'a', type: 'forward' as const })));
    const result = plan(snapshotOf(live, [modelRow('a')]), { ...UNCAPPED, maxStepsPerModel: 4 }, NOW);
    expect(stepsOf(result, 'a').map((s) => s.seq)).toEqual([1, 2, 3, 4]);
    expect(result.models[0]?.stopped_by).toBe('model_steps');
  });

  it("per model: the commit's actions fit one transaction (saves also write name records)", () => {
    const saves = rowsOf(Array.from({ length: 80 }, () => ({ model: 'a', type: 'save_weights' as const })));
    const samplerSaves = rowsOf(
      Array.from({ length: 80 }, () => ({ model: 'b', type: 'save_weights_for_sampler' as const })),
    ).map((row) => ({ ...row, request_id: `s${row.request_id}` }));
    const result = plan(
      snapshotOf([...saves, ...samplerSaves], [modelRow('a'), modelRow('b')]),
      UNCAPPED,
      NOW,
    );
    // 1 (model row) + 2 per save <= 100; 1 + 3 per unnamed-capable sampler save <= 100.
    expect(stepsOf(result, 'a')).toHaveLength(49);
    expect(stepsOf(result, 'b')).toHaveLength(33);
    expect(result.models.map((m) => m.stopped_by)).toEqual(['commit_actions', 'commit_actions']);
  });

  it('per work item: requests; a truncated model keeps its prefix and younger models wait', () => {
    const live = rowsOf([
      ...Array.from({ length: 5 }, () => ({ model: 'a', type: 'forward' as const })),
      { model: 'b', type: 'forward' },
    ]);
    const limits = { ...UNCAPPED, maxWorkItemRequests: 3 };
    const result = plan(snapshotOf(live, [modelRow('a'), modelRow('b')]), limits, NOW);
    expect(stepsOf(result, 'a').map((s) => s.seq)).toEqual([1, 2, 3]);
    expect(result.models[0]?.stopped_by).toBe('work_item_requests');
    expect(result.cap_reached).toBe(true);
    expect(deferralOf(result, 'b')).toBe('work_item_full');
  });

  it('per work item: tokens, counted from LiveRow.tokens (absent counts as 0)', () => {
    const live = rowsOf([
      { model: 'a', type: 'forward', tokens: 40 },
      { model: 'a', type: 'forward' },
      { model: 'a', type: 'forward', tokens: 60 },
      { model: 'a', type: 'forward', tokens: 1 },
    ]);
    const result = plan(snapshotOf(live, [modelRow('a')]), { ...UNCAPPED, maxWorkItemTokens: 100 }, NOW);
    expect(stepsOf(result, 'a').map((s) => s.seq)).toEqual([1, 2, 3]);
    expect(result.counters.tokens).toBe(100);
    expect(result.models[0]?.stopped_by).toBe('work_item_tokens');
  });

  it('a request larger than the token cap goes alone in a work item, so it never stalls', () => {
    const live = rowsOf([
      { model: 'a', type: 'forward', tokens: 10 },
      { model: 'b', type: 'forward', tokens: 500 },
      { model: 'b', type: 'forward', tokens: 1 },
    ]);
    const limits = { ...UNCAPPED, maxWorkItemTokens: 100 };
    const first = plan(snapshotOf(live, [modelRow('a'), modelRow('b')]), limits, NOW);
    expect(first.models.map((m) => m.model_id)).toEqual(['a']);
    expect(deferralOf(first, 'b')).toBe('work_item_full');

    // Next tick: a is in flight, so b's oversized request is first, and alone.
    const aInFlight = modelRow('a', { inflight: 'a@1', epoch: 1, planned_through: 1 });
    const second = plan(snapshotOf(live, [aInFlight, modelRow('b')]), limits, NOW);
    expect(stepsOf(second, 'b').map((s) => s.seq)).toEqual([1]);
    expect(second.counters).toMatchObject({ requests: 1, tokens: 500 });
  });

  it('samples count toward the caps', () => {
    const live = rowsOf([
      { model: 'base:tiny', type: 'sample', tokens: 30 },
      { model: 'a', type: 'forward', tokens: 30 },
      { model: 'base:tiny', type: 'sample', tokens: 30 },
      { model: 'base:tiny', type: 'sample', tokens: 30 },
    ]);
    const result = plan(snapshotOf(live, [modelRow('a')]), { ...UNCAPPED, maxWorkItemTokens: 90 }, NOW);
    expect([...dispatchedIds(result)].sort()).toEqual([rid(1), rid(2), rid(3)]);
    expect(result.counters.samples_deferred_cap).toBe(1);
  });

  it('rejects limits that could stall a model', () => {
    const snapshot = snapshotOf([], []);
    expect(() => plan(snapshot, { ...DEFAULT_PLAN_LIMITS, maxStepsPerModel: 0 }, NOW)).toThrow(ConfigError);
    expect(() => plan(snapshot, { ...DEFAULT_PLAN_LIMITS, maxCommitActions: 3 }, NOW)).toThrow(ConfigError);
    expect(() => plan(snapshot, { ...DEFAULT_PLAN_LIMITS, maxCommitActions: 101 }, NOW)).toThrow(ConfigError);
  });

  it('reads its limits from the tunables', () => {
    const limits: PlanLimits = planLimitsFrom({
      maxStepsPerModel: 7,
      maxWorkItemRequests: 8,
      maxWorkItemTokens: 9,
      maxAttempts: 2,
    });
    expect(limits).toEqual({
      maxStepsPerModel: 7,
      maxCommitActions: 100,
      maxWorkItemRequests: 8,
      maxWorkItemTokens: 9,
      maxAttempts: 2,
    });
  });
});

describe('fairness: oldest pending request first', () => {
  it('orders models by their oldest pending request, not by their names or backlog', () => {
    const live = rowsOf([
      { model: 'z', type: 'forward' },
      { model: 'a', type: 'forward' },
      { model: 'z', type: 'forward' },
    ]);
    const result = plan(snapshotOf(live, [modelRow('a'), modelRow('z')]), UNCAPPED, NOW);
    expect(result.models.map((m) => m.model_id)).toEqual(['z', 'a']);
  });

  it('a model with 10,000 pending passes does not keep 10 other models out of the same tick', () => {
    const hog = rowsOf(
      Array.from({ length: 10_000 }, () => ({ model: 'hog', type: 'forward_backward' as const })),
    );
    const others = Array.from({ length: 10 }, (_, i) => `m${i}`);
    const late = rowsOf(
      others.flatMap((model) => [
        { model, type: 'forward_backward' as const },
        { model, type: 'optim_step' as const },
      ]),
    ).map((row) => ({ ...row, request_id: `s${row.request_id}` })); // submitted after the whole backlog
    const models = [modelRow('hog'), ...others.map((id) => modelRow(id))];
    const result = plan(snapshotOf([...hog, ...late], models), DEFAULT_PLAN_LIMITS, NOW);
    expect(result.models.map((m) => m.model_id)).toEqual(['hog', ...others]);
    expect(stepsOf(result, 'hog')).toHaveLength(90);
    for (const model of others)
      expect(typesOf(result, model)).toEqual(['forward_backward#1', 'optim_step#2']);
    expect(result.cap_reached).toBe(false);
  });
});

describe('fail steps: unloaded models and exhausted attempts', () => {
  it('an unloaded model gets its pending requests as user-error fail steps, barriers ignored', () => {
    const live = rowsOf(
      [
        { model: 'a', type: 'forward_backward' },
        { model: 'a', type: 'optim_step' },
        { model: 'a', type: 'forward_backward', tokens: 500 },
      ],
      { a: 5 },
    );
    const row = modelRow('a', { status: 'unloaded', planned_through: 5, applied_through: 5 });
    const result = plan(snapshotOf(live, [row]), { ...UNCAPPED, maxWorkItemTokens: 10 }, NOW);
    const steps = stepsOf(result, 'a');
    expect(steps.map((s) => s.seq)).toEqual([6, 7, 8]);
    for (const step of steps) expect(step).toMatchObject({ tokens: 0, fail: { category: 'user' } });
    expect(result.counters.fail_steps_planned).toBe(3);
  });

  it('after K attempts the first step alone fails with a server error', () => {
    const live = rowsOf(Array.from({ length: 3 }, () => ({ model: 'a', type: 'forward' as const })));
    const exhausted = plan(snapshotOf(live, [modelRow('a', { attempts: 3 })]), UNCAPPED, NOW);
    expect(stepsOf(exhausted, 'a')).toEqual([
      {
        request_id: rid(1),
        seq: 1,
        request_type: 'forward',
        tokens: 0,
        fail: expect.objectContaining({ category: 'server' }),
      },
    ]);
    expect(exhausted.models[0]?.stopped_by).toBe('attempts_exhausted');
    const notYet = plan(snapshotOf(live, [modelRow('a', { attempts: 2 })]), UNCAPPED, NOW);
    expect(stepsOf(notYet, 'a').map((s) => s.fail)).toEqual([undefined, undefined, undefined]);
  });
});

describe('samples (R4)', () => {
  it('skips samples already claimed, without letting them pick the checkpoint', () => {
    const live = rowsOf([
      { model: 'a', type: 'sample', checkpoint: 'ckpt_1' },
      { model: 'a', type: 'sample', checkpoint: 'ckpt_2' },
      { model: 'a', type: 'sample', checkpoint: 'ckpt_1' },
    ]);
    const result = plan(snapshotOf(live, [], [rid(1)]), UNCAPPED, NOW);
    expect(result.samples.map((s) => s.request_id)).toEqual([rid(2)]);
    expect(result.counters).toMatchObject({ samples_already_claimed: 1, samples_deferred_checkpoint: 1 });
  });

  it('ignores barriers and in-flight training of their model', () => {
    const live = rowsOf([
      { model: 'a', type: 'optim_step' },
      { model: 'a', type: 'sample', checkpoint: 'ckpt_1' },
      { model: 'a', type: 'forward_backward' },
    ]);
    const row = modelRow('a', { inflight: 'a@1', epoch: 1, planned_through: 1 });
    const result = plan(snapshotOf(live, [row]), UNCAPPED, NOW);
    expect(result.models).toEqual([]);
    expect(result.samples).toEqual([
      { request_id: rid(2), model_id: 'a', checkpoint_id: 'ckpt_1', tokens: 0 },
    ]);
  });

  it('one checkpoint per model per work item, independently for each model', () => {
    const live = rowsOf([
      { model: 'a', type: 'sample', checkpoint: 'a1' },
      { model: 'b', type: 'sample', checkpoint: 'b1' },
      { model: 'a', type: 'sample', checkpoint: 'a2' },
      { model: 'b', type: 'sample', checkpoint: 'b1' },
      { model: 'a', type: 'sample', checkpoint: 'a1' },
    ]);
    const result = plan(snapshotOf(live, []), UNCAPPED, NOW);
    expect(result.samples.map((s) => s.request_id)).toEqual([rid(1), rid(2), rid(4), rid(5)]);
  });
});

describe('tickPrefixLength (R2)', () => {
  it('ends at the first pass after a barrier', () => {
    expect(tickPrefixLength([])).toBe(0);
    expect(tickPrefixLength(['forward', 'forward_backward', 'save_weights'])).toBe(3);
    expect(tickPrefixLength(['forward_backward', 'optim_step', 'save_weights', 'forward'])).toBe(3);
    expect(tickPrefixLength(['load_weights', 'optim_step', 'save_weights_for_sampler', 'forward'])).toBe(3);
    expect(tickPrefixLength(['create_model', 'forward_backward', 'optim_step', 'forward_backward'])).toBe(3);
  });
});

describe('fairness across tenants (hardening finding 1)', () => {
  // The bound: a tenant's oldest pending request is preceded in a plan by at most one request of
  // each other tenant, so with T tenants waiting it is dispatched by the first plan whenever the
  // work item has room for T requests of their sizes.
  const tokensPerRequest = 262_144;
  const limits = DEFAULT_PLAN_LIMITS; // 256 requests, 4,194,304 tokens: 16 such passes per item

  it("another tenant's 46-request backlog no longer delays a lone request past the first work item", () => {
    const fair = dispatchOrder(fairnessScene({ backlog: 46, tokensPerRequest }), limits);
    // Taken second (round 1: busy-0's pass, then it); listed after busy-0's whole run (pass, optim).
    expect(fair).toMatchObject({
      workItem: 1,
      position: 3,
      requestsBefore: 2,
      tokensBefore: tokensPerRequest,
    });
    // The same scene with the tenants erased is the order before fairness: oldest pending first.
    const blind = dispatchOrder(fairnessScene({ backlog: 46, tokensPerRequest, tenantBlind: true }), limits);
    expect(blind).toMatchObject({ workItem: 2, position: 47, requestsBefore: 46 });
  });

  it('round-robin: one request per tenant per round, each tenant oldest first', () => {
    const live = rowsOf([
      { model: 'a1', type: 'forward_backward' },
      { model: 'a1', type: 'forward_backward' },
      { model: 'a2', type: 'forward_backward' },
      { model: 'b1', type: 'forward_backward' },
      { model: 'c1', type: 'sample' },
    ]).map((row) => ({ ...row, tenant: row.model_id.slice(0, 1) }));
    const models = [
      modelRow('a1', { tenant: 'a' }),
      modelRow('a2', { tenant: 'a' }),
      modelRow('b1', { tenant: 'b' }),
    ];
    const capped = { ...UNCAPPED, maxWorkItemRequests: 3 };
    const result = plan(snapshotOf(live, models), capped, NOW);
    // Round 1: a1's first step, b1, c's sample; a1's second step and a2 wait.
    expect(typesOf(result, 'a1')).toEqual(['forward_backward#1']);
    expect(typesOf(result, 'b1')).toEqual(['forward_backward#1']);
    expect(result.samples.map((sample) => sample.request_id)).toEqual([rid(5)]);
    expect(stepsOf(result, 'a2')).toEqual([]);
    expect(deferralOf(result, 'a2')).toBe('work_item_full');
    expect(result.cap_reached).toBe(true);
    // With room, every tenant's whole runs go, a's models in their oldest-first order.
    const all = plan(snapshotOf(live, models), UNCAPPED, NOW);
    expect(all.models.map((model) => model.model_id)).toEqual(['a1', 'b1', 'a2']);
    expect(typesOf(all, 'a1')).toEqual(['forward_backward#1', 'forward_backward#2']);
  });

  it("a sample's tenant comes from its row, else from its model's row", () => {
    const live = [
      ...rowsOf(Array.from({ length: 4 }, () => ({ model: 'busy', type: 'forward_backward' as const }))),
      {
        request_id: rid(90),
        model_id: 'base:tiny',
        tenant: 'quiet',
        request_type: 'sample' as const,
        status: 'pending' as const,
      },
      { request_id: rid(91), model_id: 'owned', request_type: 'sample' as const, status: 'pending' as const },
    ];
    const models = [modelRow('busy', { tenant: 'loud' }), modelRow('owned', { tenant: 'third' })];
    const result = plan(snapshotOf(live, models), { ...UNCAPPED, maxWorkItemRequests: 3 }, NOW);
    expect(stepsOf(result, 'busy')).toHaveLength(1);
    expect(result.samples.map((sample) => sample.request_id)).toEqual([rid(90), rid(91)]);
  });

  it('property: whatever the other tenants hold, a lone request is dispatched by the first plan', () => {
    const backlogArb = fc.array(
      fc.record({
        models: fc.integer({ min: 1, max: 6 }),
        queue: fc.array(fc.record({ type: trainingTypeOrSample, tokens: fc.nat(1000) }), { maxLength: 60 }),
      }),
      { minLength: 1, maxLength: 5 },
    );
    fc.assert(
      fc.property(
        backlogArb,
        fc.nat(1000),
        fc.boolean(),
        fc.integer({ min: 0, max: 300 }),
        (tenants, loneTokens, loneIsSample, extraRoom) => {
          const live: LiveRow[] = [];
          const models = [];
          let id = 0;
          tenants.forEach((spec, t) => {
            const seqOf = new Map<string, number>();
            for (let m = 0; m < spec.models; m++) models.push(modelRow(`t${t}-m${m}`, { tenant: `t${t}` }));
            spec.queue.forEach((entry, i) => {
              const modelId = `t${t}-m${i % spec.models}`;
              const base = {
                request_id: rid(++id),
                model_id: modelId,
                tenant: `t${t}`,
                status: 'pending' as const,
              };
              if (entry.type === 'sample') {
                live.push({
                  ...base,
                  request_type: 'sample',
                  tokens: entry.tokens,
                  checkpoint_id: `c${i % 3}`,
                });
                return;
              }
              const seq = (seqOf.get(modelId) ?? 0) + 1;
              seqOf.set(modelId, seq);
              live.push({ ...base, request_type: entry.type, seq, tokens: entry.tokens });
            });
          });
          models.push(modelRow('lone', { tenant: 'lone' }));
          const lone = rid(++id);
          live.push(
            loneIsSample
              ? {
                  request_id: lone,
                  model_id: 'lone',
                  tenant: 'lone',
                  request_type: 'sample',
                  status: 'pending',
                  tokens: loneTokens,
                }
              : {
                  request_id: lone,
                  model_id: 'lone',
                  tenant: 'lone',
                  request_type: 'forward_backward',
                  seq: 1,
                  status: 'pending',
                  tokens: loneTokens,
                },
          );
          const waiting = tenants.length + 1;
          // Room for one request of each tenant, of the largest size drawn (1,000 tokens).
          const roomy: PlanLimits = {
            ...DEFAULT_PLAN_LIMITS,
            maxWorkItemRequests: waiting + extraRoom,
            maxWorkItemTokens: waiting * 1000,
          };
          const snapshot = snapshotOf(live, models);
          const result = plan(snapshot, roomy, NOW);
          checkPlanInvariants(snapshot, roomy, result);
          expect(dispatchedIds(result)).toContain(lone);
        },
      ),
    );
  });
});
