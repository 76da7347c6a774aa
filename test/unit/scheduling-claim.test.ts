import { describe, expect, it } from 'vitest';
import {
  claimFor,
  inflightToken,
  leaseExpired,
  PlanMismatchError,
  releaseFor,
  replanFor,
  sampleReleaseFor,
} from '../../shared/domain/planning/claim.js';
import { plan } from '../../shared/domain/planning/planner.js';
import { modelRow, rowsOf, snapshotOf, UNCAPPED } from '../support/scheduling-fixtures.js';

const NOW = 5_000;
const LEASE_MS = 60_000;

function plannedFor(row: ReturnType<typeof modelRow>, count: number) {
  const live = rowsOf(
    Array.from({ length: count }, () => ({ model: row.model_id, type: 'forward' as const })),
    { [row.model_id]: row.planned_through },
  );
  return plan(snapshotOf(live, [row]), UNCAPPED, NOW).models[0]!;
}

describe('claimFor (E2)', () => {
  it('bumps the epoch, names the work item after it, leases, and advances planned_through', () => {
    const row = modelRow('m', { epoch: 4, planned_through: 6, applied_through: 6 });
    const claim = claimFor(row, plannedFor(row, 3), NOW, LEASE_MS);
    expect(claim).toEqual({
      model_id: 'm',
      condition: { expected_epoch: 4, inflight_absent: true },
      set: { epoch: 5, inflight: 'm@5', lease_until: NOW + LEASE_MS, planned_through: 9 },
      before: { planned_through: 6 },
    });
    expect(inflightToken('m', 5)).toBe('m@5');
  });

  it('refuses a row that is not the one planned (another epoch, in flight, moved on)', () => {
    const row = modelRow('m', { epoch: 4, planned_through: 6, applied_through: 6 });
    const planned = plannedFor(row, 2);
    expect(() => claimFor({ ...row, epoch: 5 }, planned, NOW, LEASE_MS)).toThrow(PlanMismatchError);
    expect(() => claimFor({ ...row, inflight: 'm@4' }, planned, NOW, LEASE_MS)).toThrow(PlanMismatchError);
    expect(() => claimFor({ ...row, planned_through: 7 }, planned, NOW, LEASE_MS)).toThrow(PlanMismatchError);
    expect(() => claimFor(modelRow('other', { epoch: 4 }), planned, NOW, LEASE_MS)).toThrow(
      PlanMismatchError,
    );
  });
});

describe('releaseFor (a pass that failed before its send, E7)', () => {
  const row = modelRow('m', { epoch: 4, planned_through: 6, applied_through: 6, attempts: 1 });
  const claim = claimFor(row, plannedFor(row, 3), NOW, LEASE_MS);

  it('only on the row this claim wrote; puts planned_through back and drops the lease', () => {
    expect(releaseFor(claim)).toEqual({
      model_id: 'm',
      condition: { epoch: 5, inflight: 'm@5' },
      set: { planned_through: 6 },
      remove: ['inflight', 'lease_until'],
    });
  });

  it('leaves the epoch claimed and attempts alone: the next claim gets a fresh token', () => {
    const release = releaseFor(claim);
    expect(release.set).not.toHaveProperty('epoch');
    expect(release.set).not.toHaveProperty('attempts');
    const { inflight: _inflight, lease_until: _lease, ...claimed } = { ...row, ...claim.set };
    const released = { ...claimed, ...release.set };
    expect(released).toMatchObject({ epoch: 5, planned_through: 6, attempts: 1 });
    // The same steps are planned again, under a token the failed pass never issued.
    const again = claimFor(released, plannedFor(released, 3), NOW, LEASE_MS);
    expect(again.condition.expected_epoch).toBe(5);
    expect(again.set).toMatchObject({ epoch: 6, inflight: 'm@6', planned_through: 9 });
    expect(again.set.inflight).not.toBe(claim.set.inflight);
  });

  it("a sample claim is deleted only while it carries this pass's work item id", () => {
    expect(sampleReleaseFor({ request_id: 'r1', claim_token: 'wi-1' })).toEqual({
      request_id: 'r1',
      condition: { claim_token: 'wi-1' },
    });
  });
});

describe('replanFor (sweeper, E2)', () => {
  const inFlight = modelRow('m', {
    epoch: 5,
    inflight: 'm@5',
    lease_until: NOW - 1,
    planned_through: 9,
    applied_through: 6,
    attempts: 1,
  });

  it('returns planned_through to applied_through, bumps epoch and attempts, and drops the lease', () => {
    expect(replanFor(inFlight, NOW, 3)).toEqual({
      model_id: 'm',
      condition: { expected_epoch: 5, inflight: 'm@5', lease_ended_by: NOW },
      set: { planned_through: 6, epoch: 6, attempts: 2 },
      remove: ['inflight', 'lease_until'],
      exhausted: false,
    });
  });

  it('reports exhaustion at K attempts, after which the planner fails the next step alone', () => {
    const replan = replanFor({ ...inFlight, attempts: 2 }, NOW, 3)!;
    expect(replan.exhausted).toBe(true);
    const { inflight: _inflight, lease_until: _lease, ...rest } = { ...inFlight, attempts: 2 };
    const after = { ...rest, ...replan.set };
    const live = rowsOf(
      Array.from({ length: 3 }, () => ({ model: 'm', type: 'forward' as const })),
      { m: 6 },
    );
    const next = plan(snapshotOf(live, [after]), { ...UNCAPPED, maxAttempts: 3 }, NOW);
    expect(next.models[0]?.steps.map((s) => [s.seq, s.fail?.category])).toEqual([[7, 'server']]);
  });

  it('has nothing to re-plan for an idle model', () => {
    expect(replanFor(modelRow('m'), NOW, 3)).toBeUndefined();
  });

  it('leaseExpired: only in-flight models whose lease has ended', () => {
    expect(leaseExpired(inFlight, NOW)).toBe(true);
    expect(leaseExpired({ ...inFlight, lease_until: NOW + 1 }, NOW)).toBe(false);
    expect(leaseExpired({ ...inFlight, lease_until: undefined }, NOW)).toBe(true);
    expect(leaseExpired(modelRow('m', { lease_until: NOW - 1 }), NOW)).toBe(false);
  });
});
