import { DeleteObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { beforeEach, describe, expect, it } from 'vitest';
import { attachMeter, createMeter } from '../../bench/metering.js';
import { LOCAL_CREDENTIALS, LOCAL_REGION } from '../../local/cloud/resources.js';
import { config } from '../../shared/base/config.js';
import { storageKeys } from '../../shared/base/storage-keys.js';
import { registryKey } from '../../shared/domain/records.js';
import { readRegistryItem } from '../../shared/repositories/registry.js';
import { schedulerAdapters } from '../../shared/services/scheduler/adapters.js';
import { schedulerSettings } from '../../shared/services/scheduler/settings.js';
import { runTick } from '../../shared/services/scheduler/tick.js';
import type { TestCloud } from '../support/cloud.js';
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

/**
 * Ticks driven directly against the local cloud, with rows written through the intake repositories:
 * SkyRL's regression cases (docs/design.md#r2) as work items read back from S3, and R6's count
 * of payload reads.
 */
describe('scheduler tick on the local cloud', () => {
  let cloud: TestCloud;
  beforeEach(async () => {
    cloud = await schedulerCloud();
  });

  it('one model [fb, optim, fb, optim]: the first tick sends fb, optim; the rest after the commit', async () => {
    const m = await readyModel(cloud.clients);
    const fb1 = await submitStep(cloud.clients, m, 'forward_backward');
    const optim2 = await submitStep(cloud.clients, m, 'optim_step');
    const fb3 = await submitStep(cloud.clients, m, 'forward_backward');
    const optim4 = await submitStep(cloud.clients, m, 'optim_step');
    const rowBefore = await readFutureRow(cloud.clients, fb1.requestId);

    const outcome = await runTick();
    expect(outcome.status).toBe('ran');
    expect(outcome.counters).toMatchObject({ work_items: 1, steps_dispatched: 2, payload_gets: 2 });
    const [item, ...more] = await drainWorkItems(cloud.clients);
    expect(more).toEqual([]);
    expect(stepIds(item!)).toEqual({ [m]: [fb1.requestId, optim2.requestId] });
    const model = item!.models[0]!;
    // The committed row's key, as the commit of epoch 1 named it (E3: never derived).
    const committed = (await readModelRow(cloud.clients, m))?.state_ref;
    expect(committed).toMatch(new RegExp(`^state/${m}/1/[^/]+\\.bin$`));
    expect(model).toMatchObject({
      epoch: 2,
      inflight: `${m}@2`,
      base_applied_through: 1,
      base_state_ref: committed,
    });
    expect(model.steps.map((step) => [step.seq, step.request_type])).toEqual([
      [2, 'forward_backward'],
      [3, 'optim_step'],
    ]);
    expect(model.steps.map((step) => step.payload)).toEqual([fb1.payload, optim2.payload]);

    // What is in flight lives on the model row; the request rows are untouched (R6).
    expect(await readModelRow(cloud.clients, m)).toMatchObject({
      inflight: `${m}@2`,
      planned_through: 3,
      epoch: 2,
    });
    expect(await readFutureRow(cloud.clients, fb1.requestId)).toEqual(rowBefore);

    // R3: nothing more while the work item is in flight.
    expect((await runTick()).counters.work_items).toBe(0);
    await commitWorkItem(cloud.clients, item!);
    await runTick();
    const [next] = await drainWorkItems(cloud.clients);
    expect(stepIds(next!)).toEqual({ [m]: [fb3.requestId, optim4.requestId] });
    const advanced = (await readModelRow(cloud.clients, m))?.state_ref;
    expect(advanced).toMatch(new RegExp(`^state/${m}/2/[^/]+\\.bin$`));
    expect(next!.models[0]).toMatchObject({ base_applied_through: 3, base_state_ref: advanced });
  });

  it('model_a optim and model_b optim, no passes: both in one work item', async () => {
    const a = await readyModel(cloud.clients);
    const b = await readyModel(cloud.clients);
    const optimA = await submitStep(cloud.clients, a, 'optim_step');
    const optimB = await submitStep(cloud.clients, b, 'optim_step');
    await runTick();
    const items = await drainWorkItems(cloud.clients);
    expect(items).toHaveLength(1);
    expect(stepIds(items[0]!)).toEqual({ [a]: [optimA.requestId], [b]: [optimB.requestId] });
  });

  it('model_a [fb1, optim2, fb3, optim4], model_b [optim5]: fb1 with singles {optim2, optim5}', async () => {
    const a = await readyModel(cloud.clients);
    const b = await readyModel(cloud.clients);
    const fb1 = await submitStep(cloud.clients, a, 'forward_backward');
    const optim2 = await submitStep(cloud.clients, a, 'optim_step');
    await submitStep(cloud.clients, a, 'forward_backward');
    await submitStep(cloud.clients, a, 'optim_step');
    const optim5 = await submitStep(cloud.clients, b, 'optim_step');
    await runTick();
    const items = await drainWorkItems(cloud.clients);
    expect(items.map(stepIds)).toEqual([{ [a]: [fb1.requestId, optim2.requestId], [b]: [optim5.requestId] }]);
  });

  it("[fb a, optim a, fb a, fb b]: passes {1st, 4th}, with a's optim as its single", async () => {
    const a = await readyModel(cloud.clients);
    const b = await readyModel(cloud.clients);
    const fbA1 = await submitStep(cloud.clients, a, 'forward_backward');
    const optimA = await submitStep(cloud.clients, a, 'optim_step');
    await submitStep(cloud.clients, a, 'forward_backward');
    const fbB = await submitStep(cloud.clients, b, 'forward_backward');
    await runTick();
    const items = await drainWorkItems(cloud.clients);
    expect(items.map(stepIds)).toEqual([{ [a]: [fbA1.requestId, optimA.requestId], [b]: [fbB.requestId] }]);
  });

  it('samples a ckpt_1, ckpt_2, ckpt_1 plus a base sample: {1st, 3rd, base}, then the 2nd in its own work item of the same tick', async () => {
    const a = await readyModel(cloud.clients);
    const ckpt1 = samplingSession({ modelId: a, checkpointId: 'c-ckpt-1' });
    const ckpt2 = samplingSession({ modelId: a, checkpointId: 'c-ckpt-2' });
    const base = samplingSession();
    const s1 = await submitSampleRequest(cloud.clients, ckpt1);
    const s2 = await submitSampleRequest(cloud.clients, ckpt2);
    const s3 = await submitSampleRequest(cloud.clients, ckpt1);
    const s4 = await submitSampleRequest(cloud.clients, base);

    const first = await runTick();
    expect(first.counters).toMatchObject({
      samples_dispatched: 4,
      samples_claimed: 4,
      payload_gets: 4,
      work_items: 2,
    });
    const [item, second, ...none] = await drainWorkItems(cloud.clients);
    expect(item!.models).toEqual([]);
    expect(item!.samples.map((sample) => sample.request_id)).toEqual([
      s1.requestId,
      s3.requestId,
      s4.requestId,
    ]);
    expect(item!.samples[0]).toMatchObject({
      tenant: 'tenant-sched',
      checkpoint_id: 'c-ckpt-1',
      payload: s1.payload,
    });
    expect(item!.samples.every((sample) => sample.claim_token === item!.work_item_id)).toBe(true);
    const claim = await readRegistryItem<{ work_item_id: string }>(
      cloud.clients.doc,
      cloud.names.tables.registry,
      registryKey.sampleClaim(s1.requestId),
    );
    expect(claim?.work_item_id).toBe(item!.work_item_id);

    // The claimed three are not planned again; the 2nd has model a's checkpoint to itself, in a second
    // work item of the same tick (an incremental tick would not be woken again for it).
    expect(none).toEqual([]);
    expect(second!.samples.map((sample) => [sample.request_id, sample.checkpoint_id])).toEqual([
      [s2.requestId, 'c-ckpt-2'],
    ]);
    expect((await runTick()).counters.work_items).toBe(0);
  });

  it('525 pending passes: every one dispatched exactly once, in seq order, within the caps', async () => {
    const models: string[] = [];
    for (let n = 0; n < 6; n++) models.push(await readyModel(cloud.clients));
    const submitted = new Map<string, string[]>();
    await Promise.all(
      models.map(async (m, index) => {
        const ids: string[] = [];
        for (let n = 0; n < (index < 3 ? 88 : 87); n++)
          ids.push((await submitStep(cloud.clients, m, 'forward')).requestId);
        submitted.set(m, ids);
      }),
    );
    const first = await runTick();
    // 256 requests a work item: two full items; what is left belongs to models now in flight (R3).
    expect(first.counters).toMatchObject({ work_items: 2, steps_dispatched: 512, payload_gets: 512 });
    const dispatched = await drainWorkItems(cloud.clients);
    for (const item of dispatched) await commitWorkItem(cloud.clients, item);
    expect((await runTick()).counters.steps_dispatched).toBe(13);
    dispatched.push(...(await drainWorkItems(cloud.clients)));

    const runs = new Map<string, string[]>();
    for (const item of dispatched) {
      expect(item.models.reduce((sum, model) => sum + model.steps.length, 0)).toBeLessThanOrEqual(256);
      for (const model of item.models) {
        expect(model.steps.length).toBeLessThanOrEqual(90);
        runs.set(model.model_id, [
          ...(runs.get(model.model_id) ?? []),
          ...model.steps.map((s) => s.request_id),
        ]);
      }
    }
    expect(new Map([...runs].map(([m, ids]) => [m, ids.length]))).toEqual(
      new Map([...submitted].map(([m, ids]) => [m, ids.length])),
    );
    for (const [m, ids] of submitted) expect(runs.get(m)).toEqual(ids);
  }, 180_000);

  describe('R6: payload reads', () => {
    function meteredTick() {
      const meter = createMeter();
      const s3 = new S3Client({
        region: LOCAL_REGION,
        credentials: LOCAL_CREDENTIALS,
        endpoint: cloud.endpoints.s3,
        forcePathStyle: true,
      });
      attachMeter(s3, meter);
      const settings = schedulerSettings();
      const adapters = schedulerAdapters(settings, { ...cloud.clients, s3 });
      return { meter, run: () => runTick({ settings, adapters }) };
    }

    it('a parked tick makes no S3 call; a dispatching one GETs exactly the dispatched requests', async () => {
      const m = await readyModel(cloud.clients);
      const first = [
        await submitStep(cloud.clients, m, 'forward_backward'),
        await submitStep(cloud.clients, m, 'optim_step'),
      ];
      const parked = [
        await submitStep(cloud.clients, m, 'forward_backward'),
        await submitStep(cloud.clients, m, 'forward_backward'),
      ];
      const sample = await submitSampleRequest(cloud.clients, samplingSession());

      const dispatching = meteredTick();
      const outcome = await dispatching.run();
      expect(outcome.counters).toMatchObject({ steps_dispatched: 2, samples_dispatched: 1 });
      expect(dispatching.meter.callsByOperation).toEqual({ GetObjectCommand: 3, PutObjectCommand: 1 });
      const [item] = await drainWorkItems(cloud.clients);
      expect(stepIds(item!)).toEqual({ [m]: first.map((step) => step.requestId) });
      expect(item!.samples.map((s) => s.request_id)).toEqual([sample.requestId]);

      // Everything left is parked behind the model in flight (R3) and the sample is claimed.
      const idle = meteredTick();
      expect((await idle.run()).counters).toMatchObject({ rows_scanned: 5, work_items: 0, payload_gets: 0 });
      expect(idle.meter.calls).toBe(0);
      expect(await drainManifests(cloud.clients)).toEqual([]);
      expect(parked).toHaveLength(2);
    });

    it('a missing payload: the training step becomes a server-error fail step, the sample a fail entry', async () => {
      const m = await readyModel(cloud.clients);
      const fb = await submitStep(cloud.clients, m, 'forward_backward');
      const optim = await submitStep(cloud.clients, m, 'optim_step');
      const sample = await submitSampleRequest(cloud.clients, samplingSession());
      for (const id of [fb.requestId, sample.requestId]) {
        await cloud.clients.s3.send(
          new DeleteObjectCommand({ Bucket: config().bucket, Key: storageKeys.payload(id) }),
        );
      }
      const outcome = await runTick();
      expect(outcome.counters).toMatchObject({
        payloads_unreadable: 2,
        fail_steps_dispatched: 1,
        fail_samples_dispatched: 1,
        samples_dispatched: 0,
      });
      const [item] = await drainWorkItems(cloud.clients);
      expect(item!.models[0]!.steps).toEqual([
        {
          request_id: fb.requestId,
          seq: 2,
          request_type: 'forward_backward',
          fail: { message: 'The request payload is missing', category: 'server' },
        },
        { request_id: optim.requestId, seq: 3, request_type: 'optim_step', payload: optim.payload },
      ]);
      expect(item!.samples).toEqual([
        expect.objectContaining({
          request_id: sample.requestId,
          fail: { message: 'The request payload is missing', category: 'server' },
        }),
      ]);
      expect(item!.samples[0]).not.toHaveProperty('payload');
      // The scheduler writes no request row (R5, R6): both end only when the work item commits.
      expect((await readFutureRow(cloud.clients, fb.requestId)).status).toBe('pending');
      expect((await readFutureRow(cloud.clients, sample.requestId)).status).toBe('pending');
      await commitWorkItem(cloud.clients, item!);
      expect(await readFutureRow(cloud.clients, fb.requestId)).toMatchObject({
        status: 'failed',
        error: { message: 'The request payload is missing', category: 'server' },
      });
      expect((await readFutureRow(cloud.clients, optim.requestId)).status).toBe('completed');
      expect(await readFutureRow(cloud.clients, sample.requestId)).toMatchObject({
        status: 'failed',
        error: { message: 'The request payload is missing', category: 'server' },
      });
    });
  });
});
