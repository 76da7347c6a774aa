import { beforeEach, describe, expect, it } from 'vitest';
import { config } from '../../shared/base/config.js';
import type { WorkItem } from '../../shared/domain/planning/work-item.js';
import { type SchedulerAdapters, schedulerAdapters } from '../../shared/services/scheduler/adapters.js';
import { schedulerSettings } from '../../shared/services/scheduler/settings.js';
import {
  dispatchSnapshot,
  readSnapshot,
  runTick,
  tickContext,
} from '../../shared/services/scheduler/tick.js';
import { replanExpiredLeases } from '../../shared/services/sweeper/replan.js';
import { sweep } from '../../shared/services/sweeper/sweep.js';
import type { TestCloud } from '../support/cloud.js';
import { SimulatedCrash } from '../support/faults.js';
import {
  commitWorkItem,
  drainManifests,
  drainWorkItems,
  readFutureRow,
  readModelRow,
  readyModel,
  samplingSession,
  schedulerCloud,
  stepIds,
  submitSampleRequest,
  submitStep,
} from '../support/scheduler-harness.js';

/** Every request id a set of work items carries, steps and samples. */
function requestIds(items: readonly WorkItem[]): string[] {
  return items.flatMap((item) => [
    ...item.models.flatMap((model) => model.steps.map((step) => step.request_id)),
    ...item.samples.map((sample) => sample.request_id),
  ]);
}

/**
 * A scheduler that dies after claiming: the work item is written, the manifest never sent. A crash,
 * not an error: a pass that fails with an error gives its claims back (scheduler-release.test.ts).
 */
function crashingBeforeSend(): SchedulerAdapters {
  const adapters = schedulerAdapters(schedulerSettings());
  return {
    ...adapters,
    sendManifest: async () => {
      throw new SimulatedCrash('scheduler: between claim and send');
    },
  };
}

