import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TinkerClient, TinkerHttpError } from '../../shared/client/tinker-client.js';
import { type CheckpointNameRecord, type FutureRow, registryKey } from '../../shared/domain/records.js';
import { checkpointObjectKeys } from '../../shared/repositories/checkpoints/names.js';
import type { OptimStepPayload } from '../../shared/services/api/payloads.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';
import { readPayload } from '../support/payloads.js';

/**
 * What SDK releases after 0.25.0 send beside sampling, request by request: `optimizer_config` at
 * create_model and `optimizer_params` at optim_step (AdamW served, anything else refused with a 400
 * naming what is supported, never trained as AdamW), and copy_weights (a checkpoint this tenant may
 * read, copied under a new run of its session, with a TTL; another tenant's answers as unknown, C6).
 */

const BASE = 'reference/byte-lm';
let api: ApiHarness;
let client: TinkerClient;
let other: TinkerClient;

beforeAll(async () => {
  api = await startApiHarness();
  api.cloud.applyEnv();
  ({ client } = await api.tenant('acme'));
  ({ client: other } = await api.tenant('zeta'));
});

afterAll(async () => {
  await api?.stop();
});

async function status(call: Promise<unknown>): Promise<{ status: number; body: unknown }> {
  const error = await call.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  if (!(error instanceof TinkerHttpError)) throw new Error(`expected an HTTP error, got ${String(error)}`);
  return { status: error.status, body: error.body };
}

async function registryItem<T>(pk: string): Promise<T | undefined> {
  const answer = await api.cloud.clients.doc.send(
    new GetCommand({ TableName: api.cloud.names.tables.registry, Key: { pk }, ConsistentRead: true }),
  );
  return answer.Item as T | undefined;
}

describe('optimizers', () => {
  it('create_model takes optimizer_config adamw (the default) and refuses dimuon, storing nothing', async () => {
    const { session_id } = await client.createSession({ sdk_version: '0.32.0' });
    const before = await api.counts();
    const refused = await status(
      client.createModel({
        session_id,
        model_seq_id: 0,
        base_model: BASE,
        lora_config: { rank: 4 },
        optimizer_config: { type: 'dimuon', version: 1 },
      }),
    );
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ field: 'optimizer_config.type' });
    expect(String((refused.body as { error: string }).error)).toMatch(/dimuon.*not offered.*adamw/);
    expect(await api.counts()).toEqual(before);
    const created = await client.createModel({
      session_id,
      model_seq_id: 0,
      base_model: BASE,
      lora_config: { rank: 4 },
      optimizer_config: { type: 'adamw' },
    });
    expect(created.model_id).toMatch(/^model-/);
  });

  it('optim_step takes optimizer_params of AdamW as adam_params, and refuses another optimizer’s', async () => {
    const { session_id } = await client.createSession();
    const { model_id } = await client.createModel({
      session_id,
      model_seq_id: 0,
      base_model: BASE,
      lora_config: { rank: 4 },
    });
    const before = await api.counts();
    const dimuon = await status(
      client.optimStep({
        model_id,
        seq_id: 1,
        optimizer_params: { type: 'dimuon', learning_rate: 0.01, grad_clip_norm: 0, beta1: 0.9 },
      }),
    );
    expect(dimuon).toMatchObject({ status: 400, body: { field: 'optimizer_params.type' } });
    const both = await status(
      client.optimStep({
        model_id,
        seq_id: 1,
        adam_params: { learning_rate: 0.01 },
        optimizer_params: { type: 'adamw', learning_rate: 0.01 },
      }),
    );
    expect(both).toMatchObject({ status: 400, body: { field: 'optimizer_params' } });
    const badValue = await status(
      client.optimStep({ model_id, seq_id: 1, optimizer_params: { type: 'adamw', beta1: 2 } }),
    );
    expect(badValue).toMatchObject({ status: 400, body: { field: 'optimizer_params.beta1' } });
    expect(await api.counts()).toEqual(before);

    const step = await client.optimStep({
      model_id,
      seq_id: 1,
      optimizer_params: { type: 'adamw', learning_rate: 0.01, weight_decay: 0.1 },
    });
    const row = (
      await api.cloud.clients.doc.send(
        new GetCommand({ TableName: api.cloud.names.tables.futures, Key: { request_id: step.request_id } }),
      )
    ).Item as FutureRow;
    const payload = await readPayload<OptimStepPayload>(
      row.payload_key,
      row.payload_digest,
      api.cloud.clients.s3,
    );
    expect(payload.adam_params).toEqual({
      learning_rate: 0.01,
      beta1: 0.9,
      beta2: 0.95,
      eps: 1e-12,
      weight_decay: 0.1,
      grad_clip_norm: 0,
    });
  });
});

