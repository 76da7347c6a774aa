import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { plan } from '../../shared/domain/planning/planner.js';
import { tickPrefixLength } from '../../shared/domain/planning/tick-rule.js';
import type { LiveRow, ModelRow, RequestType } from '../../shared/domain/records.js';
import {
  dispatchedIds,
  limitsArb,
  modelRow,
  prng,
  rowsOf,
  skyrlPasses,
  skyrlRowsOf,
  skyrlSamples,
  skyrlSingles,
  snapshotOf,
  trainingType,
  UNCAPPED,
} from '../support/scheduling-fixtures.js';
import { checkPlanInvariants } from '../support/scheduling-invariants.js';

const NOW = 1_000_000;

const tokensArb = fc.option(fc.nat(80), { nil: undefined });

/** One model of a single-tick scenario: its history, what is in flight, its queue and what the scan shows. */
const modelSpec = fc.record({
  applied: fc.nat(4),
  /** Seqs already planned but not applied (in flight); forces an inflight row when > 0. */
  inFlight: fc.nat(3),
  /** In flight with nothing beyond applied (a just-claimed empty window is impossible, but a claim may be pending). */
  inflightFlag: fc.boolean(),
  /** How the scan shows each already-applied seq: stale pending, terminal, or gone. */
  history: fc.array(fc.constantFrom('pending', 'completed', 'failed', 'gone', 'gone'), { maxLength: 4 }),
  queue: fc.array(
    fc.record({ type: trainingType, visible: fc.oneof(fc.constant(true), fc.boolean()), tokens: tokensArb }),
    { maxLength: 14 },
  ),
  /** Time gaps between this model's submits (request ids are time-ordered). */
  gaps: fc.array(fc.nat(30), { minLength: 40, maxLength: 40 }),
  status: fc.constantFrom('active', 'active', 'active', 'unloaded'),
  attempts: fc.oneof(fc.constant(0), fc.nat(4)),
  rowMissing: fc.oneof(
    { weight: 9, arbitrary: fc.constant(false) },
    { weight: 1, arbitrary: fc.constant(true) },
  ),
  inconsistent: fc.oneof(
    { weight: 9, arbitrary: fc.constant(false) },
    { weight: 1, arbitrary: fc.constant(true) },
  ),
  duplicateSeq: fc.option(fc.nat(14), { nil: undefined, freq: 8 }),
});

const sampleSpec = fc.record({
  model: fc.nat(5),
  checkpoint: fc.option(fc.constantFrom('c1', 'c2', 'c3'), { nil: undefined }),
  at: fc.nat(600),
  claimed: fc.boolean(),
  terminal: fc.oneof(
    { weight: 5, arbitrary: fc.constant(false) },
    { weight: 1, arbitrary: fc.constant(true) },
  ),
  tokens: tokensArb,
});

const tickScenario = fc.record({
  models: fc.array(modelSpec, { minLength: 1, maxLength: 6 }),
  samples: fc.array(sampleSpec, { maxLength: 12 }),
  limits: limitsArb,
  shuffleSeed: fc.integer(),
  duplicateRows: fc.nat(3),
  /** Models belong to tenants round-robin; samples carry their tenant as the index projects it. */
  tenants: fc.integer({ min: 1, max: 3 }),
});

type TickScenario = typeof tickScenario extends fc.Arbitrary<infer T> ? T : never;

function idAt(time: number, tag: string): string {
  return `${String(time).padStart(6, '0')}-${tag}`;
}

function buildTick(scenario: TickScenario): { live: LiveRow[]; models: ModelRow[]; claims: string[] } {
  const live: LiveRow[] = [];
  const models: ModelRow[] = [];
  scenario.models.forEach((spec, index) => {
    const modelId = `m${index}`;
    const tenant = `t${index % scenario.tenants}`;
    const planned = spec.applied + spec.inFlight;
    const inflight = spec.inFlight > 0 || spec.inflightFlag;
    if (!spec.rowMissing) {
      models.push(
        modelRow(modelId, {
          tenant,
          epoch: index + 3,
          applied_through: spec.applied,
          planned_through: planned + (spec.inconsistent && !inflight ? 1 : 0),
          status: spec.status as 'active' | 'unloaded',
          attempts: spec.attempts,
          ...(index % 2 === 0 ? { state_ref: `state/${modelId}/${index}.bin` } : {}),
          ...(inflight ? { inflight: `${modelId}@${index + 3}`, lease_until: NOW + (index % 3) - 1 } : {}),
        }),
      );
    }
    let time = 0;
    const at = (seq: number) => {
      time += spec.gaps[seq % spec.gaps.length]! + 1;
      return idAt(time, `${modelId}-${seq}`);
    };
    for (let seq = 1; seq <= planned; seq++) {
      const id = at(seq);
      const shown = seq <= spec.applied ? (spec.history[seq - 1] ?? 'gone') : 'pending';
      if (shown === 'gone') continue;
      live.push({
        request_id: id,
        model_id: modelId,
        tenant,
        seq,
        request_type: 'forward',
        status: shown as 'pending' | 'completed' | 'failed',
      });
    }
    spec.queue.forEach((entry, offset) => {
      const seq = planned + 1 + offset;
      const id = at(seq);
      if (!entry.visible) return;
      live.push({
        request_id: id,
        model_id: modelId,
        tenant,
        seq,
        request_type: entry.type,
        status: 'pending',
        ...(entry.tokens === undefined ? {} : { tokens: entry.tokens }),
      });
      if (spec.duplicateSeq === offset) {
        live.push({
          request_id: idAt(time + 1, `${modelId}-dup`),
          model_id: modelId,
          tenant,
          seq,
          request_type: 'forward',
          status: 'pending',
        });
      }
    });
  });
  const claims: string[] = [];
  scenario.samples.forEach((spec, index) => {
    const id = idAt(spec.at, `s${index}`);
    const model = spec.model === 5 ? 'base:tiny' : `m${spec.model}`;
    const checkpoint = spec.model === 5 ? undefined : spec.checkpoint;
    live.push({
      request_id: id,
      model_id: model,
      tenant: `t${(spec.model === 5 ? index : spec.model) % scenario.tenants}`,
      request_type: 'sample',
      status: spec.terminal ? 'completed' : 'pending',
      ...(checkpoint === undefined ? {} : { checkpoint_id: checkpoint }),
      ...(spec.tokens === undefined ? {} : { tokens: spec.tokens }),
    });
    if (spec.claimed) claims.push(id);
  });
  // Stale duplicates of visible rows (a scan may return a request twice across pages or shards).
  for (let i = 0; i < scenario.duplicateRows && live.length > 0; i++)
    live.push({ ...live[(i * 7) % live.length]! });
  const random = prng(scenario.shuffleSeed);
  const shuffled = live
    .map((row) => ({ row, key: random() }))
    .sort((a, b) => a.key - b.key)
    .map((entry) => entry.row);
  return { live: shuffled, models, claims };
}

