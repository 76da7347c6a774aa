import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkLineage } from '../../bench/chaos/lineage-checks.js';
import { readBlob } from '../../bench/chaos/storage-checks.js';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import { config } from '../../shared/base/config.js';
import type { FutureRow, LiveRow, ModelRow } from '../../shared/domain/records.js';
import { readFutureResult } from '../../shared/repositories/futures.js';
import { collectGarbage, DEFAULT_BLOB_GC_POLICY } from '../../shared/services/sweeper/blob-gc.js';
import { runWorkItem, type WorkerEvent } from '../../shared/services/worker/index.js';
import { StateCache } from '../../shared/services/worker/state-cache.js';
import { NoisyBackend, stateTagOf } from '../support/noisy-backend.js';
import { gate } from '../support/wait.js';
import { crossEntropy, textDatum, WorkerHarness } from '../support/worker-harness.js';

/**
 * E3-E5 on a non-deterministic backend: two deliveries of one work item run at once (SQS delivers at
 * least once), on a backend whose every run makes different bytes. The losing run passes its fence
 * while the work item still holds the model, and its state PUT lands only after the winner's commit:
 * the committed row must still name exactly the bytes its own run wrote, its results produced from
 * that state, and the loser's object must be garbage the sweeper collects. With both runs writing the
 * same keys (as before runs were in keys), the loser's late PUT replaces the committed state: the
 * lineage check catches it.
 */
