import { GetCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REFERENCE_TOKENIZER_DIR } from '../../shared/backend/reference/byte-tokenizer.js';
import { checkpointContentId } from '../../shared/base/storage-keys.js';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import {
  type CheckpointNameRecord,
  type FutureRow,
  registryKey,
  type SamplingSessionRecord,
} from '../../shared/domain/records.js';
import { SDK_TINKER_PATH } from '../../shared/domain/tinker-path.js';
import { LAMBDA_MAX_BINARY_BODY_BYTES, REFERENCE_ARCH } from '../../shared/services/api/capabilities.js';
import type { LoadWeightsPayload, SamplePayload } from '../../shared/services/api/payloads.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';
import { completeFuture, failFuture } from '../support/futures.js';
import { readPayload } from '../support/payloads.js';

/**
 * W5 and W6 over real HTTP: the SDK's paths, get_info, weights_info, GET samplers/{id}, client/config
 * and create_training_client_from_state[_with_optimizer] as the SDK sequences them. No worker runs:
 * a save "commits" by marking its name record committed, as the worker's commit would.
 */
let api: ApiHarness;
let client: TinkerClient;
let sessionId = '';
let modelId = '';

async function registry<T>(pk: string): Promise<T | undefined> {
  const answer = await api.cloud.clients.doc.send(
    new GetCommand({ TableName: api.cloud.names.tables.registry, Key: { pk }, ConsistentRead: true }),
  );
  return answer.Item as T | undefined;
}

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

async function payloadOf<T>(requestId: string): Promise<T> {
  const row = (
    await api.cloud.clients.doc.send(
      new GetCommand({ TableName: api.cloud.names.tables.futures, Key: { request_id: requestId } }),
    )
  ).Item as FutureRow;
  return readPayload<T>(row.payload_key, row.payload_digest, api.cloud.clients.s3);
}

let seq = 0;
const nextSeq = () => ++seq;

beforeAll(async () => {
  api = await startApiHarness();
  ({ client } = await api.tenant('acme'));
  sessionId = (await client.createSession()).session_id;
  modelId = (
    await client.createModel({
      session_id: sessionId,
      model_seq_id: 0,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 8, train_mlp: false },
    })
  ).model_id;
});

afterAll(async () => {
  await api?.stop();
});

describe('client/config', () => {
  it('answers the chunk limits, zstd on, pyqwest and parallel chunks off', async () => {
    expect(await client.raw('POST', '/api/v1/client/config', { sdk_version: '0.25.0' })).toEqual({
      status: 200,
      body: {
        use_pyqwest_transport: false,
        parallel_fwdbwd_chunks: false,
        proto_compress_fwdbwd: true,
        fwdbwd_max_chunk_len: 1024,
        fwdbwd_max_chunk_bytes_count: 4_521_984,
      },
    });
    // The default MAX_BODY_BYTES (5 MiB) is above what Lambda takes once base64-encoded.
    expect(LAMBDA_MAX_BINARY_BODY_BYTES).toBe(4_521_984);
    expect(Math.ceil((LAMBDA_MAX_BINARY_BODY_BYTES * 4) / 3)).toBeLessThan(6 * 1024 * 1024 - 256 * 1024 + 1);
  });
});

describe('get_info', () => {
  it('answers the model, its LoRA rank, and a tokenizer_id the client can load', async () => {
    expect(await client.raw('POST', '/api/v1/get_info', { model_id: modelId, type: 'get_info' })).toEqual({
      status: 200,
      body: {
        type: 'get_info',
        model_id: modelId,
        model_name: 'reference/byte-lm',
        is_lora: true,
        lora_rank: 8,
        model_data: {
          model_name: 'reference/byte-lm',
          arch: REFERENCE_ARCH,
          tokenizer_id: REFERENCE_TOKENIZER_DIR,
          // Its limits (B2), which the SDK's ModelData ignores.
          max_context_length: 4096,
          vocab_size: 256,
          max_num_samples: 256,
        },
      },
    });
  });
});

