import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { GetObjectCommand, HeadObjectCommand, ListMultipartUploadsCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  getObjectToFile,
  type PartSource,
  putObjectFrom,
  withFileSource,
} from '../../shared/aws/s3-streams.js';
import { EngineBackend } from '../../shared/backend/engine/engine-backend.js';
import { EngineProcess } from '../../shared/backend/engine/engine-process.js';
import { torchEngineCommand, writeRandomModel } from '../../shared/backend/engine/installed-engines.js';
import { checkpointContentId } from '../../shared/base/storage-keys.js';
import { type CheckpointNameRecord, type ModelRow, registryKey } from '../../shared/domain/records.js';
import { runWorkItem } from '../../shared/services/worker/index.js';
import { readStateBlob, writeStateBlob } from '../../shared/services/worker/state-blobs.js';
import { readTar } from '../support/checkpoint-readers.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { engineUnderTest } from '../support/engine/engine-under-test.js';
import { crossEntropy, textDatum, WorkerHarness } from '../support/worker-harness.js';

/**
 * States and checkpoints larger than one request body (S3 of docs/design.md#s1) through the real local
 * S3, whose request bodies stop at 11 MiB: streamed uploads in parts and downloads to files, then
 * the worker's path on a torch engine serving a random 13M-parameter model, whose rank-32 state is
 * about 20 MB: written and read back, saved as a checkpoint with its archive, loaded, sampled.
 */

const LOCAL_S3_BODY_LIMIT = 11 * 1024 * 1024;
const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

/** Spool files go here, so the test can see that none is left behind. */
const spool = mkdtempSync(path.join(tmpdir(), 'state-blobs-test-'));
const previousTmp = process.env.TMPDIR;
process.env.TMPDIR = spool;
afterAll(() => {
  if (previousTmp === undefined) delete process.env.TMPDIR;
  else process.env.TMPDIR = previousTmp;
  rmSync(spool, { recursive: true, force: true });
});
const spoolFolders = () => readdirSync(spool).filter((name) => name.startsWith('tinker-blob-'));

describe('streamed S3 transfers against the local S3', () => {
  let cloud: TestCloud;
  beforeAll(async () => {
    cloud = await setupTestCloud();
  });

  it('uploads a 20 MiB file in parts and downloads it to a file with its digest', async () => {
    const folder = mkdtempSync(path.join(tmpdir(), 'transfer-'));
    const body = randomBytes(20 * 1024 * 1024 + 123);
    writeFileSync(path.join(folder, 'up'), body);
    const uploaded = await withFileSource(path.join(folder, 'up'), (source) =>
      putObjectFrom(cloud.clients.s3, cloud.names.bucket, 'big/one', source),
    );
    expect(uploaded).toEqual({ size: body.length, parts: 3 });
    const down = await getObjectToFile(
      cloud.clients.s3,
      cloud.names.bucket,
      'big/one',
      path.join(folder, 'down'),
    );
    expect(down).toEqual({ size: body.length, sha256: sha256(body) });
    expect(readFileSync(path.join(folder, 'down')).equals(body)).toBe(true);
    rmSync(folder, { recursive: true });
  });

  it('leaves no object and no open upload when a part fails', async () => {
    const size = 3 * 8 * 1024 * 1024;
    const source: PartSource = {
      size,
      read: async (offset, length) => {
        if (offset > 0) throw new Error('disk gone');
        return new Uint8Array(length);
      },
    };
    await expect(putObjectFrom(cloud.clients.s3, cloud.names.bucket, 'big/failed', source)).rejects.toThrow(
      'disk gone',
    );
    await expect(
      cloud.clients.s3.send(new HeadObjectCommand({ Bucket: cloud.names.bucket, Key: 'big/failed' })),
    ).rejects.toMatchObject({ name: 'NotFound' });
    const open = await cloud.clients.s3.send(
      new ListMultipartUploadsCommand({ Bucket: cloud.names.bucket, Prefix: 'big/failed' }),
    );
    expect(open.Uploads ?? []).toEqual([]);
  });
});

const torch = engineUnderTest();