describe('planner properties, one tick', () => {
  it('(a, b, d, e, f) runs are contiguous from planned_through + 1, obey R2, R3, R4 and the caps, and are maximal', () => {
    fc.assert(
      fc.property(tickScenario, (scenario) => {
        const { live, models, claims } = buildTick(scenario);
        const snapshot = snapshotOf(live, models, claims);
        const result = plan(snapshot, scenario.limits, NOW);
        checkPlanInvariants(snapshot, scenario.limits, result);
      }),
      { numRuns: 500 },
    );
  });

  it('is deterministic and independent of the order of the scan', () => {
    fc.assert(
      fc.property(tickScenario, fc.integer(), (scenario, seed) => {
        const { live, models, claims } = buildTick(scenario);
        const random = prng(seed);
        const reordered = live
          .map((row) => ({ row, key: random() }))
          .sort((x, y) => x.key - y.key)
          .map((entry) => entry.row);
        const a = plan(snapshotOf(live, models, claims), scenario.limits, NOW);
        const b = plan(snapshotOf(reordered, models, claims), scenario.limits, NOW);
        expect(b.models).toEqual(a.models);
        expect(b.samples).toEqual(a.samples);
      }),
      { numRuns: 200 },
    );
  });
});

describe("R2 equals SkyRL's finders", () => {
  /** Longest prefix with no pass after a barrier, by brute force over every prefix. */
  function bruteForcePrefix(types: readonly RequestType[]): number {
    const ok = (length: number) =>
      types.slice(0, length).every((type, j) => {
        const isPass = type === 'forward' || type === 'forward_backward';
        return !isPass || !types.slice(0, j).some((t) => t === 'optim_step' || t === 'load_weights');
      });
    let best = 0;
    for (let length = 0; length <= types.length; length++) if (ok(length)) best = length;
    return best;
  }

  it('tickPrefixLength is the longest prefix with no pass after a barrier', () => {
    fc.assert(
      fc.property(fc.array(trainingType, { maxLength: 20 }), (types) => {
        expect(tickPrefixLength(types)).toBe(bruteForcePrefix(types));
      }),
      { numRuns: 1000 },
    );
  });

  it("one model's run: the planner dispatches exactly SkyRL's passes plus singles", () => {
    fc.assert(
      fc.property(fc.array(trainingType, { minLength: 1, maxLength: 30 }), (types) => {
        const live = rowsOf(types.map((type) => ({ model: 'a', type })));
        const result = plan(snapshotOf(live, [modelRow('a')]), UNCAPPED, NOW);
        const skyrl = skyrlRowsOf(live);
        const expected = new Set([...skyrlPasses(skyrl), ...skyrlSingles(skyrl)]);
        expect(dispatchedIds(result)).toEqual(expected);
      }),
      { numRuns: 1000 },
    );
  });

  it('several models interleaved in one global id order, with samples: the same sets as SkyRL', () => {
    const entry = fc.oneof(
      { weight: 4, arbitrary: fc.record({ model: fc.constantFrom('a', 'b', 'c'), type: trainingType }) },
      {
        weight: 1,
        arbitrary: fc.record({
          model: fc.constantFrom('a', 'b', 'base:tiny'),
          type: fc.constant<RequestType>('sample'),
          checkpoint: fc.constantFrom('k1', 'k2'),
        }),
      },
    );
    fc.assert(
      fc.property(fc.array(entry, { minLength: 1, maxLength: 45 }), (queue) => {
        const normalized = queue.map((e) =>
          e.type === 'sample' && e.model === 'base:tiny' ? { model: e.model, type: e.type } : e,
        );
        const live = rowsOf(normalized);
        const result = plan(
          snapshotOf(
            live,
            ['a', 'b', 'c'].map((id) => modelRow(id)),
          ),
          UNCAPPED,
          NOW,
        );
        const skyrl = skyrlRowsOf(live);
        const expected = new Set([...skyrlPasses(skyrl), ...skyrlSingles(skyrl), ...skyrlSamples(skyrl)]);
        expect(dispatchedIds(result)).toEqual(expected);
      }),
      { numRuns: 500 },
    );
  });
});
