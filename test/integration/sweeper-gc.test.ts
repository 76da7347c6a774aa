import { ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { config } from '../../shared/base/config.js';
import { mintRequestId } from '../../shared/base/ids.js';
import { checkpointContentId, storageKeys } from '../../shared/base/storage-keys.js';
import { type CheckpointNameRecord, type LiveRow, registryKey } from '../../shared/domain/records.js';
import { runTick } from '../../shared/services/scheduler/tick.js';
import {
  type BlobGcTarget,
  collectGarbage,
  DEFAULT_BLOB_GC_POLICY,
} from '../../shared/services/sweeper/blob-gc.js';
import { sweep } from '../../shared/services/sweeper/sweep.js';
import { runWorkItem } from '../../shared/services/worker/index.js';
import type { TestCloud } from '../support/cloud.js';
import {
  commitWorkItem,
  createModel,
  drainWorkItems,
  readModelRow,
  schedulerCloud,
  submitStep,
} from '../support/scheduler-harness.js';
import { crossEntropy, type TenantClient, textDatum, WorkerHarness } from '../support/worker-harness.js';

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
   * One model committed at epoch 1 (the row's `state/<m>/1/<run>.bin`), with a losing run's state at
   * the same epoch (a duplicate delivery, E3), and in flight at epoch 2 (a run has written
   * `state/<m>/2/<run>.bin` but not committed); an abandoned state at epoch 0 and one in the layout
   * before runs, a model that does not exist, a pending request (payload and a run's result kept), an
   * orphan payload and result, a losing run's result of a request that ended, one work item.
   */
  async function scene() {
    const { modelId: m, requestId: created } = await createModel(cloud.clients);
    await runTick();
    for (const workItem of await drainWorkItems(cloud.clients)) await commitWorkItem(cloud.clients, workItem);
    const live = await submitStep(cloud.clients, m, 'forward_backward');
    await runTick();
    const [item] = await drainWorkItems(cloud.clients);
    const row = await readModelRow(cloud.clients, m);
    expect(row.inflight).toBe(`${m}@2`);
    const orphanId = mintRequestId();
    const blobs = {
      committed: row.state_ref!,
      loser: storageKeys.modelState(m, 1, 'loser'),
      inflight: storageKeys.modelState(m, 2, 'run-a'),
      inflightDuplicate: storageKeys.modelState(m, 2, 'run-b'),
      abandoned: storageKeys.modelState(m, 0, 'run-a'),
      beforeRuns: storageKeys.legacyModelState(m, 0),
      unknownModel: storageKeys.modelState('model-gone', 7, 'run-a'),
      livePayload: storageKeys.payload(live.requestId),
      liveResult: storageKeys.result(live.requestId, 'run-a'),
      orphanPayload: storageKeys.payload(orphanId),
      orphanResult: storageKeys.result(orphanId, 'run-a'),
      loserResult: storageKeys.result(created, 'loser'),
      workItem: storageKeys.workItem(item!.work_item_id),
    };
    expect(blobs.committed).toMatch(new RegExp(`^state/${m}/1/[^/]+\\.bin$`));
    for (const key of [
      blobs.loser,
      blobs.inflight,
      blobs.inflightDuplicate,
      blobs.abandoned,
      blobs.beforeRuns,
      blobs.unknownModel,
      blobs.liveResult,
      blobs.orphanPayload,
      blobs.orphanResult,
      blobs.loserResult,
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
      states_deleted: 4,
      payloads_deleted: 1,
      results_deleted: 2,
      delete_errors: 0,
    });
    const left = await keys();
    expect(left).toEqual(
      expect.arrayContaining([
        blobs.committed,
        blobs.inflight,
        blobs.inflightDuplicate,
        blobs.livePayload,
        blobs.liveResult,
      ]),
    );
    for (const gone of [
      blobs.loser,
      blobs.abandoned,
      blobs.beforeRuns,
      blobs.unknownModel,
      blobs.orphanPayload,
      blobs.orphanResult,
      blobs.loserResult,
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
      states_deleted: 6,
      payloads_deleted: 1,
      results_deleted: 2,
    });
    const left = await keys();
    expect(left).toEqual(expect.arrayContaining([blobs.workItem, blobs.committed, blobs.livePayload]));
    expect(left).not.toContain(blobs.inflight);
    expect(left).not.toContain(blobs.inflightDuplicate);
  });
});

