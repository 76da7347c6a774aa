import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { registryKey } from '../../shared/domain/records.js';
import { type ApiHarness, type Counts, startApiHarness } from '../support/api-harness.js';

/**
 * Bad inputs over HTTP: each answered with its status and a message naming the field, while the
 * number of items in every table and of objects in the bucket stays exactly the same.
 */
let api: ApiHarness;
let client: TinkerClient;
let apiKey: string;
const ids = { session: '', model: '', samplingSession: '' };

const LIMITS = { MAX_BODY_BYTES: String(64 * 1024), MAX_DATUMS: '8', MAX_TOKENS_PER_REQUEST: '512' };

const datum = (tokens: number[] = [1, 2, 3]) => ({
  model_input: { chunks: [{ type: 'encoded_text', tokens }] },
  loss_fn_inputs: {
    target_tokens: { data: tokens.map((t) => t + 1), dtype: 'int64' as const, shape: [tokens.length] },
    weights: { data: tokens.map(() => 1), dtype: 'float32' as const, shape: [tokens.length] },
  },
});

const fb = (input: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  model_id: ids.model,
  seq_id: 5,
  forward_backward_input: { data: [datum()], loss_fn: 'cross_entropy' as const, ...input },
  type: 'forward_backward',
  ...extra,
});

beforeAll(async () => {
  api = await startApiHarness(LIMITS);
  ({ client, key: apiKey } = await api.tenant('acme'));
  ids.session = (await client.createSession()).session_id;
  ids.model = (
    await client.createModel({
      session_id: ids.session,
      model_seq_id: 0,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 4 },
    })
  ).model_id;
  await client.forwardBackward(fb({}, { seq_id: 1 }));
  await client.saveWeights({ model_id: ids.model, seq_id: 2, path: 'taken' });
  await client.saveWeightsForSampler({ model_id: ids.model, seq_id: 3, path: 'pending-sampler' });
  await client.saveWeightsForSampler({ model_id: ids.model, seq_id: 6, path: 'ready-sampler' });
  await api.cloud.clients.doc.send(
    new UpdateCommand({
      TableName: api.cloud.names.tables.registry,
      Key: { pk: registryKey.checkpointName(ids.model, 'sampler', 'ready-sampler') },
      UpdateExpression: 'SET #status = :committed',
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: { ':committed': 'committed' },
    }),
  );
  ids.samplingSession = (
    await client.createSamplingSession({
      session_id: ids.session,
      sampling_session_seq_id: 0,
      base_model: 'reference/byte-lm',
    })
  ).sampling_session_id;
});

afterAll(async () => {
  await api?.stop();
});

interface BadRequest {
  readonly name: string;
  readonly endpoint: string;
  /** POST unless given (the checkpoint lifecycle routes, C2-C5). */
  readonly method?: string;
  /** A JSON value, or a string sent verbatim. */
  readonly body: () => unknown;
  readonly headers?: Record<string, string>;
  readonly status: number;
  readonly field?: string;
  readonly error: RegExp;
}

const sample = (params: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  sampling_session_id: ids.samplingSession,
  seq_id: 1,
  prompt: { chunks: [{ type: 'encoded_text', tokens: [1, 2] }] },
  sampling_params: { max_tokens: 8, ...params },
  ...extra,
});

/** `{model}` is the tenant's model, filled in when the case is sent (ids are made in beforeAll). */
const checkpointRoute = (kind: string, name: string, suffix = '') =>
  `training_runs/{model}/checkpoints/${kind}/${name}${suffix}`;