describe('weights_info, samplers/{id} and the paths the server issues', () => {
  const names = { weights: 'w-1', sampler: 's-1' };
  const paths = { weights: '', sampler: '', unnamed: '' };
  const requests = { weights: '', sampler: '', unnamed: '' };
  let unnamedSession = '';

  it('saves answer and record the SDK forms of tinker:// paths', async () => {
    requests.weights = (
      await client.saveWeights({ model_id: modelId, seq_id: nextSeq(), path: names.weights })
    ).request_id;
    requests.sampler = (
      await client.saveWeightsForSampler({ model_id: modelId, seq_id: nextSeq(), path: names.sampler })
    ).request_id;
    const unnamedSeq = nextSeq();
    requests.unnamed = (
      await client.saveWeightsForSampler({
        model_id: modelId,
        seq_id: unnamedSeq,
        sampling_session_seq_id: 0,
      })
    ).request_id;
    const unnamed = await payloadOf<{ sampling_session: { sampling_session_id: string } }>(requests.unnamed);
    unnamedSession = unnamed.sampling_session.sampling_session_id;
    paths.weights = `tinker://${modelId}/weights/${names.weights}`;
    paths.sampler = `tinker://${modelId}/sampler_weights/${names.sampler}`;
    paths.unnamed = `tinker://${modelId}/sampler_weights/${unnamedSession}`;
    const records = {
      weights: registryKey.checkpointName(modelId, 'weights', names.weights),
      sampler: registryKey.checkpointName(modelId, 'sampler', names.sampler),
      unnamed: registryKey.checkpointName(modelId, 'sampler', unnamedSession),
    };
    for (const kind of ['weights', 'sampler', 'unnamed'] as const) {
      const record = await registry<CheckpointNameRecord>(records[kind]);
      expect(record?.path).toBe(paths[kind]);
      expect(record?.path).toMatch(SDK_TINKER_PATH);
    }
  });

  it('weights_info of a checkpoint not saved yet answers 408 (the SDK retries it)', async () => {
    expect(await client.raw('POST', '/api/v1/weights_info', { tinker_path: paths.weights })).toEqual({
      status: 408,
      body: {
        error: `tinker_path: checkpoint ${paths.weights} is not saved yet; retry shortly`,
        field: 'tinker_path',
      },
    });
  });

  it('weights_info of a committed checkpoint of either kind answers its model LoRA config', async () => {
    for (const kind of ['weights', 'sampler', 'unnamed'] as const) {
      const parsed = /^tinker:\/\/[^/]+\/(weights|sampler_weights)\/(.+)$/.exec(paths[kind])!;
      await commitCheckpoint(
        registryKey.checkpointName(modelId, parsed[1] === 'weights' ? 'weights' : 'sampler', parsed[2]!),
      );
    }
    const expected = {
      base_model: 'reference/byte-lm',
      is_lora: true,
      lora_rank: 8,
      train_unembed: true,
      train_mlp: false,
      train_attn: true,
    };
    for (const path of Object.values(paths)) {
      expect(await client.raw('POST', '/api/v1/weights_info', { tinker_path: path }), path).toEqual({
        status: 200,
        body: expected,
      });
    }
  });

  it('weights_info of a checkpoint whose save failed answers exactly as an unknown one', async () => {
    const name = 'doomed';
    const save = await client.saveWeights({ model_id: modelId, seq_id: nextSeq(), path: name });
    await failFuture(save.request_id, { message: 'boom', category: 'server' }, api.cloud.clients);
    const doomed = await client.raw('POST', '/api/v1/weights_info', {
      tinker_path: `tinker://${modelId}/weights/${name}`,
    });
    const unknown = await client.raw('POST', '/api/v1/weights_info', {
      tinker_path: `tinker://${modelId}/weights/never`,
    });
    expect(doomed).toEqual({
      status: 404,
      body: { error: `checkpoint tinker://${modelId}/weights/${name} not found`, field: 'tinker_path' },
    });
    expect(JSON.stringify(unknown.body).replace('never', name)).toBe(JSON.stringify(doomed.body));
  });

  it('GET samplers/{id}: a checkpoint session answers its SDK path, a base session none', async () => {
    const { sampling_session_id: named } = await client.createSamplingSession({
      session_id: sessionId,
      sampling_session_seq_id: 0,
      model_path: paths.sampler,
    });
    expect(await client.raw('GET', `/api/v1/samplers/${named}`)).toEqual({
      status: 200,
      body: { sampler_id: named, base_model: 'reference/byte-lm', model_path: paths.sampler },
    });
    const { sampling_session_id: base } = await client.createSamplingSession({
      session_id: sessionId,
      sampling_session_seq_id: 1,
      base_model: 'reference/byte-lm',
    });
    expect(await client.getSampler(base)).toEqual({ sampler_id: base, base_model: 'reference/byte-lm' });
    // The unnamed save's session appears when the worker commits; stand in for it with its record.
    const record: SamplingSessionRecord = {
      pk: registryKey.samplingSession(unnamedSession),
      sampling_session_id: unnamedSession,
      tenant: 'acme',
      session_id: sessionId,
      model_id: modelId,
      base_model: 'reference/byte-lm',
      checkpoint_id: checkpointContentId(requests.unnamed),
      model_path: paths.unnamed,
      created_at: Date.now(),
    };
    await api.cloud.clients.doc.send(
      new PutCommand({ TableName: api.cloud.names.tables.registry, Item: record }),
    );
    expect(await client.getSampler(unnamedSession)).toEqual({
      sampler_id: unnamedSession,
      base_model: 'reference/byte-lm',
      model_path: paths.unnamed,
    });
  });

  it('create_training_client_from_state[_with_optimizer] as the SDK sends it: weights_info, create_model, load_weights', async () => {
    for (const [modelSeqId, optimizer] of [
      [1, false],
      [2, true],
    ] as const) {
      const info = await client.weightsInfo(paths.weights);
      const created = await client.raw('POST', '/api/v1/create_model', {
        session_id: sessionId,
        model_seq_id: modelSeqId,
        base_model: info.base_model,
        user_metadata: null,
        lora_config: {
          rank: info.lora_rank,
          seed: null,
          train_unembed: info.train_unembed,
          train_mlp: info.train_mlp,
          train_attn: info.train_attn,
        },
        type: 'create_model',
      });
      expect(created.status).toBe(200);
      const restored = (created.body as { model_id: string }).model_id;
      const load = await client.raw('POST', '/api/v1/load_weights', {
        model_id: restored,
        path: paths.weights,
        seq_id: 1,
        optimizer,
        weights_access_token: null,
        type: 'load_weights',
      });
      expect(load.status).toBe(200);
      const payload = await payloadOf<LoadWeightsPayload>((load.body as { request_id: string }).request_id);
      expect(payload).toMatchObject({
        optimizer,
        checkpoint: { model_id: modelId, kind: 'weights', name: names.weights, path: paths.weights },
      });
      expect(payload.checkpoint.content_id).toBe(checkpointContentId(requests.weights));
      // The new model reports the checkpoint's config back.
      expect(await client.getInfo(restored)).toMatchObject({ model_id: restored, lora_rank: 8 });
    }
  });
});

