import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ENGINE_COALESCE_WINDOW_MS,
  engineCoalesceWindowMs,
  MAX_COALESCE_WINDOW_MS,
  readConfig,
} from '../../shared/base/config.js';
import { ConfigError } from '../../shared/base/errors.js';
import { mintRequestId } from '../../shared/base/ids.js';
import { holdUntil, holdWait, OLDEST_STEP_WINDOWS } from '../../shared/domain/planning/coalesce.js';
import type { Plan } from '../../shared/domain/planning/plan-types.js';
import { plan } from '../../shared/domain/planning/planner.js';
import type { LiveRow, TrainingRequestType } from '../../shared/domain/records.js';
import { HeldModels } from '../../shared/services/scheduler/holds.js';
import { modelRow, snapshotOf, trainingType, UNCAPPED } from '../support/scheduling-fixtures.js';
import { checkPlanInvariants } from '../support/scheduling-invariants.js';

/** S5: the coalescing window (docs/design.md, "S5 One SDK step, one work item"). */

const NOW = 1_700_000_000_000;
const W = 25;

interface Submit {
  readonly type: TrainingRequestType;
  /** How long before NOW it was submitted (ms; negative: the API's clock is ahead of the scheduler's). */
  readonly age: number;
}

let salt = 0;
/** One model's pending run, seqs 1.. in submit order, with time-ordered request ids. */
function runOf(model: string, submits: readonly Submit[]): LiveRow[] {
  return submits.map((submit, index) => ({
    request_id: mintRequestId(NOW - submit.age, Buffer.alloc(10, ++salt % 256)),
    model_id: model,
    seq: index + 1,
    request_type: submit.type,
    status: 'pending' as const,
  }));
}

function planned(
  live: readonly LiveRow[],
  options: { now?: number; window?: number; unloaded?: string[] } = {},
) {
  const models = [...new Set(live.map((row) => row.model_id))].map((id) =>
    modelRow(id, options.unloaded?.includes(id) ? { status: 'unloaded' } : {}),
  );
  return plan(snapshotOf(live, models), UNCAPPED, options.now ?? NOW, { coalesceMs: options.window ?? W });
}

function typesOf(result: Plan, model: string): string[] {
  return (result.models.find((m) => m.model_id === model)?.steps ?? []).map((step) => step.request_type);
}