/** TTLs (C5) at save and by PUT, and the lifecycle routes' ids: 400s, or 404 for a checkpoint not live. */
const lifecycleCases: BadRequest[] = [
  ...([0, -1, 1.5, '60', true] as const).flatMap((ttl): BadRequest[] => [
    {
      name: `save_weights with ttl_seconds ${JSON.stringify(ttl)}`,
      endpoint: 'save_weights',
      body: () => ({ model_id: ids.model, seq_id: 20, path: 'ttl-bad', ttl_seconds: ttl }),
      status: 400,
      field: 'ttl_seconds',
      error: /ttl_seconds/,
    },
    {
      name: `PUT ttl with ttl_seconds ${JSON.stringify(ttl)}`,
      method: 'PUT',
      endpoint: checkpointRoute('sampler_weights', 'ready-sampler', '/ttl'),
      body: () => ({ ttl_seconds: ttl }),
      status: 400,
      field: 'ttl_seconds',
      error: /ttl_seconds/,
    },
  ]),
  {
    name: 'save_weights_for_sampler with ttl_seconds 0',
    endpoint: 'save_weights_for_sampler',
    body: () => ({ model_id: ids.model, seq_id: 20, path: 'ttl-bad', ttl_seconds: 0 }),
    status: 400,
    field: 'ttl_seconds',
    error: /ttl_seconds/,
  },
  {
    name: 'save_weights with overwrite not a boolean',
    endpoint: 'save_weights',
    body: () => ({ model_id: ids.model, seq_id: 20, path: 'taken', overwrite: 'yes' }),
    status: 400,
    field: 'overwrite',
    error: /overwrite/,
  },
  {
    name: 'PUT ttl without ttl_seconds',
    method: 'PUT',
    endpoint: checkpointRoute('sampler_weights', 'ready-sampler', '/ttl'),
    body: () => ({}),
    status: 400,
    field: 'ttl_seconds',
    error: /ttl_seconds/,
  },
  {
    name: 'a lifecycle route with a kind that is not weights or sampler_weights',
    method: 'PUT',
    endpoint: checkpointRoute('adapters', 'ready-sampler', '/ttl'),
    body: () => ({ ttl_seconds: 60 }),
    status: 400,
    field: 'kind',
    error: /kind/,
  },
  {
    name: 'a lifecycle route with a name that is not a checkpoint name',
    method: 'POST',
    endpoint: checkpointRoute('weights', 'a%20b', '/publish'),
    body: () => undefined,
    status: 400,
    field: 'name',
    error: /name/,
  },
  {
    name: 'delete of a checkpoint still being saved',
    method: 'DELETE',
    endpoint: checkpointRoute('sampler_weights', 'pending-sampler'),
    body: () => undefined,
    status: 404,
    field: 'checkpoint_id',
    error: /not found/,
  },
  {
    name: 'archive of an unknown checkpoint',
    method: 'GET',
    endpoint: checkpointRoute('weights', 'never-saved', '/archive'),
    body: () => undefined,
    status: 404,
    field: 'checkpoint_id',
    error: /not found/,
  },
  {
    name: 'publish of a weights name whose save is pending',
    method: 'POST',
    endpoint: checkpointRoute('weights', 'taken', '/publish'),
    body: () => undefined,
    status: 404,
    field: 'checkpoint_id',
    error: /not found/,
  },
];