/**
 * Checkpoint blobs and archives, made by the real worker: a save whose attempt wrote its blob but
 * never committed, until K attempts failed it (E2), and a losing run's copy of a committed save (a
 * duplicate delivery, E3) are the orphans; committed saves, a save still pending, a blob with no future
 * row and keys the worker never writes are not the GC's to take.
 */
describe('sweeper: checkpoint blobs', () => {
  const backend = new ReferenceBackend();
  const grace = DEFAULT_BLOB_GC_POLICY.checkpointGraceMs;
  let h: WorkerHarness;
  let t: TenantClient;
  let target: BlobGcTarget;
  let kept: string;
  let blobs: Record<
    | 'training'
    | 'sampler'
    | 'failed'
    | 'failedBeforeRuns'
    | 'loser'
    | 'pending'
    | 'noRow'
    | 'otherModel'
    | 'unparsable',
    string
  >;
  let archives: Record<'training' | 'sampler' | 'failed' | 'loser' | 'pending', string>;

  const onlyModel = (modelId: string) => (row: LiveRow) => row.model_id === modelId;
  const put = (key: string) =>
    h.cloud.clients.s3.send(new PutObjectCommand({ Bucket: config().bucket, Key: key, Body: 'x' }));
  const listed = async (prefix: string): Promise<string[]> => {
    const answer = await h.cloud.clients.s3.send(
      new ListObjectsV2Command({ Bucket: config().bucket, Prefix: prefix }),
    );
    return (answer.Contents ?? []).map((object) => object.Key!).sort();
  };
  const checkpointKeys = () => listed('checkpoints/');
  const archiveKeys = () => listed('archives/');
  /** The one object a run of this save wrote under `prefix` (its key holds the run, E3). */
  const written = async (prefix: 'checkpoints' | 'archives', modelId: string, requestId: string) => {
    const keys = await listed(`${prefix}/${modelId}/${checkpointContentId(requestId)}/`);
    expect(keys).toHaveLength(1);
    return keys[0]!;
  };

  async function drainModel(modelId: string): Promise<void> {
    for (let d = await h.dispatch({ only: onlyModel(modelId) }); d; ) {
      expect((await runWorkItem(d.manifest, { backend })).retry).toBe(false);
      d = await h.dispatch({ only: onlyModel(modelId) });
    }
  }

  /** A save whose worker wrote the checkpoint blob and was stopped before its commit. */
  async function saveWrittenNotCommitted(modelId: string, name: string): Promise<string> {
    const saveId = await t.saveWeights(modelId, name);
    const dispatched = await h.dispatch({ only: onlyModel(modelId) });
    const stop = new AbortController();
    const outcome = await runWorkItem(dispatched!.manifest, {
      backend,
      signal: stop.signal,
      onEvent: (event) => {
        if (event.kind === 'model-written') stop.abort();
      },
    });
    expect(outcome.models.map((m) => m.outcome)).toEqual(['abandoned']);
    return saveId;
  }

  beforeAll(async () => {
    h = await WorkerHarness.start();
    target = {
      s3: h.cloud.clients.s3,
      doc: h.cloud.clients.doc,
      bucket: config().bucket,
      futuresTable: config().table('futures'),
      modelsTable: config().table('models'),
    };
    t = h.tenant('gc-checkpoints');

    const model = (await t.createModel(4, 7)).model_id;
    kept = model;
    const trainingSave = await t.saveWeights(model, 'kept');
    const samplerSave = await t.saveForSampler(model, 'sampler-kept');
    await drainModel(model);

    // Every attempt writes the same key; after K attempts the save is failed by a fail step (E2).
    const doomedModel = (await t.createModel(4, 8)).model_id;
    await drainModel(doomedModel);
    const doomed = await saveWrittenNotCommitted(doomedModel, 'doomed');
    for (let attempt = 0; ; attempt++) {
      expect(attempt).toBeLessThanOrEqual(config().tunables.maxAttempts);
      await h.replan(doomedModel);
      const next = await h.dispatch({ only: onlyModel(doomedModel) });
      if (next?.item.models[0]?.steps[0]?.fail !== undefined) {
        await runWorkItem(next.manifest, { backend });
        break;
      }
    }
    expect(await h.future(doomed)).toMatchObject({ status: 'failed', error: { category: 'server' } });

    const pendingModel = (await t.createModel(4, 9)).model_id;
    await drainModel(pendingModel);
    const pending = await saveWrittenNotCommitted(pendingModel, 'in-flight');
    expect(await h.future(pending)).toMatchObject({ status: 'pending' });

    const failed = await written('checkpoints', doomedModel, doomed);
    blobs = {
      training: await written('checkpoints', model, trainingSave),
      sampler: await written('checkpoints', model, samplerSave),
      failed,
      failedBeforeRuns: storageKeys.legacyCheckpoint(doomedModel, checkpointContentId(doomed)),
      // Another run of the committed save: its blob and archive are no commit's.
      loser: storageKeys.checkpoint(model, checkpointContentId(trainingSave), 'loser'),
      pending: await written('checkpoints', pendingModel, pending),
      noRow: storageKeys.checkpoint(model, checkpointContentId(mintRequestId()), 'run-a'),
      // The failed save's content id under a model that is not the save's.
      otherModel: failed.replace(doomedModel, model),
      unparsable: `${failed}.bak`,
    };
    archives = {
      training: await written('archives', model, trainingSave),
      sampler: await written('archives', model, samplerSave),
      failed: await written('archives', doomedModel, doomed),
      loser: storageKeys.archive(model, checkpointContentId(trainingSave), 'loser'),
      pending: await written('archives', pendingModel, pending),
    };
    for (const key of [
      blobs.failedBeforeRuns,
      blobs.loser,
      blobs.noRow,
      blobs.otherModel,
      blobs.unparsable,
      archives.loser,
    ]) {
      await put(key);
    }
    expect(await checkpointKeys()).toEqual(Object.values(blobs).sort());
    expect(await archiveKeys()).toEqual(Object.values(archives).sort());
    // The saves that completed are the ones their name records commit.
    for (const [name, kind, key, archive] of [
      ['kept', 'weights', blobs.training, archives.training],
      ['sampler-kept', 'sampler', blobs.sampler, archives.sampler],
    ] as const) {
      expect(
        await h.registry<CheckpointNameRecord>(registryKey.checkpointName(model, kind, name)),
      ).toMatchObject({ status: 'committed', blob_key: key, archive_key: archive });
    }
  });

  afterAll(() => h?.cloud.clients.dynamo.destroy());

  it("deletes only a failed save's and a losing run's objects, and only once past their grace", async () => {
    const young = await collectGarbage(target, Date.now() + grace - 120_000);
    expect(young).toMatchObject({ checkpoints_deleted: 0, archives_deleted: 0, delete_errors: 0 });
    expect(await checkpointKeys()).toEqual(Object.values(blobs).sort());
    expect(await archiveKeys()).toEqual(Object.values(archives).sort());

    const old = await collectGarbage(target, Date.now() + grace + 120_000);
    expect(old).toMatchObject({ checkpoints_deleted: 3, archives_deleted: 2, delete_errors: 0 });
    const { failed, failedBeforeRuns, loser, ...others } = blobs;
    expect(await checkpointKeys()).toEqual(Object.values(others).sort());
    const { failed: failedArchive, loser: loserArchive, ...kept } = archives;
    expect(await archiveKeys()).toEqual(Object.values(kept).sort());
  });

  it('leaves committed checkpoints loadable: a load and a sample answer as the sequential oracle', async () => {
    await collectGarbage(target, Date.now() + grace + 120_000);
    const load = await t.loadWeights(kept, `tinker://${kept}/weights/kept`);
    // The loaded weights show in a forward's loss, so the answer depends on the blob's bytes.
    const forward = await t.pass('forward', kept, crossEntropy(textDatum('after the load')));
    const session = await t.samplingSession({ model_path: `tinker://${kept}/sampler-kept` });
    const sample = await t.sample(session, {
      num_samples: 1,
      prompt: { chunks: [{ type: 'encoded_text', tokens: [104, 105] }] },
      sampling_params: { max_tokens: 5, temperature: 1, seed: 3 },
    });
    await drainModel(kept);
    const doomed = h.submissions.find((s) => s.kind === 'save_weights' && s.path.endsWith('/doomed'));
    const expected = await h.oracle({ serverFailed: new Set([doomed!.request_id]) });
    for (const id of [load, forward, sample]) {
      const answer = await h.answer(t.tenant, id);
      expect(answer).not.toHaveProperty('error');
      expect(answer).toEqual(expected.get(id));
    }
  });
});
