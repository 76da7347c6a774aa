import { GetObjectCommand } from '@aws-sdk/client-s3';
import { GetCommand, ScanCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { passInputFromJson } from '../../shared/backend/pass-input.js';
import { MAX_CONTEXT } from '../../shared/backend/reference/model.js';
import { sha256Hex } from '../../shared/base/ids.js';
import { checkpointContentId, storageKeys } from '../../shared/base/storage-keys.js';
import { TinkerClient } from '../../shared/client/tinker-client.js';
import {
  type CheckpointNameRecord,
  type FutureRow,
  type ModelRow,
  registryKey,
  type SeqCounterRecord,
} from '../../shared/domain/records.js';
import { SDK_TINKER_PATH } from '../../shared/domain/tinker-path.js';
import { revokeApiKey } from '../../shared/repositories/api-keys.js';
import { INLINE_RESULT_MAX_BYTES } from '../../shared/repositories/futures.js';
import { readStoredPayload } from '../../shared/repositories/payloads.js';
import { DEFAULT_BASE_MODEL } from '../../shared/services/api/capabilities.js';
import type { SamplePayload, SaveWeightsForSamplerPayload } from '../../shared/services/api/payloads.js';
import { decodeForwardBackwardRequest } from '../../shared/wire/forward-backward-request.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';
import { completeFuture, failFuture, SUPPORT_RUN } from '../support/futures.js';
import { readPayload } from '../support/payloads.js';

let api: ApiHarness;
let key: string;
let client: TinkerClient;

beforeAll(async () => {
  // The key cache off (API_KEY_CACHE_SECONDS=0): a revoked key is refused at once. The cache's delay
  // is api-keys.test.ts's.
  api = await startApiHarness({ API_KEY_CACHE_SECONDS: '0' });
  ({ key, client } = await api.tenant('acme'));
});

afterAll(async () => {
  await api?.stop();
});

async function get<T>(
  table: 'futures' | 'models' | 'registry',
  key: Record<string, string>,
): Promise<T | undefined> {
  const answer = await api.cloud.clients.doc.send(
    new GetCommand({ TableName: api.cloud.names.tables[table], Key: key, ConsistentRead: true }),
  );
  return answer.Item as T | undefined;
}

/** Marks a reserved checkpoint committed, as the worker's commit would (E4). */
async function commitCheckpoint(pk: string): Promise<void> {
  await api.cloud.clients.doc.send(
    new UpdateCommand({
      TableName: api.cloud.names.tables.registry,
      Key: { pk },
      UpdateExpression: 'SET #status = :committed',
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: { ':committed': 'committed' },
    }),
  );
}

const SDK_VERSION = '0.24.1';
const tokens = [72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100];

/** A datum as the SDK's JSON protocol serializes it (tokens shifted by one for the targets). */
const sdkDatum = {
  loss_fn_inputs: {
    target_tokens: { data: tokens.slice(1), dtype: 'int64' as const, shape: [tokens.length - 1] },
    weights: { data: tokens.slice(1).map(() => 1.0), dtype: 'float32' as const, shape: [tokens.length - 1] },
  },
  model_input: { chunks: [{ tokens: tokens.slice(0, -1), type: 'encoded_text' }] },
};

describe('the SDK call sequence with its exact request bodies', () => {
  let sessionId: string;
  let modelId: string;
  const futures: Record<string, string> = {};

  it('client/config turns the pyqwest transport and parallel chunks off', async () => {
    const answer = await client.raw('POST', '/api/v1/client/config', { sdk_version: SDK_VERSION });
    expect(answer).toEqual({
      status: 200,
      body: expect.objectContaining({ use_pyqwest_transport: false, parallel_fwdbwd_chunks: false }),
    });
    const dynamic = await client.raw('POST', '/api/v1/client/dynamic_config', {});
    expect(dynamic.status).toBe(200);
    expect(dynamic.body).toMatchObject({ sample_cancel_enabled: true, sample_cancel_max_batch_size: 64 });
  });

  it('get_server_capabilities lists the supported models', async () => {
    const answer = await client.raw('GET', '/api/v1/get_server_capabilities');
    expect(answer).toEqual({
      status: 200,
      // With the limits asample is refused past at submit (B2); the SDK reads model_name.
      body: {
        supported_models: [
          {
            model_name: DEFAULT_BASE_MODEL,
            max_context_length: MAX_CONTEXT,
            vocab_size: 256,
            max_num_samples: 256,
          },
        ],
      },
    });
  });

  it('create_session answers a string session_id and stores the session for the tenant', async () => {
    const answer = await client.raw('POST', '/api/v1/create_session', {
      tags: ['rl', 'demo'],
      user_metadata: null,
      sdk_version: SDK_VERSION,
      type: 'create_session',
    });
    expect(answer.status).toBe(200);
    const body = answer.body as { session_id: string; type: string };
    expect(body.type).toBe('create_session');
    expect(typeof body.session_id).toBe('string');
    sessionId = body.session_id;
    const stored = await get<{ tenant: string; tags: string[] }>('registry', {
      pk: registryKey.session(sessionId),
    });
    expect(stored).toMatchObject({ tenant: 'acme', tags: ['rl', 'demo'] });
  });

  it('session_heartbeat and telemetry', async () => {
    const before = await get<{ last_seen: number }>('registry', { pk: registryKey.session(sessionId) });
    await new Promise((resolve) => setTimeout(resolve, 5));
    const beat = await client.raw('POST', '/api/v1/session_heartbeat', {
      session_id: sessionId,
      type: 'session_heartbeat',
    });
    expect(beat).toEqual({ status: 200, body: { type: 'session_heartbeat' } });
    const after = await get<{ last_seen: number }>('registry', { pk: registryKey.session(sessionId) });
    expect(after!.last_seen).toBeGreaterThan(before!.last_seen);
    const telemetry = await client.raw('POST', '/api/v1/telemetry', {
      events: [
        {
          event: 'GENERIC_EVENT',
          event_id: 'e1',
          event_session_index: 0,
          severity: 'INFO',
          timestamp: '2026-01-01T00:00:00Z',
          event_name: 'ServiceClient.__init__',
          event_data: {},
        },
      ],
      platform: 'linux',
      sdk_version: SDK_VERSION,
      session_id: sessionId,
      process_uuid: 'b6b0c8f2-4b61-4a3c-8d3a-1a2b3c4d5e6f',
    });
    expect(telemetry).toEqual({ status: 200, body: { status: 'accepted' } });
  });

  it('create_model answers a future with string ids and writes model row, counter, row and idempotency record', async () => {
    const answer = await client.raw('POST', '/api/v1/create_model', {
      session_id: sessionId,
      model_seq_id: 0,
      base_model: 'reference/byte-lm',
      user_metadata: null,
      lora_config: { rank: 8, seed: null, train_unembed: true, train_mlp: true, train_attn: true },
      type: 'create_model',
    });
    expect(answer.status).toBe(200);
    const future = answer.body as { request_id: string; model_id: string };
    expect(Object.keys(future).sort()).toEqual(['model_id', 'request_id']);
    expect(typeof future.request_id).toBe('string');
    modelId = future.model_id;
    futures.create = future.request_id;
    const model = await get<ModelRow>('models', { model_id: modelId });
    expect(model).toMatchObject({
      tenant: 'acme',
      session_id: sessionId,
      base_model: 'reference/byte-lm',
      status: 'active',
      epoch: 0,
      planned_through: 0,
      applied_through: 0,
      attempts: 0,
      lora_config: { rank: 8, train_unembed: true, train_mlp: true, train_attn: true },
    });
    const counter = await get<SeqCounterRecord>('registry', { pk: registryKey.seqCounter(modelId) });
    expect(counter).toMatchObject({ seq: 1, last_seq_id: 0, tenant: 'acme' });
    const row = await get<FutureRow>('futures', { request_id: future.request_id });
    expect(row).toMatchObject({ status: 'pending', seq: 1, request_type: 'create_model', model_id: modelId });
    expect(row!.live).toMatch(/^default#[0-3]$/);
  });

  it('forward_backward stores its payload in S3 with the digest on the row, at the next seq', async () => {
    const answer = await client.raw('POST', '/api/v1/forward_backward', {
      forward_backward_input: { data: [sdkDatum], loss_fn: 'cross_entropy', loss_fn_config: null },
      model_id: modelId,
      seq_id: 1,
      type: 'forward_backward',
    });
    expect(answer.status).toBe(200);
    const future = answer.body as { request_id: string; model_id: string };
    expect(future.model_id).toBe(modelId);
    futures.fb = future.request_id;
    const row = await get<FutureRow>('futures', { request_id: future.request_id });
    expect(row).toMatchObject({
      status: 'pending',
      seq: 2,
      request_type: 'forward_backward',
      tokens: tokens.length - 1,
      payload_key: storageKeys.payload(future.request_id),
    });
    // Stored in the one binary form both wires share (W4), its digest on the row.
    const stored = await readStoredPayload(api.cloud.clients.s3, api.cloud.names.bucket, row!.payload_key);
    expect(stored.format).toBe('tinker-pb');
    expect(sha256Hex(stored.bytes)).toBe(row!.payload_digest);
    const message = decodeForwardBackwardRequest(stored.bytes);
    expect(message.forward_only).toBe(false);
    expect(message.input).toEqual(
      passInputFromJson({ data: [sdkDatum], loss_fn: 'cross_entropy' }, 'forward_backward_input'),
    );
  });

  it('optim_step is submitted before the forward_backward result is fetched', async () => {
    const answer = await client.raw('POST', '/api/v1/optim_step', {
      adam_params: {
        learning_rate: 0.0001,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-12,
        weight_decay: 0.0,
        grad_clip_norm: 0.0,
      },
      model_id: modelId,
      seq_id: 2,
      type: 'optim_step',
    });
    expect(answer.status).toBe(200);
    futures.optim = (answer.body as { request_id: string }).request_id;
    expect((await get<FutureRow>('futures', { request_id: futures.optim }))!.seq).toBe(3);
  });

  it('retrieve_future holds the poll open, then answers try_again while nothing runs', async () => {
    const started = Date.now();
    const answer = await client.raw('POST', '/api/v1/retrieve_future', {
      request_id: futures.fb,
      allow_metadata_only: true,
    });
    const waited = Date.now() - started;
    expect(answer).toEqual({
      status: 200,
      body: { type: 'try_again', request_id: futures.fb, queue_state: 'active' },
    });
    expect(waited).toBeGreaterThanOrEqual(900);
    expect(waited).toBeLessThan(5_000);
  });

  it('retrieve_future answers a completed row with its stored result, at once', async () => {
    const result = {
      loss_fn_output_type: 'cross_entropy',
      loss_fn_outputs: [{ logprobs: { data: [-1.5, -2], dtype: 'float32' as const, shape: [2] } }],
      metrics: { 'loss:mean': 1.75, 'weights_version:max': 0 },
    };
    await completeFuture(futures.fb!, result, api.cloud.clients);
    const started = Date.now();
    expect(await client.raw('POST', '/api/v1/retrieve_future', { request_id: futures.fb })).toEqual({
      status: 200,
      body: result,
    });
    expect(Date.now() - started).toBeLessThan(900);
    const row = await get<FutureRow>('futures', { request_id: futures.fb! });
    expect(row!.live).toBeUndefined();
  });

  it('retrieve_future answers a failed row with {error, category}', async () => {
    await failFuture(
      futures.optim!,
      { message: 'learning_rate too high', category: 'user' },
      api.cloud.clients,
    );
    expect(await client.raw('POST', '/api/v1/retrieve_future', { request_id: futures.optim })).toEqual({
      status: 200,
      body: { error: 'learning_rate too high', category: 'user' },
    });
    await expect(client.waitFor(futures.optim!)).rejects.toThrow(/learning_rate too high/);
  });

  it('a result too large for the row is read back from S3', async () => {
    const fb = await client.forwardBackward({
      model_id: modelId,
      seq_id: 3,
      forward_backward_input: { data: [sdkDatum], loss_fn: 'cross_entropy' },
    });
    const big = { metrics: { 'loss:mean': 1 }, blob: 'x'.repeat(INLINE_RESULT_MAX_BYTES + 10) };
    await completeFuture(fb.request_id, big, api.cloud.clients);
    const row = await get<FutureRow>('futures', { request_id: fb.request_id });
    expect(row!.result_key).toBe(storageKeys.result(fb.request_id, SUPPORT_RUN));
    expect(row!.result).toBeUndefined();
    expect(await client.waitFor(fb.request_id)).toEqual(big);
  });

  let samplerPath: string;

  it('save_weights_for_sampler (named) reserves the checkpoint name in the same transaction', async () => {
    const answer = await client.raw('POST', '/api/v1/save_weights_for_sampler', {
      model_id: modelId,
      path: 'step-1',
      sampling_session_seq_id: null,
      seq_id: 4,
      type: 'save_weights_for_sampler',
    });
    expect(answer.status).toBe(200);
    futures.save = (answer.body as { request_id: string }).request_id;
    samplerPath = `tinker://${modelId}/sampler_weights/step-1`;
    expect(samplerPath).toMatch(SDK_TINKER_PATH);
    const record = await get<CheckpointNameRecord>('registry', {
      pk: registryKey.checkpointName(modelId, 'sampler', 'step-1'),
    });
    expect(record).toMatchObject({
      status: 'pending',
      path: samplerPath,
      request_id: futures.save,
      content_id: checkpointContentId(futures.save!),
      tenant: 'acme',
    });
  });

  it('create_sampling_session on a checkpoint not saved yet answers 408 (retryable), then works once committed', async () => {
    const body = {
      session_id: sessionId,
      sampling_session_seq_id: 0,
      base_model: null,
      model_path: samplerPath,
      type: 'create_sampling_session',
    };
    const early = await client.raw('POST', '/api/v1/create_sampling_session', body);
    expect(early.status).toBe(408);
    expect(early.body).toMatchObject({ error: expect.stringMatching(/not saved yet/), field: 'model_path' });

    await commitCheckpoint(registryKey.checkpointName(modelId, 'sampler', 'step-1'));
    await completeFuture(
      futures.save!,
      { path: samplerPath, type: 'save_weights_for_sampler' },
      api.cloud.clients,
    );
    expect(await client.waitFor(futures.save!)).toEqual({
      path: samplerPath,
      type: 'save_weights_for_sampler',
    });

    const answer = await client.raw('POST', '/api/v1/create_sampling_session', body);
    expect(answer.status).toBe(200);
    const { sampling_session_id: samplingSessionId } = answer.body as { sampling_session_id: string };
    expect(typeof samplingSessionId).toBe('string');
    // Idempotent on (session, sampling_session_seq_id).
    expect((await client.raw('POST', '/api/v1/create_sampling_session', body)).body).toEqual(answer.body);
    futures.samplingSession = samplingSessionId;
  });

  it('asample: a future outside the training sequence, on the checkpoint, with a stored seed', async () => {
    const answer = await client.raw(
      'POST',
      '/api/v1/asample',
      {
        sampling_session_id: futures.samplingSession,
        seq_id: 0,
        num_samples: 2,
        prompt: { chunks: [{ tokens: [72, 105], type: 'encoded_text' }] },
        sampling_params: { max_tokens: 16, seed: null, stop: null, temperature: 1.0, top_k: -1, top_p: 1.0 },
        prompt_logprobs: false,
        topk_prompt_logprobs: 0,
        type: 'sample',
      },
      // As the SDK's HTTP client sends it: releases up to 0.25.0 get the bare future (W7).
      { 'x-stainless-package-version': '0.25.0' },
    );
    expect(answer.status).toBe(200);
    const future = answer.body as { request_id: string };
    expect(Object.keys(future)).toEqual(['request_id']);
    const row = await get<FutureRow>('futures', { request_id: future.request_id });
    expect(row).toMatchObject({
      request_type: 'sample',
      model_id: modelId,
      checkpoint_id: checkpointContentId(futures.save!),
      tokens: 2 + 2 * 16,
      status: 'pending',
    });
    expect(row!.seq).toBeUndefined();
    const payload = await readPayload<SamplePayload>(
      row!.payload_key,
      row!.payload_digest,
      api.cloud.clients.s3,
    );
    expect(Number.isInteger(payload.sampling_params.seed)).toBe(true);
    expect(payload.checkpoint).toEqual({
      model_id: modelId,
      content_id: checkpointContentId(futures.save!),
      path: samplerPath,
    });
    const poll = await client.raw('POST', '/api/v1/retrieve_future', {
      request_id: future.request_id,
      allow_metadata_only: true,
    });
    expect(poll.body).toEqual({ type: 'try_again', request_id: future.request_id, queue_state: 'active' });
  });

  it('save_weights_for_sampler (unnamed) mints the sampling session and reserves an anonymous checkpoint', async () => {
    const answer = await client.raw('POST', '/api/v1/save_weights_for_sampler', {
      model_id: modelId,
      path: null,
      sampling_session_seq_id: 1,
      seq_id: 5,
      type: 'save_weights_for_sampler',
    });
    expect(answer.status).toBe(200);
    const { request_id: requestId } = answer.body as { request_id: string };
    const row = await get<FutureRow>('futures', { request_id: requestId });
    const payload = await readPayload<SaveWeightsForSamplerPayload>(
      row!.payload_key,
      row!.payload_digest,
      api.cloud.clients.s3,
    );
    const minted = payload.sampling_session!.sampling_session_id;
    expect(payload.sampling_session).toEqual({
      sampling_session_id: minted,
      session_id: sessionId,
      sampling_session_seq_id: 1,
      base_model: 'reference/byte-lm',
    });
    expect(payload.checkpoint).toMatchObject({
      name: minted,
      kind: 'sampler',
      path: `tinker://${modelId}/sampler_weights/${minted}`,
    });
    const record = await get<CheckpointNameRecord>('registry', { pk: payload.checkpoint.pk });
    expect(record).toMatchObject({ status: 'pending', request_id: requestId });
    // The sampling session itself appears when the worker commits the save.
    expect(await get('registry', { pk: registryKey.samplingSession(minted) })).toBeUndefined();
  });

  it('save_weights and load_weights of the tenant checkpoint', async () => {
    const save = await client.raw('POST', '/api/v1/save_weights', {
      model_id: modelId,
      path: 'ckpt-a',
      seq_id: 6,
      type: 'save_weights',
    });
    expect(save.status).toBe(200);
    const load = await client.raw('POST', '/api/v1/load_weights', {
      model_id: modelId,
      path: `tinker://${modelId}/weights/ckpt-a`,
      optimizer: true,
      seq_id: 7,
      type: 'load_weights',
    });
    expect(load.status).toBe(200);
    const row = await get<FutureRow>('futures', {
      request_id: (load.body as { request_id: string }).request_id,
    });
    expect(row).toMatchObject({ request_type: 'load_weights', seq: 8 });
    const missing = await client.raw('POST', '/api/v1/load_weights', {
      model_id: modelId,
      path: `tinker://${modelId}/weights/nope`,
      seq_id: 8,
    });
    expect(missing).toEqual({
      status: 404,
      body: { error: `checkpoint tinker://${modelId}/weights/nope not found`, field: 'path' },
    });
  });

  it('forward on a base-model sampling session and a base sample', async () => {
    const fwd = await client.forward({
      model_id: modelId,
      seq_id: 9,
      forward_input: { data: [sdkDatum], loss_fn: 'cross_entropy' },
    });
    expect((await get<FutureRow>('futures', { request_id: fwd.request_id }))!.request_type).toBe('forward');
    futures.forward = fwd.request_id;
    const { sampling_session_id: base } = await client.createSamplingSession({
      session_id: sessionId,
      sampling_session_seq_id: 2,
      base_model: 'reference/byte-lm',
    });
    const sample = await client.asample({
      sampling_session_id: base,
      seq_id: 0,
      prompt: { chunks: [{ tokens: [1] }] },
      sampling_params: { max_tokens: 4, seed: 7 },
    });
    const row = await get<FutureRow>('futures', { request_id: sample.request_id });
    expect(row!.model_id).toBe('base:reference/byte-lm');
    expect(row!.checkpoint_id).toBeUndefined();
    const payload = await readPayload<SamplePayload>(
      row!.payload_key,
      row!.payload_digest,
      api.cloud.clients.s3,
    );
    expect(payload.sampling_params.seed).toBe(7);
  });

  it('unload_model: once per model; later submits answer 404', async () => {
    const first = await client.raw('POST', '/api/v1/unload_model', {
      model_id: modelId,
      type: 'unload_model',
    });
    expect(first.status).toBe(200);
    const again = await client.raw('POST', '/api/v1/unload_model', {
      model_id: modelId,
      type: 'unload_model',
    });
    expect(again.body).toEqual(first.body);
    const row = await get<FutureRow>('futures', {
      request_id: (first.body as { request_id: string }).request_id,
    });
    expect(row).toMatchObject({ request_type: 'unload_model', seq: 10 });
    const late = await client.raw('POST', '/api/v1/optim_step', {
      model_id: modelId,
      seq_id: 20,
      adam_params: {},
    });
    expect(late).toEqual({ status: 404, body: { error: `model ${modelId} is unloaded`, field: 'model_id' } });
    // A retry of a step accepted before the unload still answers its original future (R7).
    const retry = await client.raw('POST', '/api/v1/forward', {
      model_id: modelId,
      seq_id: 9,
      forward_input: { data: [sdkDatum], loss_fn: 'cross_entropy' },
    });
    expect(retry).toEqual({ status: 200, body: { request_id: futures.forward, model_id: modelId } });
  });

  it('every training row of the model took a contiguous seq', async () => {
    const counter = await get<SeqCounterRecord>('registry', { pk: registryKey.seqCounter(modelId) });
    expect(counter).toMatchObject({ seq: 10, last_seq_id: 9, unloaded: true });
    const rows = await api.cloud.clients.doc.send(
      new ScanCommand({
        TableName: api.cloud.names.tables.futures,
        FilterExpression: 'model_id = :model',
        ExpressionAttributeValues: { ':model': modelId },
      }),
    );
    const seqs = (rows.Items as FutureRow[]).flatMap((row) => (row.seq === undefined ? [] : [row.seq]));
    expect(seqs.sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  });
});

describe('the edge', () => {
  it('GET /healthz needs no key', async () => {
    expect(await api.client().raw('GET', '/healthz')).toEqual({ status: 200, body: { status: 'ok' } });
  });

  it('401 without a key, with a malformed or unknown key, and after revocation', async () => {
    const body = { tags: [], sdk_version: SDK_VERSION };
    expect(await api.client().raw('POST', '/api/v1/create_session', body)).toEqual({
      status: 401,
      body: { error: 'missing X-API-Key header' },
    });
    for (const wrong of ['nope', 'tml-unknownunknownunknownunknown']) {
      expect(await api.client(wrong).raw('POST', '/api/v1/create_session', body)).toEqual({
        status: 401,
        body: { error: 'invalid or revoked API key' },
      });
    }
    const { key: doomed, client: doomedClient } = await api.tenant('short-lived');
    expect((await doomedClient.raw('POST', '/api/v1/create_session', body)).status).toBe(200);
    expect(await revokeApiKey(api.cloud.clients.doc, api.cloud.names.tables.registry, doomed)).toBe(true);
    expect((await doomedClient.raw('POST', '/api/v1/create_session', body)).status).toBe(401);
    expect(
      await revokeApiKey(
        api.cloud.clients.doc,
        api.cloud.names.tables.registry,
        'tml-neverissuedneverissuedneverissued',
      ),
    ).toBe(false);
  });

  it('stores keys only as hashes', async () => {
    const found = await get<{ tenant: string }>('registry', { pk: `key#${key}` });
    expect(found).toBeUndefined();
  });

  it('unknown routes 404, wrong methods 405, protobuf bodies on JSON-only routes 415', async () => {
    expect((await client.raw('POST', '/api/v1/nope', {})).status).toBe(404);
    expect(await client.raw('GET', '/api/v1/create_session')).toEqual({
      status: 405,
      body: { error: 'method GET is not allowed on /api/v1/create_session; use POST' },
    });
    const proto = await client.raw('POST', '/api/v1/create_session', 'binary', {
      'content-type': 'application/x-protobuf',
    });
    expect(proto.status).toBe(415);
  });

  it('retrieve_future of an unknown id is 404', async () => {
    for (const requestId of ['0'.repeat(32), 'not-an-id']) {
      expect(await client.raw('POST', '/api/v1/retrieve_future', { request_id: requestId })).toEqual({
        status: 404,
        body: { error: `future ${requestId} not found`, field: 'request_id' },
      });
    }
  });

  it('a long poll answers as soon as the row completes', async () => {
    const { session_id } = await client.createSession();
    const model = await client.createModel({
      session_id,
      model_seq_id: 1,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 4 },
    });
    const started = Date.now();
    const poll = client.raw('POST', '/api/v1/retrieve_future', { request_id: model.request_id });
    await new Promise((resolve) => setTimeout(resolve, 250));
    const result = { model_id: model.model_id, type: 'create_model' };
    await completeFuture(model.request_id, result, api.cloud.clients);
    expect(await poll).toEqual({ status: 200, body: result });
    expect(Date.now() - started).toBeLessThan(1_000);
  });

  it('payload objects are written with their digest', async () => {
    const { session_id } = await client.createSession();
    const model = await client.createModel({
      session_id,
      model_seq_id: 0,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 4 },
    });
    const row = await get<FutureRow>('futures', { request_id: model.request_id });
    const object = await api.cloud.clients.s3.send(
      new GetObjectCommand({ Bucket: api.cloud.names.bucket, Key: row!.payload_key }),
    );
    expect(object.Metadata?.sha256).toBe(row!.payload_digest);
  });
});

describe('the typed client', () => {
  it('drives a session and a model through the same endpoints', async () => {
    const typed = new TinkerClient({ baseUrl: api.url, apiKey: key });
    expect(await typed.healthz()).toEqual({ status: 'ok' });
    expect(await typed.clientConfig()).toMatchObject({
      use_pyqwest_transport: false,
      parallel_fwdbwd_chunks: false,
    });
    const { session_id } = await typed.createSession({ tags: ['typed'] });
    expect(await typed.heartbeat(session_id)).toEqual({ type: 'session_heartbeat' });
    const model = await typed.createModel({
      session_id,
      model_seq_id: 0,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 2 },
    });
    await completeFuture(
      model.request_id,
      { model_id: model.model_id, type: 'create_model' },
      api.cloud.clients,
    );
    expect(await typed.waitFor(model.request_id)).toEqual({ model_id: model.model_id, type: 'create_model' });
    await expect(
      typed.optimStep({ model_id: 'model-unknown', seq_id: 1, adam_params: {} }),
    ).rejects.toMatchObject({
      status: 404,
    });
  });
});