describe('legacy sampler paths (tinker://<model_id>/<name>, issued before W5)', () => {
  const name = 'old-sampler';
  const legacyPath = () => `tinker://${modelId}/${name}`;
  const currentPath = () => `tinker://${modelId}/sampler_weights/${name}`;
  let contentId = '';

  beforeAll(async () => {
    // A committed record as the server stored it before W5: its `path` is the legacy form.
    const save = await client.saveWeightsForSampler({ model_id: modelId, seq_id: nextSeq(), path: name });
    contentId = checkpointContentId(save.request_id);
    const pk = registryKey.checkpointName(modelId, 'sampler', name);
    await api.cloud.clients.doc.send(
      new UpdateCommand({
        TableName: api.cloud.names.tables.registry,
        Key: { pk },
        UpdateExpression: 'SET #status = :committed, #path = :legacy',
        ExpressionAttributeNames: { '#status': 'status', '#path': 'path' },
        ExpressionAttributeValues: { ':committed': 'committed', ':legacy': legacyPath() },
      }),
    );
    await completeFuture(
      save.request_id,
      { path: legacyPath(), type: 'save_weights_for_sampler' },
      api.cloud.clients,
    );
  });

  it('still samples: a sampling session from the legacy path runs on the stored checkpoint', async () => {
    const { sampling_session_id: samplingSession } = await client.createSamplingSession({
      session_id: sessionId,
      sampling_session_seq_id: 10,
      model_path: legacyPath(),
    });
    // Answered in the SDK's form, which ParsedCheckpointTinkerPath accepts.
    expect(await client.getSampler(samplingSession)).toEqual({
      sampler_id: samplingSession,
      base_model: 'reference/byte-lm',
      model_path: currentPath(),
    });
    const sample = await client.asample({
      sampling_session_id: samplingSession,
      seq_id: 0,
      prompt: { chunks: [{ tokens: [104, 105] }] },
      sampling_params: { max_tokens: 4, seed: 1 },
    });
    const payload = await payloadOf<SamplePayload>(sample.request_id);
    expect(payload.checkpoint).toEqual({ model_id: modelId, content_id: contentId, path: currentPath() });
  });

  it('the legacy and the current form name the same checkpoint', async () => {
    const fromCurrent = await client.createSamplingSession({
      session_id: sessionId,
      sampling_session_seq_id: 11,
      model_path: currentPath(),
    });
    const record = await registry<SamplingSessionRecord>(
      registryKey.samplingSession(fromCurrent.sampling_session_id),
    );
    expect(record?.checkpoint_id).toBe(contentId);
    for (const path of [legacyPath(), currentPath()]) {
      expect((await client.weightsInfo(path)).lora_rank).toBe(8);
    }
  });

  it('a sampling session record stored with a legacy model_path answers the SDK form', async () => {
    const id = 'samp-legacyrecord';
    const record: SamplingSessionRecord = {
      pk: registryKey.samplingSession(id),
      sampling_session_id: id,
      tenant: 'acme',
      session_id: sessionId,
      model_id: modelId,
      base_model: 'reference/byte-lm',
      checkpoint_id: contentId,
      model_path: legacyPath(),
      created_at: Date.now(),
    };
    await api.cloud.clients.doc.send(
      new PutCommand({ TableName: api.cloud.names.tables.registry, Item: record }),
    );
    expect((await client.getSampler(id)).model_path).toBe(currentPath());
    const sample = await client.asample({
      sampling_session_id: id,
      seq_id: 0,
      prompt: { chunks: [{ tokens: [1] }] },
      sampling_params: { max_tokens: 2, seed: 2 },
    });
    expect((await payloadOf<SamplePayload>(sample.request_id)).checkpoint?.content_id).toBe(contentId);
  });
});
