import { GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
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

  beforeAll(async () => {
    ({ session_id: sessionId } = await client.createSession());
    const { model_id } = await client.createModel({
      session_id: sessionId,
      model_seq_id: 0,
      base_model: BASE,
      lora_config: { rank: 4 },
    });
    await client.saveWeights({ model_id, seq_id: 1, path: 'w1' });
    // Committed as the worker's commit would leave it, with its blob where the record says (E4).
    const pk = registryKey.checkpointName(model_id, 'weights', 'w1');
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
    sourcePath = record.path;
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
});