const cases: BadRequest[] = [
  ...lifecycleCases,
  {
    name: 'malformed JSON',
    endpoint: 'forward_backward',
    body: () => '{"model_id": ',
    status: 400,
    field: 'body',
    error: /not valid JSON/,
  },
  {
    name: 'body over MAX_BODY_BYTES',
    endpoint: 'forward_backward',
    body: () => fb({ data: [datum(Array.from({ length: 20_000 }, () => 7))] }),
    status: 413,
    field: 'body',
    error: /exceeds the limit of 65536 bytes/,
  },
  {
    name: 'more datums than MAX_DATUMS',
    endpoint: 'forward_backward',
    body: () => fb({ data: Array.from({ length: 9 }, () => datum()) }),
    status: 413,
    field: 'forward_backward_input.data',
    error: /9 datums exceeds the limit of 8/,
  },
  {
    name: 'more tokens than MAX_TOKENS_PER_REQUEST',
    endpoint: 'forward_backward',
    body: () => fb({ data: Array.from({ length: 3 }, () => datum(Array.from({ length: 200 }, () => 1))) }),
    status: 413,
    field: 'forward_backward_input.data',
    error: /600 tokens exceeds the limit of 512/,
  },
  {
    name: 'seq_id as a string',
    endpoint: 'forward_backward',
    body: () => fb({}, { seq_id: '5' }),
    status: 400,
    field: 'seq_id',
    error: /expected number/,
  },
  {
    name: 'negative seq_id',
    endpoint: 'optim_step',
    body: () => ({ model_id: ids.model, seq_id: -3, adam_params: {} }),
    status: 400,
    field: 'seq_id',
    error: />=1/,
  },
  {
    name: 'huge seq_id',
    endpoint: 'optim_step',
    body: () => ({ model_id: ids.model, seq_id: 1e300, adam_params: {} }),
    status: 400,
    field: 'seq_id',
    error: /seq_id/,
  },
  {
    name: 'unicode model id',
    endpoint: 'optim_step',
    body: () => ({ model_id: 'modèle-😀', seq_id: 5, adam_params: {} }),
    status: 400,
    field: 'model_id',
    error: /must be an id/,
  },
  {
    name: 'image chunk',
    endpoint: 'forward_backward',
    body: () =>
      fb({
        data: [{ ...datum(), model_input: { chunks: [{ type: 'image', data: 'AAAA', format: 'png' }] } }],
      }),
    status: 422,
    field: 'forward_backward_input.data.0.model_input.chunks.0.type',
    error: /only encoded_text chunks are supported/,
  },
  {
    name: 'weights length mismatch',
    endpoint: 'forward_backward',
    body: () =>
      fb({
        data: [
          {
            ...datum([1, 2, 3]),
            loss_fn_inputs: {
              target_tokens: { data: [2, 3, 4], dtype: 'int64' as const, shape: [3] },
              weights: { data: [1, 1], dtype: 'float32' as const, shape: [2] },
            },
          },
        ],
      }),
    status: 400,
    field: 'forward_backward_input.data.0.loss_fn_inputs.weights',
    error: /has 2 positions but the datum's model_input has 3 tokens/,
  },
  {
    name: 'unknown loss function',
    endpoint: 'forward',
    body: () => ({ model_id: ids.model, seq_id: 5, forward_input: { data: [datum()], loss_fn: 'hinge' } }),
    status: 400,
    field: 'forward_input.loss_fn',
    error: /expected one of/,
  },
  {
    name: 'unknown model',
    endpoint: 'forward_backward',
    body: () => fb({}, { model_id: 'model-nobody' }),
    status: 404,
    field: 'model_id',
    error: /model model-nobody not found/,
  },
  {
    name: 'seq_id reused with another payload',
    endpoint: 'forward_backward',
    body: () => fb({ data: [datum([9, 9])] }, { seq_id: 1 }),
    status: 400,
    field: 'seq_id',
    error: /was already used with a different payload/,
  },
  {
    name: 'seq_id going backwards',
    endpoint: 'optim_step',
    body: () => ({ model_id: ids.model, seq_id: 4, adam_params: {} }),
    status: 400,
    field: 'seq_id',
    error: /seq_id 4 is out of order: model .* already accepted seq_id 6/,
  },
  {
    name: 'checkpoint name already used',
    endpoint: 'save_weights',
    body: () => ({ model_id: ids.model, seq_id: 9, path: 'taken' }),
    status: 400,
    field: 'path',
    error: /already used .* write-once/,
  },
  {
    name: 'checkpoint name with a path separator',
    endpoint: 'save_weights',
    body: () => ({ model_id: ids.model, seq_id: 9, path: '../etc' }),
    status: 400,
    field: 'path',
    error: /letters, digits/,
  },
  {
    name: 'load_weights of a sampler checkpoint',
    endpoint: 'load_weights',
    body: () => ({
      model_id: ids.model,
      seq_id: 9,
      path: `tinker://${ids.model}/sampler_weights/ready-sampler`,
    }),
    status: 400,
    field: 'path',
    error: /is a sampler checkpoint/,
  },
  {
    name: 'load_weights of a path that is not tinker://',
    endpoint: 'load_weights',
    body: () => ({ model_id: ids.model, seq_id: 9, path: 's3://bucket/key' }),
    status: 400,
    field: 'path',
    error: /must look like tinker:\/\//,
  },
  {
    name: 'create_model for an unknown session',
    endpoint: 'create_model',
    body: () => ({
      session_id: 'sess-nobody',
      model_seq_id: 3,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 2 },
    }),
    status: 404,
    field: 'session_id',
    error: /session sess-nobody not found/,
  },
  {
    name: 'create_model with rank 0',
    endpoint: 'create_model',
    body: () => ({
      session_id: ids.session,
      model_seq_id: 3,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 0 },
    }),
    status: 400,
    field: 'lora_config.rank',
    error: />=1/,
  },
  {
    name: 'create_model with a base model name holding a key separator',
    endpoint: 'create_model',
    body: () => ({ session_id: ids.session, model_seq_id: 3, base_model: 'a#b', lora_config: { rank: 2 } }),
    status: 400,
    field: 'base_model',
    error: /must be a model name/,
  },
  {
    name: 'sampling session from a checkpoint not saved yet',
    endpoint: 'create_sampling_session',
    body: () => ({
      session_id: ids.session,
      sampling_session_seq_id: 5,
      model_path: `tinker://${ids.model}/sampler_weights/pending-sampler`,
    }),
    status: 408,
    field: 'model_path',
    error: /not saved yet; retry/,
  },
  {
    name: 'sampling session from a checkpoint that does not exist',
    endpoint: 'create_sampling_session',
    body: () => ({
      session_id: ids.session,
      sampling_session_seq_id: 5,
      model_path: `tinker://${ids.model}/sampler_weights/nope`,
    }),
    status: 404,
    field: 'model_path',
    error: /not found/,
  },
  {
    name: 'sampling session whose base_model contradicts its checkpoint',
    endpoint: 'create_sampling_session',
    body: () => ({
      session_id: ids.session,
      sampling_session_seq_id: 5,
      model_path: `tinker://${ids.model}/sampler_weights/ready-sampler`,
      base_model: 'other/model',
    }),
    status: 400,
    field: 'base_model',
    error: /was trained from reference\/byte-lm/,
  },
  {
    name: 'sample without max_tokens',
    endpoint: 'asample',
    body: () => ({ ...sample({}), sampling_params: { temperature: 0.5 } }),
    status: 400,
    field: 'sampling_params.max_tokens',
    error: /expected number/,
  },
  {
    name: 'sample with a negative temperature',
    endpoint: 'asample',
    body: () => sample({ temperature: -1 }),
    status: 400,
    field: 'sampling_params.temperature',
    error: />=0/,
  },
  {
    name: 'sample over the token budget',
    endpoint: 'asample',
    body: () => sample({ max_tokens: 300 }, { num_samples: 2 }),
    status: 413,
    field: 'sampling_params.max_tokens',
    error: /over the limit of 512/,
  },
  {
    name: 'sample from an unknown sampling session',
    endpoint: 'asample',
    body: () => sample({}, { sampling_session_id: 'samp-nobody' }),
    status: 404,
    field: 'sampling_session_id',
    error: /sampling session samp-nobody not found/,
  },
  {
    name: 'heartbeat of an unknown session',
    endpoint: 'session_heartbeat',
    body: () => ({ session_id: 'sess-nobody' }),
    status: 404,
    field: 'session_id',
    error: /not found/,
  },
  {
    name: 'telemetry that is not an object',
    endpoint: 'telemetry',
    body: () => [1, 2, 3],
    status: 400,
    field: 'body',
    error: /expected record/,
  },
  {
    name: 'protobuf on a route that takes only JSON',
    endpoint: 'optim_step',
    body: () => '\u0008\u0001',
    headers: { 'content-type': 'application/x-protobuf' },
    status: 415,
    field: 'body',
    error: /send JSON/,
  },
  {
    name: 'no API key',
    endpoint: 'create_session',
    body: () => ({ tags: [] }),
    headers: { 'x-api-key': '' },
    status: 401,
    error: /missing X-API-Key/,
  },
];

describe('bad inputs over HTTP change nothing', () => {
  let start: Counts;

  beforeAll(async () => {
    start = await api.counts();
  });

  it.each(cases)('$name -> $status', async (testCase) => {
    const before = await api.counts();
    const answer = await client.raw(
      testCase.method ?? 'POST',
      `/api/v1/${testCase.endpoint.replace('{model}', ids.model)}`,
      testCase.body(),
      testCase.headers,
    );
    expect(answer.status).toBe(testCase.status);
    const body = answer.body as { error: string; field?: string };
    expect(body.error).toMatch(testCase.error);
    expect(body.field).toBe(testCase.field);
    if (testCase.field !== undefined && testCase.status !== 404) expect(body.error).toContain(testCase.field);
    expect(await api.counts()).toEqual(before);
  });

  it('left every table and the bucket exactly as they were', async () => {
    expect(await api.counts()).toEqual(start);
    // And the model still accepts its next step.
    const next = await client.raw('POST', '/api/v1/optim_step', {
      model_id: ids.model,
      seq_id: 7,
      adam_params: {},
    });
    expect(next.status).toBe(200);
    expect(apiKey.startsWith('tml-')).toBe(true);
  });
});
