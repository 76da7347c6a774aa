/**
 * (c) Repeated ticks against a simulated cloud: submits arrive over time, the index lags (rows show
 * up late, terminal rows linger as stale copies), two schedulers may plan from different snapshots
 * (one stale), workers commit, stall or crash and wake up later as zombies, the sweeper re-plans
 * expired leases. Claims and commits are applied only under their conditions (E2, E4). Whatever
 * happens, every training request commits exactly once, in seq order per model, nothing stalls,
 * and without crashes every request is dispatched exactly once.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  assembleWorkItem,
  payloadsToRead,
  type SampleClaimed,
} from '../../shared/domain/planning/assemble.js';
import { claimFor, leaseExpired, type ModelClaim, replanFor } from '../../shared/domain/planning/claim.js';
import type { PlanLimits } from '../../shared/domain/planning/limits.js';
import type { Snapshot } from '../../shared/domain/planning/plan-types.js';
import { plan } from '../../shared/domain/planning/planner.js';
import { type WorkItem, workItemSchema } from '../../shared/domain/planning/work-item.js';
import type { FutureStatus, LiveRow, ModelRow, RequestType } from '../../shared/domain/records.js';
import { limitsArb, modelRow, prng, trainingType } from '../support/scheduling-fixtures.js';
import { checkPlanInvariants } from '../support/scheduling-invariants.js';

const TICK_MS = 1000;
const LEASE_MS = 2500;
const MAX_TICKS = 800;
const PLANS_PER_TICK = 3;

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** Across all runs: proof that the scenarios reach the paths the properties are about. */
const reached = {
  replans: 0,
  exhaustedFailSteps: 0,
  lostClaims: 0,
  rejectedCommits: 0,
  staleRowsIgnored: 0,
  headNotVisible: 0,
  capReached: 0,
  maxTicks: 0,
};
/** Rare paths: counted for the record, not required in every run. */
const rare = { claimedNotPending: 0 };

interface SimRequest {
  readonly id: string;
  readonly model: string;
  readonly seq?: number;
  readonly type: RequestType;
  readonly checkpoint?: string;
  readonly tokens?: number;
  readonly submitTick: number;
  readonly lag: number;
  readonly staleFor: number;
  readonly staleAsPending: boolean;
  readonly payloadMissing: boolean;
  status: FutureStatus;
  category?: 'user' | 'server';
  terminalTick?: number;
  dispatches: number;
  commits: number;
}

interface Running {
  readonly item: WorkItem;
  crashed: boolean;
}

const requestSpec = fc.record({
  gap: fc.nat(2),
  lag: fc.oneof(fc.constant(0), fc.nat(4)),
  staleFor: fc.nat(3),
  staleAsPending: fc.boolean(),
  tokens: fc.option(fc.nat(60), { nil: undefined }),
  payloadMissing: fc.oneof(
    { weight: 30, arbitrary: fc.constant(false) },
    { weight: 1, arbitrary: fc.constant(true) },
  ),
});

const scenarioArb = fc.record({
  models: fc.array(
    fc.array(fc.record({ type: trainingType, spec: requestSpec }), { minLength: 1, maxLength: 14 }),
    {
      minLength: 1,
      maxLength: 5,
    },
  ),
  samples: fc.array(
    fc.record({
      model: fc.nat(5),
      checkpoint: fc.constantFrom('c1', 'c2'),
      submitTick: fc.nat(12),
      spec: requestSpec,
    }),
    { maxLength: 8 },
  ),
  crashRate: fc.constantFrom(0, 0, 0.1, 0.25),
  staleScheduler: fc.boolean(),
  limits: limitsArb,
  seed: fc.integer(),
});

type Scenario = typeof scenarioArb extends fc.Arbitrary<infer T> ? T : never;

function buildRequests(scenario: Scenario): SimRequest[] {
  const requests: SimRequest[] = [];
  const fresh = (spec: Scenario['samples'][number]['spec']) => ({
    lag: spec.lag,
    staleFor: spec.staleFor,
    staleAsPending: spec.staleAsPending,
    payloadMissing: spec.payloadMissing,
    ...(spec.tokens === undefined ? {} : { tokens: spec.tokens }),
    status: 'pending' as const,
    dispatches: 0,
    commits: 0,
  });
  scenario.models.forEach((queue, index) => {
    let tick = 0;
    queue.forEach((entry, offset) => {
      tick += entry.spec.gap;
      const seq = offset + 1;
      requests.push({
        id: `${String(tick).padStart(4, '0')}-m${index}-${String(seq).padStart(3, '0')}`,
        model: `m${index}`,
        seq,
        type: entry.type,
        submitTick: tick,
        ...fresh(entry.spec),
      });
    });
  });
  scenario.samples.forEach((sample, index) => {
    const base = sample.model >= scenario.models.length;
    requests.push({
      id: `${String(sample.submitTick).padStart(4, '0')}-s${index}`,
      model: base ? 'base:tiny' : `m${sample.model}`,
      type: 'sample',
      ...(base ? {} : { checkpoint: sample.checkpoint }),
      submitTick: sample.submitTick,
      ...fresh(sample.spec),
    });
  });
  return requests;
}