describe('overlapping ticks, crashes and late claims (E2, E7)', () => {
  let cloud: TestCloud;
  beforeEach(async () => {
    cloud = await schedulerCloud();
  });

  it('two ticks over the same snapshot claim each model once and send each request once', async () => {
    const models = [
      await readyModel(cloud.clients),
      await readyModel(cloud.clients),
      await readyModel(cloud.clients),
    ];
    const submitted: string[] = [];
    for (const m of models) {
      submitted.push((await submitStep(cloud.clients, m, 'forward_backward')).requestId);
      submitted.push((await submitStep(cloud.clients, m, 'optim_step')).requestId);
    }
    const sample = await submitSampleRequest(cloud.clients, samplingSession());
    submitted.push(sample.requestId);

    const ctx = tickContext();
    const { snapshot } = await readSnapshot(ctx);
    const [one, two] = await Promise.all([dispatchSnapshot(ctx, snapshot), dispatchSnapshot(ctx, snapshot)]);
    expect(one.models_claimed + two.models_claimed).toBe(3);
    expect(one.claims_lost + two.claims_lost).toBe(3);
    expect(one.samples_claimed + two.samples_claimed).toBe(1);
    expect(one.sample_claims_lost + two.sample_claims_lost).toBe(1);

    const items = await drainWorkItems(cloud.clients);
    const sent = requestIds(items);
    expect(sent.sort()).toEqual([...submitted].sort());
    // Each model appears in exactly one work item, under the epoch its claim set.
    const owners = items.flatMap((item) => item.models.map((model) => model.model_id));
    expect(owners.sort()).toEqual([...models].sort());
    for (const item of items) {
      for (const model of item.models) {
        expect((await readModelRow(cloud.clients, model.model_id)).inflight).toBe(model.inflight);
      }
    }
  });

  it('a tick that finds the pool locked asks the holder for one more pass instead of running', async () => {
    const [m, other] = [await readyModel(cloud.clients), await readyModel(cloud.clients)];
    await submitStep(cloud.clients, m, 'forward_backward');
    const settings = schedulerSettings();
    const adapters = schedulerAdapters(settings);
    let letHolderClaim: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      letHolderClaim = resolve;
    });
    let holderClaiming: () => void = () => undefined;
    const claiming = new Promise<void>((resolve) => {
      holderClaiming = resolve;
    });
    let claims = 0;
    // The holder stops at its first claim, with the lock held.
    const holding: SchedulerAdapters = {
      ...adapters,
      claimModel: async (claim) => {
        if (claims++ === 0) {
          holderClaiming();
          await gate;
        }
        return adapters.claimModel(claim);
      },
    };
    const holder = runTick({ settings, adapters: holding });
    await claiming;
    await submitStep(cloud.clients, other, 'forward_backward');
    const second = await runTick({ settings, adapters });
    expect(second.status).toBe('coalesced');
    expect(second.counters).toMatchObject({ passes: 0, work_items: 0 });
    letHolderClaim();
    const first = await holder;
    expect(first).toMatchObject({
      status: 'ran',
      counters: { passes: 2, steps_dispatched: 2, work_items: 2 },
    });
    // The lock is free again: a tick with work takes it.
    await submitStep(cloud.clients, other, 'optim_step');
    await commitWorkItem(
      cloud.clients,
      (await drainWorkItems(cloud.clients)).find((item) => item.models[0]?.model_id === other)!,
    );
    expect((await runTick()).status).toBe('ran');
  });

  it('a tick whose look plans nothing never takes the lock and writes nothing', async () => {
    const m = await readyModel(cloud.clients);
    await submitStep(cloud.clients, m, 'forward_backward');
    await submitStep(cloud.clients, m, 'optim_step');
    expect((await runTick()).status).toBe('ran');
    // Everything left is parked behind the model in flight; the lock's holder would be visible.
    await submitStep(cloud.clients, m, 'forward_backward');
    const adapters = schedulerAdapters(schedulerSettings());
    const touched: string[] = [];
    const watched: SchedulerAdapters = {
      ...adapters,
      isDraining: async () => {
        touched.push('drain');
        return adapters.isDraining();
      },
      lock: {
        acquire: async (...args) => {
          touched.push('acquire');
          return adapters.lock.acquire(...args);
        },
        finishPass: adapters.lock.finishPass,
        release: adapters.lock.release,
        hold: adapters.lock.hold,
      },
    };
    const outcome = await runTick({ adapters: watched });
    expect(outcome).toMatchObject({
      status: 'idle',
      counters: { passes: 0, rows_scanned: 3, work_items: 0 },
    });
    expect(touched).toEqual([]);
    expect(outcome.seen.size).toBe(3);
  });

  it('a crash between claim and send is recovered by lease expiry: nothing lost, nothing run twice', async () => {
    const m = await readyModel(cloud.clients);
    const fb = await submitStep(cloud.clients, m, 'forward_backward');
    const optim = await submitStep(cloud.clients, m, 'optim_step');
    const fb2 = await submitStep(cloud.clients, m, 'forward_backward');
    const sample = await submitSampleRequest(cloud.clients, samplingSession());

    await expect(runTick({ adapters: crashingBeforeSend() })).rejects.toThrow('between claim and send');
    const claimed = await readModelRow(cloud.clients, m);
    expect(claimed).toMatchObject({ inflight: `${m}@2`, planned_through: 3, applied_through: 1 });
    expect(await drainManifests(cloud.clients)).toEqual([]);

    // Until the lease ends, nothing is planned again (R3) and the sample stays claimed.
    expect((await runTick()).counters.work_items).toBe(0);

    // After it ends: the sweeper re-plans and its safety tick dispatches the same work again.
    const later = Date.now() + config().tunables.leaseSeconds * 1000 + 1_000;
    const report = await sweep({ now: () => later });
    expect(report.replan).toMatchObject({ replanned: 1, attempts_exhausted: 0 });
    expect(report.tick).toMatchObject({ work_items: 1, steps_dispatched: 2, samples_dispatched: 1 });
    const items = await drainWorkItems(cloud.clients);
    expect(items).toHaveLength(1);
    expect(stepIds(items[0]!)).toEqual({ [m]: [fb.requestId, optim.requestId] });
    expect(items[0]!.models[0]).toMatchObject({ epoch: 4, base_applied_through: 1 });
    expect(items[0]!.samples.map((s) => s.request_id)).toEqual([sample.requestId]);
    expect((await readModelRow(cloud.clients, m)).attempts).toBe(1);

    for (const item of items) await commitWorkItem(cloud.clients, item);
    await runTick();
    const rest = await drainWorkItems(cloud.clients);
    expect(stepIds(rest[0]!)).toEqual({ [m]: [fb2.requestId] });
    for (const item of rest) await commitWorkItem(cloud.clients, item);
    // Every request was sent exactly once (the crashed tick's item never reached the queue).
    expect(requestIds([...items, ...rest]).sort()).toEqual(
      [fb.requestId, optim.requestId, fb2.requestId, sample.requestId].sort(),
    );
    for (const id of [fb.requestId, optim.requestId, fb2.requestId, sample.requestId]) {
      expect((await readFutureRow(cloud.clients, id)).status).toBe('completed');
    }
  });

  it('a late claim from before a re-plan is refused although planned_through is back where it was (ABA)', async () => {
    const m = await readyModel(cloud.clients);
    await submitStep(cloud.clients, m, 'forward_backward');
    const ctx = tickContext();
    const { snapshot: stale } = await readSnapshot(ctx);
    const seen = snapshot(stale, m);

    // Meanwhile another tick claims and dies; the sweeper re-plans after the lease.
    await expect(runTick({ adapters: crashingBeforeSend() })).rejects.toThrow();
    const later = Date.now() + config().tunables.leaseSeconds * 1000 + 1_000;
    await replanExpiredLeases(
      cloud.clients.doc,
      config().table('models'),
      later,
      config().tunables.maxAttempts,
    );
    const replanned = await readModelRow(cloud.clients, m);
    expect(replanned.planned_through).toBe(seen.planned_through);
    expect(replanned.inflight).toBeUndefined();
    expect(replanned.epoch).toBe(seen.epoch + 2);

    const late = await dispatchSnapshot(ctx, stale);
    expect(late).toMatchObject({ models_claimed: 0, claims_lost: 1, work_items: 0, payload_gets: 0 });
    expect(await readModelRow(cloud.clients, m)).toEqual(replanned);
    expect(await drainManifests(cloud.clients)).toEqual([]);

    // A fresh tick, reading the new epoch, claims it.
    expect((await runTick()).counters.models_claimed).toBe(1);
  });
});

function snapshot(value: Awaited<ReturnType<typeof readSnapshot>>['snapshot'], modelId: string) {
  const row = value.models.get(modelId);
  if (row === undefined) throw new Error(`model ${modelId} missing from the snapshot`);
  return row;
}