describe('copy_weights', () => {
  let sourcePath = '';
  let sessionId = '';
  const blob = Buffer.from('checkpoint bytes');

  /** A run of `session` with a committed checkpoint `name`, as the worker's commit would leave it (E4). */
  async function committedCheckpoint(session: string, kind: 'weights' | 'sampler', name: string) {
    const { model_id } = await client.createModel({
      session_id: session,
      model_seq_id: Math.floor(Math.random() * 1e9),
      base_model: BASE,
      lora_config: { rank: 4 },
    });
    if (kind === 'weights') await client.saveWeights({ model_id, seq_id: 1, path: name });
    else await client.saveWeightsForSampler({ model_id, seq_id: 1, path: name });
    // Committed as the worker's commit would leave it, with its blob where the record says (E4).
    const pk = registryKey.checkpointName(model_id, kind, name);
    const record = (await registryItem<CheckpointNameRecord>(pk)) as CheckpointNameRecord;
    await api.cloud.clients.s3.send(
      new PutObjectCommand({
        Bucket: api.cloud.names.bucket,
        Key: checkpointObjectKeys(record)[0] as string,
        Body: blob,
      }),
    );
    await api.cloud.clients.doc.send(
      new UpdateCommand({
        TableName: api.cloud.names.tables.registry,
        Key: { pk },
        UpdateExpression: 'SET #status = :committed, size_bytes = :size',
        ExpressionAttributeNames: { '#status': 'status' },
        ExpressionAttributeValues: { ':committed': 'committed', ':size': blob.length },
      }),
    );
    return record.path;
  }

  beforeAll(async () => {
    ({ session_id: sessionId } = await client.createSession());
    sourcePath = await committedCheckpoint(sessionId, 'weights', 'w1');
  });

  it('copies into a new run of the session with a TTL, its own blob, answered directly; a retry is the same copy', async () => {
    const asked = Date.now();
    const copied = (await client.raw('POST', '/api/v1/copy_weights', {
      session_id: sessionId,
      model_seq_id: 1,
      source_path: sourcePath,
      ttl_seconds: 7200,
    })) as { status: number; body: { tinker_path: string } };
    expect(copied.status).toBe(200);
    const match = /^tinker:\/\/(model-[0-9a-f]+)\/weights\/w1$/.exec(copied.body.tinker_path);
    expect(match).not.toBeNull();
    const newModel = match?.[1] as string;
    expect(copied.body.tinker_path).not.toBe(sourcePath);
    const record = (await registryItem<CheckpointNameRecord>(
      registryKey.checkpointName(newModel, 'weights', 'w1'),
    )) as CheckpointNameRecord;
    expect(record).toMatchObject({ tenant: 'acme', status: 'committed', size_bytes: blob.length });
    expect(record.expires_at).toBeGreaterThanOrEqual(asked + 7200_000);
    expect(await registryItem(registryKey.gcEntry(record.content_id))).toMatchObject({
      due: record.expires_at,
    });
    const object = await api.cloud.clients.s3.send(
      new GetObjectCommand({ Bucket: api.cloud.names.bucket, Key: record.blob_key as string }),
    );
    expect(Buffer.from(await (object.Body?.transformToByteArray() ?? new Uint8Array()))).toEqual(blob);
    // Readable like any checkpoint of the tenant.
    expect(await client.weightsInfo(copied.body.tinker_path)).toMatchObject({ base_model: BASE });

    const before = await api.counts();
    const again = await client.raw('POST', '/api/v1/copy_weights', {
      session_id: sessionId,
      model_seq_id: 1,
      source_path: sourcePath,
      ttl_seconds: 7200,
    });
    expect(again).toEqual(copied);
    expect(await api.counts()).toEqual(before);
  });

  it('another tenant’s checkpoint answers as unknown (C6); a bad path, TTL or token is a 400; nothing stored', async () => {
    const { session_id } = await other.createSession();
    const before = await api.counts();
    const copy = (body: Record<string, unknown>) =>
      other.raw('POST', '/api/v1/copy_weights', { session_id, model_seq_id: 0, ...body });
    expect(await copy({ source_path: sourcePath })).toMatchObject({
      status: 404,
      body: { field: 'source_path' },
    });
    expect(await copy({ source_path: 'tinker://model-nope/weights/w1' })).toMatchObject({
      status: 404,
      body: { field: 'source_path' },
    });
    expect(await copy({ source_path: 'not-a-path' })).toMatchObject({
      status: 400,
      body: { field: 'source_path' },
    });
    expect(await copy({ source_path: 'tinker://r/external_weights/x' })).toMatchObject({
      status: 400,
      body: { field: 'source_path' },
    });
    expect(await copy({ source_path: sourcePath, ttl_seconds: 0 })).toMatchObject({
      status: 400,
      body: { field: 'ttl_seconds' },
    });
    expect(await copy({ source_path: sourcePath, weights_access_token: 'tok' })).toMatchObject({
      status: 400,
      body: { field: 'weights_access_token' },
    });
    expect(
      await other.raw('POST', '/api/v1/copy_weights', {
        session_id: sessionId,
        model_seq_id: 0,
        source_path: sourcePath,
      }),
    ).toMatchObject({ status: 404, body: { field: 'session_id' } });
    expect(await api.counts()).toEqual(before);
  });
  /** The objects under the run `path` names (its checkpoints), for "nothing left behind". */
  async function objectsOfRun(path: string): Promise<string[]> {
    const model = /^tinker:\/\/([^/]+)\//.exec(path)?.[1] as string;
    const listed = await api.cloud.clients.s3.send(
      new ListObjectsV2Command({ Bucket: api.cloud.names.bucket, Prefix: `checkpoints/${model}/` }),
    );
    return (listed.Contents ?? []).map((object) => object.Key as string);
  }

  it('twins of one copy answer one copy, 200 each, with one blob (R7)', async () => {
    const body = { session_id: sessionId, model_seq_id: 20, source_path: sourcePath };
    const answers = await Promise.all(
      Array.from({ length: 6 }, () => client.raw('POST', '/api/v1/copy_weights', body)),
    );
    expect(answers.map((answer) => answer.status)).toEqual([200, 200, 200, 200, 200, 200]);
    const paths = new Set(answers.map((answer) => (answer.body as { tinker_path: string }).tinker_path));
    expect(paths.size).toBe(1);
    const [path] = [...paths] as [string];
    const record = (await registryItem<CheckpointNameRecord>(
      registryKey.checkpointName(/^tinker:\/\/([^/]+)\//.exec(path)?.[1] as string, 'weights', 'w1'),
    )) as CheckpointNameRecord;
    expect(await objectsOfRun(path)).toEqual([record.blob_key]);
  });

  it('a key reused with another source is a 400 naming model_seq_id, storing nothing; the first copy stands', async () => {
    const key = { session_id: sessionId, model_seq_id: 30 };
    const first = (await client.raw('POST', '/api/v1/copy_weights', { ...key, source_path: sourcePath })) as {
      status: number;
      body: { tinker_path: string };
    };
    expect(first.status).toBe(200);
    const otherName = await committedCheckpoint(sessionId, 'weights', 'w2');
    const otherKind = await committedCheckpoint(sessionId, 'sampler', 'w1');
    // Another run's checkpoint of the same kind and name.
    const otherRun = await committedCheckpoint(sessionId, 'weights', 'w1');
    const before = await api.counts();
    for (const source_path of [otherName, otherKind, otherRun]) {
      expect(await client.raw('POST', '/api/v1/copy_weights', { ...key, source_path })).toMatchObject({
        status: 400,
        body: { field: 'model_seq_id' },
      });
    }
    // Another TTL is another body too.
    expect(
      await client.raw('POST', '/api/v1/copy_weights', { ...key, source_path: sourcePath, ttl_seconds: 60 }),
    ).toMatchObject({ status: 400, body: { field: 'model_seq_id' } });
    expect(await api.counts()).toEqual(before);
    expect(await objectsOfRun(first.body.tinker_path)).toHaveLength(1);
    expect(await client.raw('POST', '/api/v1/copy_weights', { ...key, source_path: sourcePath })).toEqual(
      first,
    );
  });

  it('after the session’s finish an exact resend answers the original copy; a new key is a 410 (W9)', async () => {
    const { session_id } = await client.createSession();
    const body = { session_id, model_seq_id: 0, source_path: sourcePath, ttl_seconds: 3600 };
    const copied = await client.raw('POST', '/api/v1/copy_weights', body);
    expect(copied.status).toBe(200);
    await client.finishSession(session_id, { reason: { type: 'success' } });
    const before = await api.counts();
    expect(await client.raw('POST', '/api/v1/copy_weights', body)).toEqual(copied);
    expect(await client.raw('POST', '/api/v1/copy_weights', { ...body, model_seq_id: 1 })).toMatchObject({
      status: 410,
      body: { field: 'session_id' },
    });
    expect(await api.counts()).toEqual(before);
  });
});