describe('a duplicate delivery on a non-deterministic backend', () => {
  let h: WorkerHarness;

  beforeAll(async () => {
    h = await WorkerHarness.start();
  });
  afterAll(() => h?.cloud.clients.dynamo.destroy());

  const onlyModel = (modelId: string) => (row: LiveRow) => row.model_id === modelId;

  /**
   * A model created and trained one step, then [forward_backward, optim_step] dispatched once and
   * run twice: the winner pauses after its writes until the loser, past its fence, is about to PUT
   * its state; the loser's PUT waits for the winner's commit.
   */
  async function raceTwoDeliveries(tenant: string, runIds: { winner?: string; loser?: string }) {
    const t = h.tenant(tenant);
    const { model_id: modelId, request_id: created } = await t.createModel(4, 5);
    const first = await t.pass('forward_backward', modelId, crossEntropy(textDatum('before the race')));
    for (
      let d = await h.dispatch({ only: onlyModel(modelId) });
      d;
      d = await h.dispatch({ only: onlyModel(modelId) })
    ) {
      expect((await runWorkItem(d.manifest, { backend: new NoisyBackend(1) })).retry).toBe(false);
    }
    const fb = await t.pass('forward_backward', modelId, crossEntropy(textDatum('a step run twice')));
    const optim = await t.optimStep(modelId);
    const dispatched = await h.dispatch({ only: onlyModel(modelId) });
    expect(dispatched?.item.models[0]?.steps.map((step) => step.request_id)).toEqual([fb, optim]);

    const winnerWrote = gate((event: WorkerEvent) => event.kind === 'model-written');
    let loserAtPut: () => void = () => {};
    const loserPuts = new Promise<void>((resolve) => (loserAtPut = resolve));
    let winnerDone: () => void = () => {};
    const winnerCommitted = new Promise<void>((resolve) => (winnerDone = resolve));
    // The loser's state PUT, held until the winner's commit has landed.
    const loserClients = localAwsClients(h.cloud.endpoints);
    loserClients.s3.middlewareStack.add(
      (next, context) => async (args) => {
        const key = (args.input as { Key?: unknown }).Key;
        if (
          context.commandName === 'PutObjectCommand' &&
          typeof key === 'string' &&
          key.startsWith('state/')
        ) {
          loserAtPut();
          await winnerCommitted;
        }
        return next(args);
      },
      { step: 'initialize', name: 'holdStatePut' },
    );
    const winnerStates = new StateCache();
    try {
      const winner = runWorkItem(dispatched!.manifest, {
        backend: new NoisyBackend(11),
        states: winnerStates,
        onEvent: winnerWrote.onEvent,
        ...(runIds.winner === undefined ? {} : { runId: runIds.winner }),
      });
      const loser = runWorkItem(dispatched!.manifest, {
        backend: new NoisyBackend(22),
        clients: { doc: loserClients.doc, s3: loserClients.s3 },
        states: new StateCache(),
        ...(runIds.loser === undefined ? {} : { runId: runIds.loser }),
      });
      await winnerWrote.arrived;
      await loserPuts;
      winnerWrote.open();
      const won = await winner;
      winnerDone();
      const lost = await loser;
      const row = (await h.modelRow(modelId)) as ModelRow;
      const futures = new Map<string, FutureRow>();
      for (const id of [created, first, fb, optim]) futures.set(id, (await h.future(id)) as FutureRow);
      const { s3 } = h.cloud.clients;
      const bucket = config().bucket;
      const lineage = await checkLineage({
        models: new Map([[modelId, row]]),
        futures,
        readBlob: (key) => readBlob(s3, bucket, key),
        readResult: (future) => readFutureResult(s3, bucket, future),
      });
      return { modelId, row, won, lost, lineage, winnerStates, futures: { fb, optim } };
    } finally {
      loserClients.dynamo.destroy();
      loserClients.s3.destroy();
    }
  }

  it('commits exactly the bytes its own run wrote; the loser’s late state is an orphan the sweeper collects', async () => {
    const race = await raceTwoDeliveries('dup-runs', {});
    expect(race.won.models.map((model) => model.outcome)).toEqual(['committed']);
    // The loser's commit fails its condition and, re-reading the row, finds another run's commit.
    expect(race.lost.models.map((model) => model.outcome)).toEqual(['lost']);
    expect(race.row.applied_through).toBe(4);
    expect(race.row.inflight).toBeUndefined();
    expect(race.lineage).toMatchObject({ models_checked: 1, states_readable: 1, tags_compared: 1 });
    expect(race.lineage.mismatched).toEqual([]);
    // Both futures were ended by the winner's run: the one the row records.
    for (const id of [race.futures.fb, race.futures.optim]) {
      expect((await h.future(id))?.run).toBe(race.row.last_run);
    }

    // The loser's state sits beside the committed one, under its own run's key.
    const { s3 } = h.cloud.clients;
    const bucket = config().bucket;
    const committed = race.row.state_ref as string;
    const epochPrefix = committed.slice(0, committed.lastIndexOf('/') + 1);
    const listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: epochPrefix }));
    const keys = (listed.Contents ?? []).map((object) => object.Key as string);
    expect(keys).toHaveLength(2);
    const orphan = keys.find((key) => key !== committed) as string;
    // The process that committed keeps the state it wrote, byte for byte what S3 holds (StateCache).
    const stored = (await readBlob(s3, bucket, committed)) as Uint8Array;
    const kept = race.winnerStates.get(committed) as Uint8Array;
    expect(Buffer.from(kept).equals(Buffer.from(stored))).toBe(true);
    expect(stateTagOf(stored)).not.toBe(stateTagOf((await readBlob(s3, bucket, orphan)) as Uint8Array));

    const target = {
      s3,
      doc: h.cloud.clients.doc,
      bucket,
      futuresTable: config().table('futures'),
      modelsTable: config().table('models'),
    };
    await collectGarbage(target, Date.now() + DEFAULT_BLOB_GC_POLICY.stateGraceMs + 60_000);
    expect(await readBlob(s3, bucket, orphan)).toBeUndefined();
    expect(
      Buffer.from((await readBlob(s3, bucket, committed)) as Uint8Array).equals(Buffer.from(stored)),
    ).toBe(true);
  });

  it('with both runs writing the same keys, the loser’s PUT after the commit is caught by the lineage check', async () => {
    const race = await raceTwoDeliveries('dup-same-keys', { winner: 'same', loser: 'same' });
    expect(race.won.models.map((model) => model.outcome)).toEqual(['committed']);
    expect(race.lineage.tags_compared).toBe(1);
    expect(race.lineage.mismatched).toHaveLength(1);
  });
});