/** What the `live` index shows at a tick: lagging inserts, lingering stale copies of terminal rows. */
function scan(requests: readonly SimRequest[], tick: number): LiveRow[] {
  const rows: LiveRow[] = [];
  for (const r of requests) {
    if (tick < r.submitTick + r.lag) continue;
    let status: FutureStatus = r.status;
    if (r.status !== 'pending') {
      if (tick >= r.terminalTick! + r.staleFor) continue;
      status = r.staleAsPending ? 'pending' : r.status;
    }
    rows.push({
      request_id: r.id,
      model_id: r.model,
      request_type: r.type,
      status,
      ...(r.seq === undefined ? {} : { seq: r.seq }),
      ...(r.checkpoint === undefined ? {} : { checkpoint_id: r.checkpoint }),
      ...(r.tokens === undefined ? {} : { tokens: r.tokens }),
    });
  }
  return rows;
}

function simulate(scenario: Scenario): void {
  const limits: PlanLimits = scenario.limits;
  const random = prng(scenario.seed);
  const requests = buildRequests(scenario);
  const byId = new Map(requests.map((r) => [r.id, r]));
  const models = new Map<string, Mutable<ModelRow>>(
    scenario.models.map((_, i) => [`m${i}`, { ...modelRow(`m${i}`) }]),
  );
  /** Sample claims by request id: holder and expiry tick (completed samples keep theirs). */
  const sampleClaims = new Map<string, { token: string; expires: number }>();
  const committed = new Map<string, number[]>();
  const running: Running[] = [];
  let previous: Snapshot | undefined;
  let workItems = 0;

  const done = () => requests.every((r) => r.status !== 'pending') && running.every((w) => w.crashed);

  let tick = 0;
  for (; tick < MAX_TICKS && !done(); tick++) {
    const now = tick * TICK_MS;

    // Sweeper: re-plan expired leases (E2), expire abandoned sample claims.
    for (const model of models.values()) {
      if (!leaseExpired(model, now)) continue;
      const replan = replanFor(model, now, limits.maxAttempts)!;
      reached.replans++;
      expect(model.inflight).toBe(replan.condition.inflight);
      Object.assign(model, replan.set);
      delete model.inflight;
      delete model.lease_until;
    }
    for (const [id, claim] of sampleClaims) {
      if (byId.get(id)!.status === 'pending' && claim.expires <= tick) sampleClaims.delete(id);
    }

    // Schedulers: a fresh one, which plans again at once when a cap stopped it (reading the model
    // rows and claims again), and sometimes a late one still acting on last tick's snapshot.
    const live = scan(requests, tick);
    const fresh = (): Snapshot => ({
      live,
      models: new Map([...models].map(([id, row]) => [id, { ...row }])),
      sampleClaims: new Set(sampleClaims.keys()),
    });
    const late = scenario.staleScheduler && random() < 0.5 ? previous : undefined;
    previous = fresh();
    for (const snapshotOf of late === undefined ? [fresh] : [() => late, fresh]) {
      for (let round = 0; round < PLANS_PER_TICK; round++) {
        const snapshot = snapshotOf();
        const result = plan(snapshot, limits, now);
        checkPlanInvariants(snapshot, limits, result);
        reached.staleRowsIgnored += result.counters.rows_already_planned + result.counters.rows_not_pending;
        reached.headNotVisible += result.deferred.filter((d) => d.reason === 'head_not_visible').length;
        if (result.cap_reached) reached.capReached++;

        const claims = new Map<string, ModelClaim>();
        for (const planned of result.models) {
          const claim = claimFor(snapshot.models.get(planned.model_id)!, planned, now, LEASE_MS);
          const row = models.get(planned.model_id)!;
          if (row.epoch !== claim.condition.expected_epoch || row.inflight !== undefined) {
            reached.lostClaims++; // another scheduler won (E2)
            continue;
          }
          if (planned.stopped_by === 'attempts_exhausted') reached.exhaustedFailSteps++;
          // A won claim proves the row is unchanged since the snapshot, so every step is still pending.
          for (const step of planned.steps) expect(byId.get(step.request_id)!.status).toBe('pending');
          Object.assign(row, claim.set);
          claims.set(planned.model_id, claim);
        }
        const workItemId = `wi-${++workItems}`;
        const wonSamples = new Map<string, SampleClaimed>();
        for (const sample of result.samples) {
          if (sampleClaims.has(sample.request_id)) continue; // another tick holds it
          sampleClaims.set(sample.request_id, { token: workItemId, expires: tick + 3 });
          // The pass reads the claimed rows strongly and drops terminal ones: a stale index copy of a
          // sample a zombie ended after its claim expired is claimed again but not dispatched.
          if (byId.get(sample.request_id)!.status !== 'pending') {
            rare.claimedNotPending++;
            continue;
          }
          wonSamples.set(sample.request_id, { tenant: 'tenant-1', claim_token: workItemId });
        }
        const payloads = new Map<string, unknown>();
        for (const id of payloadsToRead(result, claims, wonSamples)) {
          if (!byId.get(id)!.payloadMissing) payloads.set(id, { id });
        }
        const assembled = assembleWorkItem({
          workItemId,
          pool: 'default',
          now,
          plan: result,
          claims,
          sampleClaims: wonSamples,
          payloads,
        });
        if (assembled !== undefined) {
          const item = workItemSchema.parse(JSON.parse(JSON.stringify(assembled)));
          for (const m of item.models) for (const s of m.steps) byId.get(s.request_id)!.dispatches++;
          for (const s of item.samples) byId.get(s.request_id)!.dispatches++;
          running.push({ item, crashed: false });
        }
        if (!result.cap_reached || snapshotOf !== fresh) break;
      }
    }

    // Workers: commit, keep running (renew the lease), or crash; crashed ones may wake up and try.
    for (let i = running.length - 1; i >= 0; i--) {
      const work = running[i]!;
      const roll = random();
      if (work.crashed ? roll < 0.2 : roll < 0.6) {
        commit(work.item, tick);
        running.splice(i, 1);
      } else if (!work.crashed && roll < 0.6 + scenario.crashRate) {
        work.crashed = true;
      } else if (!work.crashed) {
        for (const m of work.item.models) {
          const row = models.get(m.model_id)!;
          if (row.inflight === m.inflight) row.lease_until = now + LEASE_MS; // renewal IF inflight = :token
        }
        for (const s of work.item.samples) {
          const claim = sampleClaims.get(s.request_id);
          if (claim?.token === s.claim_token) claim.expires = tick + 3;
        }
      }
    }
  }

  function finish(
    r: SimRequest,
    status: FutureStatus,
    category: 'user' | 'server' | undefined,
    tick: number,
  ) {
    r.status = status;
    if (category !== undefined) r.category = category;
    r.terminalTick = tick;
    r.commits++;
  }

  function commit(item: WorkItem, tick: number): void {
    for (const m of item.models) {
      const row = models.get(m.model_id)!;
      // E4: IF inflight = :token AND applied_through = :base; a zombie's commit changes nothing.
      if (row.inflight !== m.inflight || row.applied_through !== m.base_applied_through) {
        reached.rejectedCommits++;
        continue;
      }
      expect(row.planned_through).toBe(m.steps[m.steps.length - 1]!.seq);
      let unloaded = row.status === 'unloaded';
      for (const step of m.steps) {
        const r = byId.get(step.request_id)!;
        expect(r.status, 'futures in a commit are not terminal').toBe('pending');
        if (step.fail !== undefined) finish(r, 'failed', step.fail.category, tick);
        else if (unloaded) finish(r, 'failed', 'user', tick);
        else finish(r, 'completed', undefined, tick);
        if (step.request_type === 'unload_model' && step.fail === undefined && !unloaded) unloaded = true;
        committed.set(m.model_id, [...(committed.get(m.model_id) ?? []), step.seq]);
      }
      row.applied_through = row.planned_through;
      row.attempts = 0;
      if (unloaded) row.status = 'unloaded';
      delete row.inflight;
      delete row.lease_until;
    }
    for (const s of item.samples) {
      const r = byId.get(s.request_id)!;
      // Write IF still pending; a fail entry (payload missing) commits its error.
      if (r.status === 'pending') {
        if (s.fail !== undefined) finish(r, 'failed', s.fail.category, tick);
        else finish(r, 'completed', undefined, tick);
      }
    }
  }

  reached.maxTicks = Math.max(reached.maxTicks, tick);
  // Nothing stalls.
  const stuck = requests.filter((r) => r.status === 'pending').map((r) => r.id);
  expect(stuck, 'every request reaches a terminal state').toEqual([]);
  // Exactly once, in seq order, per model.
  scenario.models.forEach((queue, index) => {
    expect(committed.get(`m${index}`)).toEqual(queue.map((_, i) => i + 1));
  });
  for (const r of requests) expect(r.commits, `request ${r.id} ends once`).toBe(1);
  if (scenario.crashRate === 0 && !scenario.staleScheduler) {
    for (const r of requests) expect(r.dispatches, `request ${r.id} dispatched once`).toBe(1);
  }
  // Failures only where the contract puts them.
  for (const index of scenario.models.keys()) {
    const own = requests.filter((x) => x.model === `m${index}`);
    const unload = own.find((r) => r.type === 'unload_model' && r.status === 'completed')?.seq;
    for (const r of own) {
      const afterUnload = unload !== undefined && r.seq! > unload;
      if (r.status === 'completed') expect(afterUnload).toBe(false);
      if (r.category === 'server') expect(scenario.crashRate > 0 || r.payloadMissing).toBe(true);
      if (r.category === 'user') expect(afterUnload).toBe(true);
    }
  }
}

describe('planner properties, repeated ticks', () => {
  it('(c) every request dispatched and committed exactly once, in seq order, despite lag, stale scans, crashes', () => {
    fc.assert(fc.property(scenarioArb, simulate), { numRuns: 100 });
    for (const [path, count] of Object.entries(reached)) expect(count, path).toBeGreaterThan(0);
    expect(reached.maxTicks).toBeLessThan(MAX_TICKS);
  });
});
