import { ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { beforeEach, describe, expect, it } from 'vitest';
import { config } from '../../shared/config.js';
import { mintRequestId } from '../../shared/ids.js';
import { runTick } from '../../shared/scheduler/tick.js';
import { storageKeys } from '../../shared/storage-keys.js';
import { type BlobGcTarget, collectGarbage, DEFAULT_BLOB_GC_POLICY } from '../../shared/sweeper/blob-gc.js';
import { sweep } from '../../shared/sweeper/sweep.js';
import type { TestCloud } from '../support/cloud.js';
import { drainWorkItems, readModelRow, readyModel, schedulerCloud, submitStep } from './scheduler-harness.js';

/** E5: the sweeper deletes exactly the blobs no committed row references, and only old ones. */
describe('sweeper: unreferenced blobs', () => {
  let cloud: TestCloud;
  let target: BlobGcTarget;
  beforeEach(async () => {
    cloud = await schedulerCloud();
    target = {
      s3: cloud.clients.s3,
      doc: cloud.clients.doc,
      bucket: config().bucket,
      futuresTable: config().table('futures'),
      modelsTable: config().table('models'),
    };
  });

  const put = (key: string) =>
    cloud.clients.s3.send(new PutObjectCommand({ Bucket: config().bucket, Key: key, Body: 'x' }));
  const keys = async (): Promise<string[]> => {
    const answer = await cloud.clients.s3.send(new ListObjectsV2Command({ Bucket: config().bucket }));
    return (answer.Contents ?? []).map((object) => object.Key!).sort();
  };

  /**
   * One model committed at epoch 1 (state/<m>/1.bin) and in flight at epoch 2 (its worker has
   * written state/<m>/2.bin but not committed), an abandoned state at epoch 0, a model that does not
   * exist, a pending request (payload referenced), an orphan payload and result, one work item.
   */
  async function scene() {
    const m = await readyModel(cloud.clients);
    const live = await submitStep(cloud.clients, m, 'forward_backward');
    await runTick();
    const [item] = await drainWorkItems(cloud.clients);
    expect((await readModelRow(cloud.clients, m)).inflight).toBe(`${m}@2`);
    const orphanId = mintRequestId();
    const blobs = {
      committed: storageKeys.modelState(m, 1),
      inflight: storageKeys.modelState(m, 2),
      abandoned: storageKeys.modelState(m, 0),
      unknownModel: storageKeys.modelState('model-gone', 7),
      livePayload: storageKeys.payload(live.requestId),
      orphanPayload: storageKeys.payload(orphanId),
      orphanResult: storageKeys.result(orphanId),
      workItem: storageKeys.workItem(item!.work_item_id),
    };
    for (const key of [
      blobs.inflight,
      blobs.abandoned,
      blobs.unknownModel,
      blobs.orphanPayload,
      blobs.orphanResult,
    ]) {
      await put(key);
    }
    return blobs;
  }

  it('keeps everything younger than its grace period', async () => {
    const blobs = await scene();
    const before = await keys();
    expect(before).toEqual(expect.arrayContaining(Object.values(blobs)));
    const counters = await collectGarbage(target, Date.now());
    expect(counters).toMatchObject({
      work_items_deleted: 0,
      states_deleted: 0,
      payloads_deleted: 0,
      results_deleted: 0,
    });
    expect(await keys()).toEqual(before);
  });

  it('deletes old work items, unreferenced states and payloads/results whose row is gone', async () => {
    const blobs = await scene();
    const muchLater = Date.now() + DEFAULT_BLOB_GC_POLICY.workItemRetentionMs + 60_000;
    const counters = await collectGarbage(target, muchLater);
    expect(counters).toMatchObject({
      // The create_model's work item and the step's.
      work_items_deleted: 2,
      states_deleted: 2,
      payloads_deleted: 1,
      results_deleted: 1,
      delete_errors: 0,
    });
    const left = await keys();
    expect(left).toEqual(expect.arrayContaining([blobs.committed, blobs.inflight, blobs.livePayload]));
    for (const gone of [
      blobs.abandoned,
      blobs.unknownModel,
      blobs.orphanPayload,
      blobs.orphanResult,
      blobs.workItem,
    ]) {
      expect(left).not.toContain(gone);
    }
  });

  it('runs as part of a sweep', async () => {
    const blobs = await scene();
    const report = await sweep({ now: () => Date.now() + 2 * 3600_000, tick: { maxPasses: 1 } });
    // Two hours on, the in-flight lease has long ended: the re-plan (first) fences epoch 2, so its
    // state object is no longer referenced either. The work item is still within its retention.
    expect(report.replan).toMatchObject({ replanned: 1 });
    expect(report.gc).toMatchObject({
      work_items_deleted: 0,
      states_deleted: 3,
      payloads_deleted: 1,
      results_deleted: 1,
    });
    const left = await keys();
    expect(left).toEqual(expect.arrayContaining([blobs.workItem, blobs.committed, blobs.livePayload]));
    expect(left).not.toContain(blobs.inflight);
  });
});