describe('S5: a run that ends with a pass that has just arrived is held back', () => {
  it('holds a lone forward_backward submitted 5 ms ago until its window ends, dispatching nothing of it', () => {
    const live = runOf('a', [{ type: 'forward_backward', age: 5 }]);
    const result = planned(live);
    expect(result.models).toEqual([]);
    expect(result.deferred).toEqual([]);
    expect(result.held).toEqual([{ model_id: 'a', until: NOW - 5 + W }]);
    expect(result.counters.models_held).toBe(1);
  });

  it('dispatches forward_backward and optim_step together once both are visible', () => {
    const live = runOf('a', [
      { type: 'forward_backward', age: 5 },
      { type: 'optim_step', age: 2 },
    ]);
    const result = planned(live);
    expect(result.held).toEqual([]);
    expect(typesOf(result, 'a')).toEqual(['forward_backward', 'optim_step']);
  });

  it('dispatches a pass whose window is over, and every pass when the window is 0', () => {
    expect(typesOf(planned(runOf('a', [{ type: 'forward_backward', age: W }])), 'a')).toEqual([
      'forward_backward',
    ]);
    const fresh = runOf('a', [{ type: 'forward_backward', age: 0 }]);
    expect(typesOf(planned(fresh, { window: 0 }), 'a')).toEqual(['forward_backward']);
    expect(plan(snapshotOf(fresh, [modelRow('a')]), UNCAPPED, NOW).held).toEqual([]);
  });

  it('holds the whole run before the trailing forward_backward, never part of it', () => {
    const live = runOf('a', [
      { type: 'save_weights', age: 8 },
      { type: 'forward', age: 6 },
      { type: 'forward_backward', age: 1 },
    ]);
    const result = planned(live);
    expect(result.models).toEqual([]);
    expect(result.held).toEqual([{ model_id: 'a', until: NOW - 1 + W }]);
  });

  it('never holds a run that ends with a forward: no barrier belongs to it', () => {
    const live = runOf('a', [
      { type: 'forward_backward', age: 3 },
      { type: 'forward', age: 1 },
    ]);
    const result = planned(live);
    expect(result.held).toEqual([]);
    expect(typesOf(result, 'a')).toEqual(['forward_backward', 'forward']);
  });

  it('never holds a run that ends with a barrier or a single, or one R2 already cut', () => {
    const endsWithSingle = runOf('a', [
      { type: 'forward_backward', age: 3 },
      { type: 'optim_step', age: 2 },
      { type: 'save_weights_for_sampler', age: 1 },
    ]);
    expect(planned(endsWithSingle).held).toEqual([]);
    // [optim, fb]: R2 dispatches the optim_step alone; the new pass waits for its commit anyway (R3).
    const cut = runOf('b', [
      { type: 'optim_step', age: 4 },
      { type: 'forward_backward', age: 1 },
    ]);
    const result = planned(cut);
    expect(result.held).toEqual([]);
    expect(typesOf(result, 'b')).toEqual(['optim_step']);
  });

  it('never holds a run that fills the per-model step cap (the barrier could not join it)', () => {
    const live = runOf('a', [
      { type: 'forward_backward', age: 3 },
      { type: 'forward_backward', age: 1 },
    ]);
    const result = plan(snapshotOf(live, [modelRow('a')]), { ...UNCAPPED, maxStepsPerModel: 2 }, NOW, {
      coalesceMs: W,
    });
    expect(result.held).toEqual([]);
    expect(typesOf(result, 'a')).toEqual(['forward_backward', 'forward_backward']);
  });

  it('never holds fail steps (an unloaded model), nor models that are not plannable', () => {
    const live = runOf('a', [{ type: 'forward_backward', age: 1 }]);
    expect(planned(live, { unloaded: ['a'] }).held).toEqual([]);
    const inflight = plan(
      snapshotOf(live, [modelRow('a', { inflight: 'wi-x', lease_until: NOW + 60_000 })]),
      UNCAPPED,
      NOW,
      { coalesceMs: W },
    );
    expect(inflight.held).toEqual([]);
    expect(inflight.deferred).toEqual([{ model_id: 'a', reason: 'inflight' }]);
  });

  it('bounds the hold by the oldest step: a stream of passes cannot hold a model forever', () => {
    const bound = OLDEST_STEP_WINDOWS * W;
    const stillHeld = runOf('a', [
      { type: 'forward_backward', age: bound - 10 },
      { type: 'forward_backward', age: 1 },
    ]);
    expect(planned(stillHeld).held).toEqual([{ model_id: 'a', until: NOW + 10 }]);
    const tooOld = runOf('b', [
      { type: 'forward_backward', age: bound },
      { type: 'forward_backward', age: 1 },
    ]);
    expect(typesOf(planned(tooOld), 'b')).toEqual(['forward_backward', 'forward_backward']);
  });

  it('holds at most one window past the scheduler clock when the submit time is ahead of it', () => {
    const ahead = runOf('a', [{ type: 'forward_backward', age: -500 }]);
    expect(planned(ahead).held).toEqual([{ model_id: 'a', until: NOW + W }]);
  });

  it('plans the other models as before, in the same order, while one is held', () => {
    const live = [
      ...runOf('a', [{ type: 'forward_backward', age: 2 }]),
      ...runOf('b', [
        { type: 'forward_backward', age: 90 },
        { type: 'optim_step', age: 89 },
      ]),
      ...runOf('c', [{ type: 'forward_backward', age: 300 }]),
    ];
    const result = planned(live);
    expect(result.held.map((m) => m.model_id)).toEqual(['a']);
    expect(result.models.map((m) => m.model_id)).toEqual(['c', 'b']);
  });
});

describe('holdUntil and holdWait', () => {
  it('holds nothing without a window, a step or an end of run', () => {
    const [row] = runOf('a', [{ type: 'forward_backward', age: 1 }]);
    const step = {
      request_id: row!.request_id,
      seq: 1,
      request_type: 'forward_backward' as const,
      tokens: 0,
    };
    expect(holdUntil([step], 'end_of_run', UNCAPPED, NOW, W)).toBe(NOW - 1 + W);
    expect(holdUntil([step], 'end_of_run', UNCAPPED, NOW, 0)).toBeUndefined();
    expect(holdUntil([], 'end_of_run', UNCAPPED, NOW, W)).toBeUndefined();
    expect(holdUntil([step], 'duplicate_seq', UNCAPPED, NOW, W)).toBeUndefined();
    // An id that carries no time (not minted by the API) never holds.
    expect(holdUntil([{ ...step, request_id: 'r00000001' }], 'end_of_run', UNCAPPED, NOW, W)).toBeUndefined();
  });

  it('waits until the earliest hold ends, never longer than the window, never negative', () => {
    expect(holdWait([], NOW, W)).toBeUndefined();
    expect(
      holdWait(
        [
          { model_id: 'a', until: NOW + 20 },
          { model_id: 'b', until: NOW + 7.2 },
        ],
        NOW,
        W,
      ),
    ).toBe(8);
    expect(holdWait([{ model_id: 'a', until: NOW + 500 }], NOW, W)).toBe(W);
    expect(holdWait([{ model_id: 'a', until: NOW - 3 }], NOW, W)).toBe(0);
  });

  it('HeldModels keeps what the latest plan of each model decided', () => {
    const holds = new HeldModels();
    holds.note({ models: [], deferred: [], held: [{ model_id: 'a', until: NOW + 10 }] });
    holds.note({ models: [], deferred: [], held: [{ model_id: 'b', until: NOW + 4 }] });
    expect(holds.ids()).toEqual(new Set(['a', 'b']));
    expect(holds.wait(NOW, W)).toBe(4);
    holds.note({ models: [], deferred: [{ model_id: 'b', reason: 'inflight' }], held: [] });
    const onlyA = planned(runOf('a', [{ type: 'forward_backward', age: 200 }]));
    holds.note(onlyA);
    expect(holds.size).toBe(0);
  });
});

