import { describe, expect, it } from 'vitest';
import type { Plan, PlannedModel } from '../../shared/domain/planning/plan-types.js';
import { laneOf, routePlan } from '../../shared/domain/planning/routing.js';
import type { ModelRow } from '../../shared/domain/records.js';
import { modelRow } from '../support/scheduling-fixtures.js';

const NOW = 1_000_000;

function row(modelId: string, holder?: { lane?: number; until: number }): ModelRow {
  return modelRow(
    modelId,
    holder === undefined
      ? {}
      : {
          holder: { worker: 'w-1', ...(holder.lane === undefined ? {} : { lane: holder.lane }) },
          holder_until: holder.until,
        },
  );
}

function planned(modelId: string): PlannedModel {
  return {
    model_id: modelId,
    tenant: 't',
    expected_epoch: 1,
    first_seq: 2,
    last_seq: 2,
    steps: [{ request_id: `r-${modelId}`, seq: 2, request_type: 'optim_step', tokens: 0 }],
    base_applied_through: 1,
    stopped_by: 'end_of_run',
  };
}

function plan(models: string[], samples = 0): Plan {
  return {
    planned_at: NOW,
    models: models.map(planned),
    samples: Array.from({ length: samples }, (_, index) => ({
      request_id: `s${index}`,
      model_id: 'base:reference/byte-lm',
      tokens: 1,
    })),
    deferred: [],
    held: [],
    cap_reached: false,
    counters: {} as Plan['counters'],
  };
}

describe('routing to the holder (S2)', () => {
  it("is the holder's lane only while the hold is live and the holder has a lane", () => {
    expect(laneOf(row('a', { lane: 3, until: NOW + 1 }), NOW)).toBe(3);
    expect(laneOf(row('a', { lane: 3, until: NOW }), NOW)).toBeUndefined();
    expect(laneOf(row('a', { until: NOW + 1 }), NOW)).toBeUndefined();
    expect(laneOf(row('a'), NOW)).toBeUndefined();
    expect(laneOf(undefined, NOW)).toBeUndefined();
  });

  it('splits a plan by destination, keeping its order; samples stay on the shared queue', () => {
    const models = new Map(
      [
        row('held-2', { lane: 2, until: NOW + 10 }),
        row('free'),
        row('held-0', { lane: 0, until: NOW + 10 }),
        row('expired', { lane: 2, until: NOW - 10 }),
        row('held-2b', { lane: 2, until: NOW + 10 }),
      ].map((entry) => [entry.model_id, entry]),
    );
    const parts = routePlan(plan(['held-2', 'free', 'held-0', 'expired', 'held-2b'], 2), models, NOW);
    expect(
      parts.map((part) => [
        part.lane,
        part.plan.models.map((model) => model.model_id),
        part.plan.samples.length,
      ]),
    ).toEqual([
      [undefined, ['free', 'expired'], 2],
      [0, ['held-0'], 0],
      [2, ['held-2', 'held-2b'], 0],
    ]);
  });

  it('leaves out a shared part with nothing in it, and routes nothing for an empty plan', () => {
    const models = new Map([['held', row('held', { lane: 1, until: NOW + 10 })]]);
    expect(routePlan(plan(['held']), models, NOW).map((part) => part.lane)).toEqual([1]);
    expect(routePlan(plan([]), models, NOW)).toEqual([]);
  });
});