describe.skipIf(torch.command === undefined || process.env.ENGINE_COMMAND !== undefined)(
  'a model whose state exceeds a request body, on the torch engine',
  () => {
    let modelDir: string;
    const engines: EngineBackend[] = [];
    const engine = () => {
      const backend = new EngineBackend(
        new EngineProcess(torchEngineCommand({ baseModel: modelDir, device: 'cpu', dtype: 'float32' }), {
          requestTimeoutMs: 300_000,
        }),
      );
      engines.push(backend);
      return backend;
    };

    beforeAll(async () => {
      modelDir = path.join(mkdtempSync(path.join(tmpdir(), 'sized-model-')), 'llama-13m');
      await writeRandomModel(modelDir, { hidden: 512, layers: 4 });
    }, 120_000);
    afterAll(async () => {
      await Promise.all(engines.map((backend) => backend.stop()));
      if (modelDir !== undefined) rmSync(path.dirname(modelDir), { recursive: true, force: true });
    });

    it('writes a 20 MB state in parts and reads it back to the same bytes', {
      timeout: 300_000,
    }, async () => {
      const cloud = await setupTestCloud();
      const backend = engine();
      let state = await backend.createModel({ base_model: modelDir, lora_config: { rank: 32, seed: 1 } });
      const input = {
        loss_fn: 'cross_entropy',
        loss_fn_config: {},
        data: [
          {
            model_input: {
              chunks: [{ type: 'encoded_text' as const, tokens: Int32Array.from([5, 6, 7, 8]) }],
            },
            loss_fn_inputs: {
              target_tokens: {
                dtype: 'int64' as const,
                data: BigInt64Array.from([6n, 7n, 8n, 9n]),
                shape: [4],
              },
            },
          },
        ],
      };
      state = (await backend.forwardBackward(state, input)).state;
      state = (await backend.optimStep(state, { learning_rate: 0.01 })).state;
      state = (await backend.forwardBackward(state, input)).state;
      const stored = await writeStateBlob(
        backend,
        cloud.clients.s3,
        cloud.names.bucket,
        'state/big.bin',
        state,
        {
          keepBytesUpTo: 1024 * 1024,
        },
      );
      expect(stored.size).toBeGreaterThan(LOCAL_S3_BODY_LIMIT);
      expect(stored.bytes).toBeUndefined();
      const head = await cloud.clients.s3.send(
        new HeadObjectCommand({ Bucket: cloud.names.bucket, Key: 'state/big.bin' }),
      );
      expect(head.ContentLength).toBe(stored.size);

      const expected = await backend.serializeState(state);
      // Read back by another engine process: loaded from the file, not taken as a resident handle.
      const other = engine();
      const restored = await readStateBlob(other, cloud.clients.s3, cloud.names.bucket, 'state/big.bin');
      expect(other.reuse).toEqual({ resident: 0, loaded: 1 });
      expect(sha256(await other.serializeState(restored))).toBe(sha256(expected));
      expect(spoolFolders()).toEqual([]);
    });

    it('trains, saves (with its archive), loads and samples through the worker', {
      timeout: 600_000,
    }, async () => {
      const h = await WorkerHarness.start({ baseModel: modelDir });
      const acme = h.tenant('acme');
      const { model_id: modelId } = await acme.createModel(32, 3);
      await acme.pass('forward_backward', modelId, crossEntropy(textDatum('streamed in parts')));
      await acme.optimStep(modelId, { learning_rate: 0.01 });
      const save = await acme.saveWeights(modelId, 'big');
      await acme.saveForSampler(modelId, 'big-sampler');
      await acme.loadWeights(modelId, `tinker://${modelId}/weights/big`, true);
      await acme.pass('forward', modelId, crossEntropy(textDatum('after the load')));
      const backend = engine();
      const drain = async () => {
        const outcomes = [];
        for (let dispatched = await h.dispatch(); dispatched; dispatched = await h.dispatch()) {
          outcomes.push(await runWorkItem(dispatched.manifest, { backend, passWindowMs: 50 }));
        }
        return outcomes;
      };
      const outcomes = await drain();
      expect(outcomes.flatMap((o) => o.models).every((m) => m.outcome === 'committed')).toBe(true);
      for (const submission of h.submissions) {
        expect((await h.future(submission.request_id))?.status).toBe('completed');
      }

      const s3 = h.cloud.clients.s3;
      const bucket = h.cloud.names.bucket;
      const object = async (key: string) => {
        const answer = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
        return new Uint8Array(
          await (answer.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray(),
        );
      };
      const row = (await h.modelRow(modelId)) as ModelRow;
      const stateRef = row.state_ref as string;
      expect((await object(stateRef)).length).toBeGreaterThan(LOCAL_S3_BODY_LIMIT);

      const record = (await h.registry<CheckpointNameRecord>(
        registryKey.checkpointName(modelId, 'weights', 'big'),
      )) as CheckpointNameRecord;
      expect(record).toMatchObject({ status: 'committed', content_id: checkpointContentId(save) });
      const blob = await object(record.blob_key as string);
      expect(blob.length).toBe(record.size_bytes);
      expect(blob.length).toBeGreaterThan(LOCAL_S3_BODY_LIMIT);
      const archive = readTar(await object(record.archive_key as string));
      expect(archive.map((entry) => entry.name)).toEqual([
        'adapter_config.json',
        'adapter_model.safetensors',
        'checkpoint_complete',
      ]);
      const exported = new Map(readTar(blob).map((entry) => [entry.name, entry.data]));
      expect([...exported.keys()]).toContain('optimizer.safetensors');
      expect(sha256(archive[1]?.data as Uint8Array)).toBe(
        sha256(exported.get('adapter_model.safetensors') as Uint8Array),
      );

      const session = await acme.samplingSession({
        model_path: `tinker://${modelId}/sampler_weights/big-sampler`,
      });
      const sample = await acme.sample(session, {
        num_samples: 1,
        prompt: { chunks: [{ type: 'encoded_text', tokens: [104, 101] }] },
        sampling_params: { max_tokens: 4, temperature: 1, seed: 7 },
      });
      const samples = await drain();
      expect(samples.flatMap((o) => o.samples).map((s) => s.outcome)).toEqual(['committed']);
      expect((await h.future(sample))?.status).toBe('completed');
      expect(spoolFolders()).toEqual([]);
      h.cloud.clients.dynamo.destroy();
    });
  },
);
