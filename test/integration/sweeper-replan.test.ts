import { beforeEach, describe, expect, it } from 'vitest';
import { config } from '../../shared/base/config.js';
import { replanFor } from '../../shared/domain/planning/claim.js';
import { renewModelLease, replanModel } from '../../shared/repositories/models.js';
import { runTick } from '../../shared/services/scheduler/tick.js';
import { replanExpiredLeases } from '../../shared/services/sweeper/replan.js';
import { sweep } from '../../shared/services/sweeper/sweep.js';
import type { TestCloud } from '../support/cloud.js';
import {
  commitWorkItem,
  drainWorkItems,
  readFutureRow,
  readModelRow,
  readyModel,
  schedulerCloud,
  stepIds,
  submitStep,
} from '../support/scheduler-harness.js';

describe('sweeper: expired leases (E2, E7)', () => {
  let cloud: TestCloud;
  let leaseMs: number;
  beforeEach(async () => {
    cloud = await schedulerCloud();
    leaseMs = config().tunables.leaseSeconds * 1000;
  });

  const replanAt = (now: number) =>
    replanExpiredLeases(cloud.clients.doc, config().table('models'), now, config().tunables.maxAttempts);

  it('re-plans a model whose lease ended, and leaves a live lease alone', async () => {
    const m = await readyModel(cloud.clients);
    await submitStep(cloud.clients, m, 'forward_backward');
    await submitStep(cloud.clients, m, 'optim_step');
    await runTick();
    const claimed = await readModelRow(cloud.clients, m);
    expect(claimed).toMatchObject({
      inflight: `${m}@2`,
      planned_through: 3,
      applied_through: 1,
      attempts: 0,
    });

    expect(await replanAt(Date.now())).toMatchObject({ leases_expired: 0, replanned: 0 });
    expect(await readModelRow(cloud.clients, m)).toEqual(claimed);

    expect(await replanAt(claimed.lease_until! + 1)).toMatchObject({ leases_expired: 1, replanned: 1 });
    const replanned = await readModelRow(cloud.clients, m);
    expect(replanned).toMatchObject({ epoch: 3, planned_through: 1, applied_through: 1, attempts: 1 });
    expect(replanned.inflight).toBeUndefined();
    expect(replanned.lease_until).toBeUndefined();
  });

  it('loses to a worker that renewed its lease or committed; the old work item cannot commit after a re-plan', async () => {
    const m = await readyModel(cloud.clients);
    const fb = await submitStep(cloud.clients, m, 'forward_backward');
    await runTick();
    const [item] = await drainWorkItems(cloud.clients);
    const expired = await readModelRow(cloud.clients, m);
    const later = expired.lease_until! + 1;
    const stale = replanFor(expired, later, 3)!;

    // The worker renews (IF inflight = its token) between the sweeper's read and its update.
    expect(
      await renewModelLease(
        cloud.clients.doc,
        config().table('models'),
        m,
        item!.models[0]!.inflight,
        later + leaseMs,
      ),
    ).toBe(true);
    expect(await replanModel(cloud.clients.doc, config().table('models'), stale, 'lease-ended')).toBe(false);

    // Once the renewed lease also ends, the re-plan lands, and the zombie's commit is fenced off (E4).
    expect(await replanAt(later + leaseMs + 1)).toMatchObject({ replanned: 1 });
    expect(await commitWorkItem(cloud.clients, item!)).toBe(false);
    expect((await readFutureRow(cloud.clients, fb.requestId)).status).toBe('pending');
    expect(await readModelRow(cloud.clients, m)).toMatchObject({ applied_through: 1, planned_through: 1 });

    // And a re-plan computed before a commit loses to that commit.
    await runTick({ now: () => later + leaseMs + 2 });
    const [again] = await drainWorkItems(cloud.clients);
    const beforeCommit = await readModelRow(cloud.clients, m);
    expect(await commitWorkItem(cloud.clients, again!)).toBe(true);
    const tooLate = replanFor(beforeCommit, beforeCommit.lease_until! + 1, 3)!;
    expect(await replanModel(cloud.clients.doc, config().table('models'), tooLate, 'lease-ended')).toBe(
      false,
    );
    expect((await readFutureRow(cloud.clients, fb.requestId)).status).toBe('completed');
  });

  it("one re-plan write: the sweeper's form refuses a live lease, the holder's form takes it back at once", async () => {
    const m = await readyModel(cloud.clients);
    await submitStep(cloud.clients, m, 'forward_backward');
    await runTick();
    const [item] = await drainWorkItems(cloud.clients);
    const held = await readModelRow(cloud.clients, m);
    const now = Date.now();
    expect(held.lease_until!).toBeGreaterThan(now);
    const replan = replanFor(held, now, config().tunables.maxAttempts)!;
    const table = config().table('models');

    // Same row, same re-plan: only the lease condition differs.
    expect(await replanModel(cloud.clients.doc, table, replan, 'lease-ended')).toBe(false);
    expect(await readModelRow(cloud.clients, m)).toEqual(held);
    expect(await replanModel(cloud.clients.doc, table, replan, 'still-in-flight')).toBe(true);
    const released = await readModelRow(cloud.clients, m);
    expect(released).toMatchObject({ epoch: held.epoch + 1, planned_through: 1, attempts: 1 });
    expect(released.inflight).toBeUndefined();
    expect(released.lease_until).toBeUndefined();
    // The token is now stale for both forms, and for the old work item's commit (E4).
    expect(await replanModel(cloud.clients.doc, table, replan, 'still-in-flight')).toBe(false);
    expect(await commitWorkItem(cloud.clients, item!)).toBe(false);
  });

  it('after K attempts the first step alone fails with a server error, and the model carries on', async () => {
    const m = await readyModel(cloud.clients);
    const fb = await submitStep(cloud.clients, m, 'forward_backward');
    const optim = await submitStep(cloud.clients, m, 'optim_step');
    const maxAttempts = config().tunables.maxAttempts;
    let clock = Date.now();
    const now = () => clock;

    await runTick({ now });
    expect(stepIds((await drainWorkItems(cloud.clients))[0]!)).toEqual({
      [m]: [fb.requestId, optim.requestId],
    });
    // Every attempt's work item dies without committing; each sweep re-plans and re-dispatches.
    for (let attempt = 1; attempt < maxAttempts; attempt++) {
      clock += leaseMs + 1_000;
      const report = await sweep({ now });
      expect(report.replan).toMatchObject({ replanned: 1, attempts_exhausted: 0 });
      const [retry] = await drainWorkItems(cloud.clients);
      expect(stepIds(retry!)).toEqual({ [m]: [fb.requestId, optim.requestId] });
    }
    clock += leaseMs + 1_000;
    const last = await sweep({ now });
    expect(last.replan).toMatchObject({ replanned: 1, attempts_exhausted: 1 });
    expect(last.tick).toMatchObject({ fail_steps_dispatched: 1, steps_dispatched: 0, payload_gets: 0 });
    const [failing] = await drainWorkItems(cloud.clients);
    expect(failing!.models[0]!.steps).toEqual([
      {
        request_id: fb.requestId,
        seq: 2,
        request_type: 'forward_backward',
        fail: { message: `Request failed after ${maxAttempts} attempts`, category: 'server' },
      },
    ]);
    await commitWorkItem(cloud.clients, failing!);
    expect(await readFutureRow(cloud.clients, fb.requestId)).toMatchObject({
      status: 'failed',
      error: { category: 'server' },
    });

    // The commit reset the attempts: the rest runs normally.
    await runTick({ now });
    const [rest] = await drainWorkItems(cloud.clients);
    expect(rest!.models[0]!.steps.map((step) => [step.request_id, step.fail])).toEqual([
      [optim.requestId, undefined],
    ]);
  });

  it('the safety tick dispatches work that no stream announced', async () => {
    const m = await readyModel(cloud.clients);
    const fb = await submitStep(cloud.clients, m, 'forward');
    const report = await sweep();
    expect(report.tick).toMatchObject({ status: 'ran', work_items: 1, steps_dispatched: 1 });
    expect(stepIds((await drainWorkItems(cloud.clients))[0]!)).toEqual({ [m]: [fb.requestId] });
  });
});