describe('S5 property: holding delays a run, never changes or reorders it', () => {
  const submit = fc.record({ type: trainingType, age: fc.nat(80) });
  const scene = fc.array(fc.array(submit, { minLength: 1, maxLength: 8 }), { minLength: 1, maxLength: 5 });

  it('held models are exactly what the plan without a window would take, minus them; after their holds the plans agree', () => {
    fc.assert(
      fc.property(scene, (models) => {
        // Submit times only grow along a model's run (ids are minted in submit order).
        const live = models.flatMap((submits, index) => {
          const ages = submits.map((s) => s.age).sort((x, y) => y - x);
          return runOf(
            `m${index}`,
            submits.map((s, i) => ({ type: s.type, age: ages[i]! })),
          );
        });
        const rows = [...new Set(live.map((row) => row.model_id))].map((id) => modelRow(id));
        const snapshot = snapshotOf(live, rows);
        const windowed = plan(snapshot, UNCAPPED, NOW, { coalesceMs: W });
        const plain = plan(snapshot, UNCAPPED, NOW);
        checkPlanInvariants(snapshot, UNCAPPED, windowed);

        const heldIds = new Set(windowed.held.map((m) => m.model_id));
        expect(heldIds.size).toBe(windowed.held.length);
        expect(plain.held).toEqual([]);
        expect(windowed.models).toEqual(plain.models.filter((m) => !heldIds.has(m.model_id)));
        expect(windowed.deferred).toEqual(plain.deferred);
        for (const held of windowed.held) {
          expect(held.until).toBeGreaterThan(NOW);
          expect(held.until).toBeLessThanOrEqual(NOW + W);
          const run = plain.models.find((m) => m.model_id === held.model_id)!;
          expect(run.stopped_by).toBe('end_of_run');
          expect(run.steps[run.steps.length - 1]!.request_type).toBe('forward_backward');
        }

        // Once every hold has ended, the windowed plan is the plain one.
        const later = Math.max(NOW, ...windowed.held.map((m) => m.until));
        const after = plan(snapshot, UNCAPPED, later, { coalesceMs: W });
        expect(after.held).toEqual([]);
        expect(after.models).toEqual(plan(snapshot, UNCAPPED, later).models);
      }),
    );
  });
});

describe('COALESCE_WINDOW_MS', () => {
  it('is off by default, engine stacks take 250 ms, and above 1000 ms it throws naming the variable', () => {
    expect(readConfig({}).tunables.coalesceWindowMs).toBe(0);
    expect(engineCoalesceWindowMs({})).toBe(ENGINE_COALESCE_WINDOW_MS);
    expect(ENGINE_COALESCE_WINDOW_MS).toBe(250);
    expect(engineCoalesceWindowMs({ COALESCE_WINDOW_MS: '0' })).toBe(0);
    expect(() => engineCoalesceWindowMs({ COALESCE_WINDOW_MS: '5000' })).toThrow(/COALESCE_WINDOW_MS/);
    expect(readConfig({ COALESCE_WINDOW_MS: '250' }).tunables.coalesceWindowMs).toBe(250);
    expect(readConfig({ COALESCE_WINDOW_MS: '0' }).tunables.coalesceWindowMs).toBe(0);
    expect(readConfig({ COALESCE_WINDOW_MS: String(MAX_COALESCE_WINDOW_MS) }).tunables.coalesceWindowMs).toBe(
      1000,
    );
    expect(() => readConfig({ COALESCE_WINDOW_MS: '1001' })).toThrow(/COALESCE_WINDOW_MS.*at most 1000/);
    expect(() => readConfig({ COALESCE_WINDOW_MS: '-1' })).toThrow(ConfigError);
  });
});
