import { request } from 'node:http';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { compress, init as initZstd } from '@bokuweb/zstd-wasm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { createOperatorKey } from '../../shared/repositories/api-keys.js';
import { DType } from '../../shared/wire/gen/tinker_public_pb.js';
import { CHUNKS_PER_DATUM } from '../../shared/wire/request-parts.js';
import { type ApiHarness, type Counts, startApiHarness } from '../support/api-harness.js';
import { fixtureBytes } from '../support/wire/fixtures.js';
import {
  emptyJsonDatums,
  emptyProtobufChunks,
  emptyProtobufDatums,
  emptyZstdFrames,
  jsonDatumWithTargetShape,
  shapeOfRank,
} from '../support/wire/hostile-bodies.js';
import {
  float32Bytes,
  float32Tensor,
  int64Bytes,
  int64Tensor,
  pbDatum,
  pbForwardBackward,
  type RequestInit,
  type TensorInit,
  textChunk,
} from '../support/wire/requests.js';

/**
 * Bad input over real HTTP, beyond `api-bad-input.test.ts`: JSON that is not JSON, wrong types,
 * numbers JSON or DynamoDB cannot hold, unicode and control characters in ids, deep nesting, bodies
 * over the limit (counted in bytes), replayed seq_ids with other payloads on every endpoint that
 * takes one, missing or wrong headers and content types, unknown paths and methods. Each answer is a
 * 4xx with a message, never a 5xx, and no table item or bucket object is added or removed. The
 * same for the protobuf wire of forward_backward (W1, W3): broken messages, tensors and chunks, ids,
 * limits counted in decompressed bytes, zstd bombs and broken frames, other encodings and routes.
 */

const MAX_BODY_BYTES = 32 * 1024;
/** Low enough that a body under MAX_BODY_BYTES can pass them (the protobuf rows). */
const MAX_DATUMS = 64;
const MAX_TOKENS_PER_REQUEST = 1024;
let api: ApiHarness;
let owner: TinkerClient;
let ownerKey = '';
let rivalKey = '';
let operatorKey = '';
const ids = { session: '', model: '', samplingSession: '', sampled: '' };

const datum = (tokens: number[] = [1, 2, 3]) => ({
  model_input: { chunks: [{ type: 'encoded_text', tokens }] },
  loss_fn_inputs: {
    target_tokens: { data: tokens.map((t) => t + 1), dtype: 'int64' as const, shape: [tokens.length] },
  },
});
const fb = (extra: Record<string, unknown> = {}, input: Record<string, unknown> = {}) => ({
  model_id: ids.model,
  seq_id: 10,
  forward_backward_input: { data: [datum()], loss_fn: 'cross_entropy' as const, ...input },
  ...extra,
});
const sample = (extra: Record<string, unknown> = {}, params: Record<string, unknown> = {}) => ({
  sampling_session_id: ids.samplingSession,
  seq_id: 10,
  prompt: { chunks: [{ tokens: [1, 2] }] },
  sampling_params: { max_tokens: 4, ...params },
  ...extra,
});
const createModel = (extra: Record<string, unknown> = {}) => ({
  session_id: ids.session,
  model_seq_id: 10,
  base_model: 'reference/byte-lm',
  lora_config: { rank: 4 },
  ...extra,
});
const nested = (depth: number, leaf = '1') => `${'['.repeat(depth)}${leaf}${']'.repeat(depth)}`;

beforeAll(async () => {
  api = await startApiHarness({
    MAX_BODY_BYTES: String(MAX_BODY_BYTES),
    MAX_DATUMS: String(MAX_DATUMS),
    MAX_TOKENS_PER_REQUEST: String(MAX_TOKENS_PER_REQUEST),
    // Two served models, so a replay may name the other one (G6).
    BASE_MODELS: JSON.stringify([{ name: 'reference/byte-lm' }, { name: 'other/model' }]),
  });
  await initZstd();
  ({ client: owner, key: ownerKey } = await api.tenant('acme'));
  ({ key: rivalKey } = await api.tenant('rival'));
  operatorKey = await createOperatorKey(
    api.cloud.clients.doc,
    api.cloud.names.tables.registry,
    'ops@example.com',
  );
  ids.session = (await owner.createSession()).session_id;
  ids.model = (
    await owner.createModel({
      session_id: ids.session,
      model_seq_id: 0,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 4 },
    })
  ).model_id;
  // One accepted request per endpoint that has an idempotency key, to replay with another payload.
  await owner.forwardBackward(fb({ seq_id: 1 }));
  await owner.saveWeights({ model_id: ids.model, seq_id: 2, path: 'taken' });
  await owner.optimStep({ model_id: ids.model, seq_id: 3, adam_params: { learning_rate: 0.001 } });
  await owner.raw('POST', '/api/v1/load_weights', {
    model_id: ids.model,
    seq_id: 4,
    path: `tinker://${ids.model}/weights/taken`,
  });
  await owner.saveWeightsForSampler({ model_id: ids.model, seq_id: 5, sampling_session_seq_id: 1 });
  ids.samplingSession = (
    await owner.createSamplingSession({
      session_id: ids.session,
      sampling_session_seq_id: 0,
      base_model: 'reference/byte-lm',
    })
  ).sampling_session_id;
  const sampled = await owner.raw('POST', '/api/v1/asample', sample({ seq_id: 0 }));
  // The id of its one sequence (a 2-token prompt, max_tokens 4): what the span rows below name.
  ids.sampled = (sampled.body as { sample_sequence_ids: string[] }).sample_sequence_ids[0] as string;
});

afterAll(async () => {
  await api?.stop();
});

interface Answer {
  readonly status: number;
  readonly body: unknown;
}

/**
 * One request exactly as given: no URL normalisation, any method, raw bytes, headers added or removed
 * (`null` removes one of the defaults: the owner's key and a JSON content type).
 */
function send(
  method: string,
  path: string,
  body: string | Buffer | undefined,
  headers: Record<string, string | string[] | null> = {},
): Promise<Answer> {
  const url = new URL(api.url);
  const merged: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries({
    'x-api-key': ownerKey,
    'content-type': 'application/json',
    ...headers,
  })) {
    if (value !== null) merged[name] = value;
  }
  if (body !== undefined) merged['content-length'] = String(Buffer.byteLength(body));
  return new Promise((resolve, reject) => {
    const outgoing = request(
      { host: url.hostname, port: url.port, method, path, headers: merged },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown = text;
          try {
            parsed = text === '' ? undefined : JSON.parse(text);
          } catch {
            // Not JSON: keep the text, the assertions will say so.
          }
          resolve({ status: response.statusCode ?? 0, body: parsed });
        });
      },
    );
    outgoing.on('error', reject);
    outgoing.end(body);
  });
}

interface BadRequest {
  readonly name: string;
  /** An endpoint under /api/v1/, or a path starting with `/` sent verbatim. */
  readonly path: string;
  readonly method?: string;
  /** A string or Buffer is sent as is, anything else as JSON. */
  readonly body?: () => unknown;
  readonly headers?: Record<string, string | string[] | null>;
  readonly status: number;
  readonly error: RegExp;
  readonly field?: string;
}

const syntax: BadRequest[] = [
  {
    name: 'trailing garbage',
    path: 'create_session',
    body: () => '{"tags": []} x',
    status: 400,
    error: /not valid JSON/,
  },
  {
    name: 'NaN literal',
    path: 'optim_step',
    body: () => `{"model_id":"m","seq_id":NaN}`,
    status: 400,
    error: /not valid JSON/,
  },
  {
    name: 'Infinity literal',
    path: 'optim_step',
    body: () => `{"seq_id":Infinity}`,
    status: 400,
    error: /not valid JSON/,
  },
  {
    name: 'single quotes',
    path: 'create_session',
    body: () => "{'tags': []}",
    status: 400,
    error: /not valid JSON/,
  },
  {
    name: 'byte order mark',
    path: 'create_session',
    body: () => '\ufeff{}',
    status: 400,
    error: /not valid JSON/,
  },
  {
    name: 'broken unicode escape',
    path: 'create_session',
    body: () => '{"tags":["\\u12"]}',
    status: 400,
    error: /not valid JSON/,
  },
  {
    name: 'gzip bytes',
    path: 'create_session',
    body: () => Buffer.from([0x1f, 0x8b, 8, 0, 0, 0]),
    headers: { 'content-encoding': 'gzip' },
    status: 415,
    error: /content-encoding gzip is not supported/,
  },
  {
    name: 'a JSON null',
    path: 'create_session',
    body: () => 'null',
    status: 400,
    field: 'body',
    error: /expected object/,
  },
  {
    name: 'a JSON number',
    path: 'forward_backward',
    body: () => '42',
    status: 400,
    field: 'body',
    error: /expected object/,
  },
  {
    name: 'a JSON string',
    path: 'create_model',
    body: () => '"create"',
    status: 400,
    field: 'body',
    error: /expected object/,
  },
  {
    name: 'a JSON array',
    path: 'retrieve_future',
    body: () => '[]',
    status: 400,
    field: 'body',
    error: /expected object/,
  },
  {
    name: 'an empty body where fields are required',
    path: 'forward_backward',
    body: () => '',
    status: 400,
    field: 'model_id',
    error: /model_id/,
  },
  {
    name: 'duplicate keys, the last one wrong',
    path: 'optim_step',
    body: () => `{"model_id":"x","seq_id":9,"seq_id":"9","adam_params":{}}`,
    status: 400,
    field: 'seq_id',
    error: /expected number/,
  },
];

const types: BadRequest[] = [
  {
    name: 'model_id as a number',
    path: 'optim_step',
    body: () => ({ model_id: 7, seq_id: 10, adam_params: {} }),
    status: 400,
    field: 'model_id',
    error: /expected string/,
  },
  {
    name: 'seq_id as a boolean',
    path: 'forward_backward',
    body: () => fb({ seq_id: true }),
    status: 400,
    field: 'seq_id',
    error: /expected number/,
  },
  {
    name: 'seq_id null',
    path: 'optim_step',
    body: () => ({ model_id: ids.model, seq_id: null, adam_params: {} }),
    status: 400,
    field: 'seq_id',
    error: /expected number/,
  },
  {
    name: 'input as an array',
    path: 'forward_backward',
    body: () => fb({ forward_backward_input: [] }),
    status: 400,
    field: 'forward_backward_input',
    error: /expected object/,
  },
  {
    name: 'data as an object',
    path: 'forward',
    body: () => ({ model_id: ids.model, seq_id: 10, forward_input: { data: {}, loss_fn: 'cross_entropy' } }),
    status: 400,
    field: 'forward_input.data',
    error: /expected array/,
  },
  {
    name: 'chunks as a string',
    path: 'forward_backward',
    body: () => fb({}, { data: [{ ...datum(), model_input: { chunks: 'abc' } }] }),
    status: 400,
    field: 'forward_backward_input.data.0.model_input.chunks',
    error: /expected array/,
  },
  {
    name: 'token ids as strings',
    path: 'forward_backward',
    body: () => fb({}, { data: [datum(['1', '2'] as never)] }),
    status: 400,
    error: /token id/,
  },
  {
    name: 'fractional token ids',
    path: 'asample',
    body: () => sample({ prompt: { chunks: [{ tokens: [1.5] }] } }),
    status: 400,
    field: 'prompt.chunks.0.tokens.0',
    error: /token id/,
  },
  {
    name: 'unknown dtype',
    path: 'forward_backward',
    body: () =>
      fb({}, { data: [{ ...datum([1]), loss_fn_inputs: { target_tokens: { data: [2], dtype: 'int32' } } }] }),
    status: 400,
    error: /dtype/,
  },
  {
    name: 'loss_fn_inputs as an array',
    path: 'forward_backward',
    body: () => fb({}, { data: [{ ...datum(), loss_fn_inputs: [] }] }),
    status: 400,
    error: /expected record/,
  },
  {
    name: 'adam_params as a string',
    path: 'optim_step',
    body: () => ({ model_id: ids.model, seq_id: 10, adam_params: 'fast' }),
    status: 400,
    field: 'adam_params',
    error: /expected object/,
  },
  {
    name: 'rank as a string',
    path: 'create_model',
    body: () => createModel({ lora_config: { rank: '4' } }),
    status: 400,
    field: 'lora_config.rank',
    error: /expected number/,
  },
  {
    name: 'lora_config null',
    path: 'create_model',
    body: () => createModel({ lora_config: null }),
    status: 400,
    field: 'lora_config',
    error: /expected object/,
  },
  {
    name: 'max_tokens as a string',
    path: 'asample',
    body: () => sample({}, { max_tokens: '4' }),
    status: 400,
    field: 'sampling_params.max_tokens',
    error: /expected number/,
  },
  {
    name: 'prompt_logprobs as a string',
    path: 'asample',
    body: () => sample({ prompt_logprobs: 'yes' }),
    status: 400,
    field: 'prompt_logprobs',
    error: /expected boolean/,
  },
  {
    name: 'tags as a string',
    path: 'create_session',
    body: () => ({ tags: 'a,b' }),
    status: 400,
    field: 'tags',
    error: /expected array/,
  },
  {
    name: 'tags of numbers',
    path: 'create_session',
    body: () => ({ tags: [1, 2] }),
    status: 400,
    field: 'tags.0',
    error: /expected string/,
  },
  {
    name: 'request_id as a number',
    path: 'retrieve_future',
    body: () => ({ request_id: 5 }),
    status: 400,
    field: 'request_id',
    error: /expected string/,
  },
  {
    name: 'optimizer as a string',
    path: 'load_weights',
    body: () => ({
      model_id: ids.model,
      seq_id: 10,
      path: `tinker://${ids.model}/weights/taken`,
      optimizer: 'true',
    }),
    status: 400,
    field: 'optimizer',
    error: /expected boolean/,
  },
];

/** A datum carrying the policy-gradient inputs, `inputs` replacing or adding some. */
const rlDatum = (inputs: Record<string, unknown> = {}) => {
  const base = datum();
  return {
    ...base,
    loss_fn_inputs: {
      ...base.loss_fn_inputs,
      logprobs: { data: [-1, -2, -3], dtype: 'float32', shape: [3] },
      advantages: { data: [1, -1, 0.5], dtype: 'float32', shape: [3] },
      ...inputs,
    },
  };
};
const rl = (lossFn: string, config: Record<string, unknown> | null, inputs: Record<string, unknown> = {}) =>
  fb({}, { data: [rlDatum(inputs)], loss_fn: lossFn, loss_fn_config: config });
const rlField = 'forward_backward_input.data.0.loss_fn_inputs';

/** loss_fn_config keys and the policy-gradient inputs (L1): refused before anything is stored. */
const losses: BadRequest[] = [
  {
    name: 'ppo with an unknown config key',
    path: 'forward_backward',
    body: () => rl('ppo', { epsilon: 0.2 }),
    status: 400,
    field: 'forward_backward_input.loss_fn_config.epsilon',
    error: /not a config key of loss_fn ppo/,
  },
  {
    name: 'cross_entropy with a config key',
    path: 'forward_backward',
    body: () => rl('cross_entropy', { beta: 0.1 }),
    status: 400,
    field: 'forward_backward_input.loss_fn_config.beta',
    error: /takes no config keys/,
  },
  {
    name: 'forward with importance_sampling and a config key',
    path: 'forward',
    body: () => ({
      model_id: ids.model,
      seq_id: 10,
      forward_input: {
        data: [rlDatum()],
        loss_fn: 'importance_sampling',
        loss_fn_config: { clip_low_threshold: 0.8 },
      },
    }),
    status: 400,
    field: 'forward_input.loss_fn_config.clip_low_threshold',
    error: /takes no config keys/,
  },
  {
    name: 'cispo clip_high_threshold below 1',
    path: 'forward_backward',
    body: () => rl('cispo', { clip_high_threshold: 0.2 }),
    status: 400,
    field: 'forward_backward_input.loss_fn_config.clip_high_threshold',
    error: /ratio bound >= 1/,
  },
  {
    name: 'ppo clip_low_threshold negative',
    path: 'forward_backward',
    body: () => rl('ppo', { clip_low_threshold: -0.1 }),
    status: 400,
    field: 'forward_backward_input.loss_fn_config.clip_low_threshold',
    error: /ratio bound in \[0, 1\]/,
  },
  {
    name: 'dro beta as a string',
    path: 'forward_backward',
    body: () => rl('dro', { beta: 'small' }),
    status: 400,
    field: 'forward_backward_input.loss_fn_config.beta',
    error: /finite number/,
  },
  {
    name: 'dro beta negative',
    path: 'forward_backward',
    body: () => rl('dro', { beta: -1 }),
    status: 400,
    field: 'forward_backward_input.loss_fn_config.beta',
    error: />= 0/,
  },
  {
    name: 'importance_sampling without logprobs',
    path: 'forward_backward',
    body: () => fb({}, { data: [datum()], loss_fn: 'importance_sampling' }),
    status: 400,
    field: `${rlField}.logprobs`,
    error: /required by loss_fn importance_sampling/,
  },
  {
    name: 'ppo advantages as int64',
    path: 'forward_backward',
    body: () => rl('ppo', null, { advantages: { data: [1, 0, 1], dtype: 'int64', shape: [3] } }),
    status: 400,
    field: `${rlField}.advantages.dtype`,
    error: /must be float32/,
  },
  {
    name: 'cispo logprobs of shape [3, 1] for target_tokens [3]',
    path: 'forward_backward',
    body: () => rl('cispo', null, { logprobs: { data: [-1, -2, -3], dtype: 'float32', shape: [3, 1] } }),
    status: 400,
    field: `${rlField}.logprobs`,
    error: /must match target_tokens' \[3\]/,
  },
  {
    name: 'dro advantages shorter than the input',
    path: 'forward_backward',
    body: () => rl('dro', null, { advantages: { data: [1, 2], dtype: 'float32', shape: [2] } }),
    status: 400,
    field: `${rlField}.advantages`,
    error: /has 2 positions/,
  },
  {
    name: 'ppo logprobs beyond float32',
    path: 'forward_backward',
    body: () => rl('ppo', null, { logprobs: { data: [-1, -1e39, -3], dtype: 'float32', shape: [3] } }),
    status: 400,
    field: `${rlField}.logprobs.data.1`,
    error: /finite float32/,
  },
];

/** A datum of 3 positions (datum()) with provenance spans (W8): both lists optional, each tiling 3. */
const spanned = (spans: Record<string, unknown>) => ({ ...datum(), ...spans });
const prompt = (offset: number, length: number, id?: string) => ({
  type: 'prompt_tokens',
  sequence_id: id ?? ids.sampled,
  offset,
  length,
});
const sampled = (offset: number, length: number, id?: string) => ({
  type: 'sampled_tokens',
  sequence_id: id ?? ids.sampled,
  offset,
  length,
});
const spansField = 'forward_backward_input.data.0';
/** A target_prompt_logprobs for the fixture's 2-token prompt: shape [1, K]. */
const targets = (tensor: Record<string, unknown>) =>
  sample({ target_prompt_logprobs: { data: [5, -1], dtype: 'int64', shape: [1, 2], ...tensor } });

/** What SDK releases after 0.25.0 add (W8): the newer sampling outputs, provenance spans, string configs. */
const newerFields: BadRequest[] = [
  ...(
    [
      ['topk_sample_logprobs', -1],
      ['topk_sample_logprobs', 1.5],
      ['topk_sample_logprobs', 1025],
      ['prompt_alt_tokens_k', '2'],
      ['prompt_alt_tokens_k', -3],
      ['record_stability_info', 'yes'],
      ['target_prompt_logprobs', 'ids'],
    ] as const
  ).map(
    ([field, value]): BadRequest => ({
      name: `asample ${field} ${JSON.stringify(value)}`,
      path: 'asample',
      body: () => sample({ [field]: value }),
      status: 400,
      field,
      error: new RegExp(`^${field}: `),
    }),
  ),
  {
    name: 'target_prompt_logprobs as float32',
    path: 'asample',
    body: () => targets({ data: [0.5, 1], dtype: 'float32' }),
    status: 400,
    field: 'target_prompt_logprobs.dtype',
    error: /must be int64/,
  },
  {
    name: 'target_prompt_logprobs with a row per prompt token (not prompt - 1)',
    path: 'asample',
    body: () => targets({ data: [5, 6], shape: [2, 1] }),
    status: 400,
    field: 'target_prompt_logprobs.shape',
    error: /must be \[1, K\] for a prompt of 2 tokens/,
  },
  {
    name: 'target_prompt_logprobs 1-D',
    path: 'asample',
    body: () => targets({ shape: [2] }),
    status: 400,
    field: 'target_prompt_logprobs.shape',
    error: /must be \[1, K\]/,
  },
  {
    name: 'target_prompt_logprobs data shorter than its shape',
    path: 'asample',
    body: () => targets({ shape: [1, 3] }),
    status: 400,
    field: 'target_prompt_logprobs.shape',
    error: /holds 3 values, data has 2/,
  },
  {
    name: 'target_prompt_logprobs id -2',
    path: 'asample',
    body: () => targets({ data: [-2, 5] }),
    status: 400,
    field: 'target_prompt_logprobs.data.0',
    error: /must be a token id or -1/,
  },
  {
    name: 'target_prompt_logprobs id 2^31',
    path: 'asample',
    body: () => targets({ data: [5, 2 ** 31] }),
    status: 400,
    field: 'target_prompt_logprobs.data.1',
    error: /must be a token id or -1/,
  },
  {
    name: 'target_prompt_logprobs sparse without column indices',
    path: 'asample',
    body: () => targets({ data: [5], sparse_crow_indices: [0, 1] }),
    status: 400,
    field: 'target_prompt_logprobs',
    error: /needs both sparse_crow_indices and sparse_col_indices/,
  },
  {
    name: 'target_prompt_logprobs sparse column past the shape',
    path: 'asample',
    body: () => targets({ data: [5], sparse_crow_indices: [0, 1], sparse_col_indices: [2] }),
    status: 400,
    field: 'target_prompt_logprobs.sparse_col_indices',
    error: /sparse_col_indices/,
  },
  {
    name: 'target_prompt_logprobs over 2^20 cells',
    path: 'asample',
    body: () =>
      targets({ data: [], shape: [1, 2 ** 20 + 1], sparse_crow_indices: [0, 0], sparse_col_indices: [] }),
    status: 413,
    field: 'target_prompt_logprobs.shape',
    error: /exceeds the limit of 1048576/,
  },
  {
    name: 'a span of an unknown type',
    path: 'forward_backward',
    body: () => fb({}, { data: [spanned({ model_input_spans: [{ ...prompt(0, 3), type: 'generated' }] })] }),
    status: 400,
    field: `${spansField}.model_input_spans.0.type`,
    error: /model_input_spans\.0\.type/,
  },
  {
    name: 'a span of length 0',
    path: 'forward_backward',
    body: () => fb({}, { data: [spanned({ loss_fn_input_spans: [prompt(0, 2), sampled(0, 0)] })] }),
    status: 400,
    field: `${spansField}.loss_fn_input_spans.1.length`,
    error: /loss_fn_input_spans\.1\.length/,
  },
  {
    name: 'a span at a negative offset',
    path: 'forward_backward',
    body: () => fb({}, { data: [spanned({ model_input_spans: [sampled(-1, 3)] })] }),
    status: 400,
    field: `${spansField}.model_input_spans.0.offset`,
    error: /model_input_spans\.0\.offset/,
  },
  {
    name: 'a span without a sequence_id',
    path: 'forward_backward',
    body: () => fb({}, { data: [spanned({ model_input_spans: [{ type: 'sampled_tokens', length: 3 }] })] }),
    status: 400,
    field: `${spansField}.model_input_spans.0.sequence_id`,
    error: /sequence_id/,
  },
  {
    name: 'spans as an object',
    path: 'forward_backward',
    body: () => fb({}, { data: [spanned({ model_input_spans: { 0: sampled(0, 3) } })] }),
    status: 400,
    field: `${spansField}.model_input_spans`,
    error: /expected array/,
  },
  {
    name: 'spans that cover 2 of the datum 3 positions',
    path: 'forward_backward',
    body: () => fb({}, { data: [spanned({ model_input_spans: [prompt(0, 2)] })] }),
    status: 400,
    field: `${spansField}.model_input_spans`,
    error: /spans cover 2 positions; they must tile the datum's 3/,
  },
  {
    name: 'spans that cover 4 of 3 positions',
    path: 'forward_backward',
    body: () => fb({}, { data: [spanned({ loss_fn_input_spans: [prompt(0, 2), sampled(0, 2)] })] }),
    status: 400,
    field: `${spansField}.loss_fn_input_spans`,
    error: /spans cover 4 positions/,
  },
  ...(
    [
      ['not a sequence id', () => 'abc'],
      ['a sequence id never issued', () => `${'0'.repeat(32)}:0`],
      ['an index past num_samples', () => `${ids.sampled.split(':')[0]}:1`],
    ] as const
  ).map(
    ([name, id]): BadRequest => ({
      name: `a span naming ${name}`,
      path: 'forward_backward',
      body: () => fb({}, { data: [spanned({ model_input_spans: [sampled(0, 3, id())] })] }),
      status: 400,
      field: `${spansField}.model_input_spans.0.sequence_id`,
      error: /names no sampled sequence issued to this tenant/,
    }),
  ),
  {
    name: 'a prompt span past the 2-token prompt',
    path: 'forward_backward',
    body: () => fb({}, { data: [spanned({ loss_fn_input_spans: [prompt(0, 3)] })] }),
    status: 400,
    field: `${spansField}.loss_fn_input_spans.0.length`,
    error: /offset 0 \+ length 3 runs past the sequence's 2 prompt tokens/,
  },
  {
    name: 'a sampled span past max_tokens 4',
    path: 'forward_backward',
    body: () => fb({}, { data: [spanned({ model_input_spans: [sampled(2, 3)] })] }),
    status: 400,
    field: `${spansField}.model_input_spans.0.length`,
    error: /runs past the sequence's 4 max_tokens/,
  },
  {
    name: 'forward with a span past max_tokens',
    path: 'forward',
    body: () => ({
      model_id: ids.model,
      seq_id: 10,
      forward_input: { data: [spanned({ model_input_spans: [sampled(3, 3)] })], loss_fn: 'cross_entropy' },
    }),
    status: 400,
    field: 'forward_input.data.0.model_input_spans.0.length',
    error: /runs past/,
  },
  {
    name: 'ppo clip_low_threshold as a string',
    path: 'forward_backward',
    body: () => rl('ppo', { clip_low_threshold: '0.8' }),
    status: 400,
    field: 'forward_backward_input.loss_fn_config.clip_low_threshold',
    error: /must be a number .*got the string "0\.8"/,
  },
  {
    name: 'loss_fn_config value an object',
    path: 'forward_backward',
    body: () => rl('ppo', { clip_low_threshold: { value: 0.8 } }),
    status: 400,
    field: 'forward_backward_input.loss_fn_config.clip_low_threshold',
    error: /clip_low_threshold/,
  },
  {
    name: 'asample seq_id with topk_sample_logprobs now',
    path: 'asample',
    body: () => sample({ seq_id: 0, topk_sample_logprobs: 2 }),
    status: 400,
    field: 'seq_id',
    error: /already used with a different payload/,
  },
];

const numbers: BadRequest[] = [
  {
    name: 'seq_id 0',
    path: 'forward_backward',
    body: () => fb({ seq_id: 0 }),
    status: 400,
    field: 'seq_id',
    error: />=1/,
  },
  {
    name: 'fractional seq_id',
    path: 'forward_backward',
    body: () => fb({ seq_id: 10.5 }),
    status: 400,
    field: 'seq_id',
    error: /expected int/,
  },
  {
    name: 'seq_id past 2^53',
    path: 'optim_step',
    body: () => `{"model_id":"${ids.model}","seq_id":9007199254740993,"adam_params":{}}`,
    status: 400,
    field: 'seq_id',
    error: /seq_id/,
  },
  {
    name: 'seq_id 1e400 (Infinity once parsed)',
    path: 'optim_step',
    body: () => `{"model_id":"${ids.model}","seq_id":1e400,"adam_params":{}}`,
    status: 400,
    field: 'seq_id',
    error: /seq_id/,
  },
  {
    name: 'seq_id as the string "NaN"',
    path: 'optim_step',
    body: () => ({ model_id: ids.model, seq_id: 'NaN', adam_params: {} }),
    status: 400,
    field: 'seq_id',
    error: /expected number/,
  },
  {
    name: 'negative model_seq_id',
    path: 'create_model',
    body: () => createModel({ model_seq_id: -1 }),
    status: 400,
    field: 'model_seq_id',
    error: />=0/,
  },
  {
    name: 'negative token id',
    path: 'asample',
    body: () => sample({ prompt: { chunks: [{ tokens: [-1] }] } }),
    status: 400,
    error: /token id/,
  },
  {
    name: 'token id 2^31',
    path: 'asample',
    body: () => sample({ prompt: { chunks: [{ tokens: [2 ** 31] }] } }),
    status: 400,
    error: /token id/,
  },
  {
    name: 'tensor value 1e400',
    path: 'forward_backward',
    body: () =>
      JSON.stringify(
        fb(
          {},
          {
            data: [
              {
                ...datum([1]),
                loss_fn_inputs: {
                  target_tokens: { data: [2], dtype: 'int64' },
                  weights: { data: ['X'], dtype: 'float32' },
                },
              },
            ],
          },
        ),
      ).replace('"X"', '1e400'),
    status: 400,
    error: /finite number/,
  },
  {
    name: 'tensor value "Infinity"',
    path: 'forward_backward',
    body: () =>
      fb(
        {},
        {
          data: [
            {
              ...datum([1]),
              loss_fn_inputs: {
                target_tokens: { data: [2], dtype: 'int64' },
                weights: { data: ['Infinity'], dtype: 'float32' },
              },
            },
          ],
        },
      ),
    status: 400,
    error: /finite number/,
  },
  {
    name: 'negative shape',
    path: 'forward_backward',
    body: () =>
      fb(
        {},
        {
          data: [
            { ...datum([1]), loss_fn_inputs: { target_tokens: { data: [2], dtype: 'int64', shape: [-1] } } },
          ],
        },
      ),
    status: 400,
    error: />=0/,
  },
  {
    name: 'negative learning rate',
    path: 'optim_step',
    body: () => ({ model_id: ids.model, seq_id: 10, adam_params: { learning_rate: -1 } }),
    status: 400,
    field: 'adam_params.learning_rate',
    error: />=0/,
  },
  {
    name: 'beta1 of 1',
    path: 'optim_step',
    body: () => ({ model_id: ids.model, seq_id: 10, adam_params: { beta1: 1 } }),
    status: 400,
    field: 'adam_params.beta1',
    error: /<1/,
  },
  {
    name: 'eps of 0',
    path: 'optim_step',
    body: () => ({ model_id: ids.model, seq_id: 10, adam_params: { eps: 0 } }),
    status: 400,
    field: 'adam_params.eps',
    error: />0/,
  },
  {
    name: 'top_k 0',
    path: 'asample',
    body: () => sample({}, { top_k: 0 }),
    status: 400,
    field: 'sampling_params.top_k',
    error: /-1 \(no limit\)/,
  },
  {
    name: 'top_p 0',
    path: 'asample',
    body: () => sample({}, { top_p: 0 }),
    status: 400,
    field: 'sampling_params.top_p',
    error: />0/,
  },
  {
    name: 'max_tokens 1e9',
    path: 'asample',
    body: () => sample({}, { max_tokens: 1e9 }),
    status: 413,
    field: 'sampling_params.max_tokens',
    error: /over the limit/,
  },
  {
    name: 'num_samples 1025',
    path: 'asample',
    body: () => sample({ num_samples: 1025 }),
    status: 400,
    field: 'num_samples',
    error: /<=1024/,
  },
  {
    name: 'rank beyond the backend',
    path: 'create_model',
    body: () => createModel({ lora_config: { rank: 1e6 } }),
    status: 400,
    field: 'lora_config.rank',
    error: /<=/,
  },
  {
    name: 'LoRA seed beyond 2^53',
    path: 'create_model',
    body: () => createModel({ lora_config: { rank: 4, seed: 2 ** 60 } }),
    status: 400,
    field: 'lora_config.seed',
    error: /<=/,
  },
  {
    name: 'metadata number too large for DynamoDB',
    path: 'create_session',
    body: () => ({ user_metadata: { x: 1e200 } }),
    status: 400,
    field: 'user_metadata.x',
    error: /storable range/,
  },
  {
    name: 'metadata number too small for DynamoDB',
    path: 'create_session',
    body: () => ({ user_metadata: { x: [1e-200] } }),
    status: 400,
    field: 'user_metadata.x.0',
    error: /storable range/,
  },
];

const text: BadRequest[] = [
  {
    name: 'NUL in a model id',
    path: 'optim_step',
    body: () => ({ model_id: `${ids.model}\u0000`, seq_id: 10, adam_params: {} }),
    status: 400,
    field: 'model_id',
    error: /must be an id/,
  },
  {
    name: 'newline in a session id',
    path: 'session_heartbeat',
    body: () => ({ session_id: `${ids.session}\n` }),
    status: 400,
    field: 'session_id',
    error: /must be an id/,
  },
  {
    name: 'right-to-left override in a sampling session id',
    path: 'asample',
    body: () => sample({ sampling_session_id: `\u202e${ids.samplingSession}` }),
    status: 400,
    field: 'sampling_session_id',
    error: /must be an id/,
  },
  {
    name: 'zero-width space in a model id',
    path: 'forward',
    body: () => ({
      model_id: `${ids.model}\u200b`,
      seq_id: 10,
      forward_input: { data: [datum()], loss_fn: 'cross_entropy' },
    }),
    status: 400,
    field: 'model_id',
    error: /must be an id/,
  },
  {
    name: 'lone surrogate in a model id',
    path: 'unload_model',
    body: () => ({ model_id: 'model-\ud800' }),
    status: 400,
    field: 'model_id',
    error: /must be an id/,
  },
  {
    name: 'accented checkpoint name',
    path: 'save_weights',
    body: () => ({ model_id: ids.model, seq_id: 10, path: 'poids-é' }),
    status: 400,
    field: 'path',
    error: /letters, digits/,
  },
  {
    name: 'control character in a checkpoint name',
    path: 'save_weights_for_sampler',
    body: () => ({ model_id: ids.model, seq_id: 10, path: 'ckpt\u0007' }),
    status: 400,
    field: 'path',
    error: /letters, digits/,
  },
  {
    name: 'bell in a base model name',
    path: 'create_model',
    body: () => createModel({ base_model: 'reference/byte-lm\u0007' }),
    status: 400,
    field: 'base_model',
    error: /must be a model name/,
  },
  {
    name: 'emoji in a tinker path',
    path: 'load_weights',
    body: () => ({ model_id: ids.model, seq_id: 10, path: `tinker://${ids.model}/weights/😀` }),
    status: 400,
    field: 'path',
    error: /must look like tinker/,
  },
  {
    name: 'empty metadata key',
    path: 'create_session',
    body: () => ({ user_metadata: { a: { '': 1 } } }),
    status: 400,
    field: 'user_metadata.a.',
    error: /not allowed/,
  },
  {
    name: 'metadata key "constructor"',
    path: 'create_session',
    body: () => ({ user_metadata: { constructor: 1 } }),
    status: 400,
    field: 'user_metadata.constructor',
    error: /not allowed/,
  },
  {
    name: 'invalid UTF-8 in an id',
    path: 'unload_model',
    body: () =>
      Buffer.concat([Buffer.from('{"model_id":"model-'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]),
    status: 400,
    field: 'model_id',
    error: /must be an id/,
  },
];

const nesting: BadRequest[] = [
  {
    name: 'metadata nested 40 deep (create_session)',
    path: 'create_session',
    body: () => `{"user_metadata":{"x":${nested(40)}}}`,
    status: 400,
    error: /nests deeper than 16/,
  },
  {
    name: 'metadata nested 40 deep in objects',
    path: 'create_session',
    body: () => `{"user_metadata":${'{"a":'.repeat(40)}1${'}'.repeat(40)}}`,
    status: 400,
    error: /nests deeper than 16/,
  },
  {
    name: 'metadata nested 5000 deep (create_model)',
    path: 'create_model',
    body: () => JSON.stringify(createModel({ user_metadata: { x: 'X' } })).replace('"X"', nested(5000)),
    status: 400,
    error: /nests deeper than 16/,
  },
  {
    name: 'data nested 5000 deep',
    path: 'forward_backward',
    body: () => JSON.stringify(fb({}, { data: 'X' })).replace('"X"', nested(5000)),
    status: 400,
    error: /expected object/,
  },
  {
    name: 'stop sequences nested 3000 deep',
    path: 'asample',
    body: () => JSON.stringify(sample({}, { stop: 'X' })).replace('"X"', nested(3000, '')),
    status: 400,
    field: 'sampling_params.stop',
    error: /must be a string, a list of strings/,
  },
];

const sizes: BadRequest[] = [
  {
    name: 'one byte over MAX_BODY_BYTES',
    path: 'create_session',
    body: () => `{"tags":["${'x'.repeat(MAX_BODY_BYTES - 12)}"]}`,
    status: 413,
    field: 'body',
    error: new RegExp(`${MAX_BODY_BYTES + 1} bytes exceeds the limit of ${MAX_BODY_BYTES}`),
  },
  {
    name: 'under the limit in characters, over it in UTF-8 bytes',
    path: 'create_session',
    body: () => `{"tags":["${'é'.repeat(MAX_BODY_BYTES / 2 + 8)}"]}`,
    status: 413,
    field: 'body',
    error: /exceeds the limit/,
  },
  {
    name: 'a huge prompt',
    path: 'asample',
    body: () => sample({ prompt: { chunks: [{ tokens: Array(20_000).fill(1) }] } }),
    status: 413,
    field: 'body',
    error: /exceeds the limit/,
  },
  ...[5_000_000, 1_000_000_000].map(
    (columns): BadRequest => ({
      name: `a sparse tensor of shape [3, ${columns}] in a small body`,
      path: 'forward_backward',
      body: () =>
        fb(
          {},
          {
            data: [
              {
                ...datum(),
                loss_fn_inputs: {
                  ...datum().loss_fn_inputs,
                  weights: {
                    data: [1],
                    dtype: 'float32',
                    shape: [3, columns],
                    sparse_crow_indices: [0, 1, 1, 1],
                    sparse_col_indices: [0],
                  },
                },
              },
            ],
          },
        ),
      status: 413,
      field: 'forward_backward_input.data.0.loss_fn_inputs.weights.shape',
      error: new RegExp(`expand to more than ${MAX_BODY_BYTES / 4} values`),
    }),
  ),
  {
    name: 'metadata over its own 16 KiB limit',
    path: 'create_session',
    body: () => ({ user_metadata: { blob: 'x'.repeat(20_000) } }),
    status: 413,
    field: 'user_metadata',
    error: /exceeds the limit of 16384/,
  },
  {
    name: 'create_model of a base model the pool does not serve',
    path: 'create_model',
    body: () => createModel({ base_model: 'unknown/model' }),
    status: 400,
    field: 'base_model',
    error:
      /"unknown\/model" is not served here; the supported base models are "reference\/byte-lm", "other\/model"/,
  },
  {
    name: 'create_sampling_session of a base model the pool does not serve',
    path: 'create_sampling_session',
    body: () => ({ session_id: ids.session, sampling_session_seq_id: 7, base_model: 'unknown/model' }),
    status: 400,
    field: 'base_model',
    error: /is not served here/,
  },
  {
    // Kept on the model row, which GET training_runs answers (C1): the same limit as a session's.
    name: 'create_model metadata over 16 KiB',
    path: 'create_model',
    body: () => createModel({ user_metadata: { blob: 'x'.repeat(20_000) } }),
    status: 413,
    field: 'user_metadata',
    error: /exceeds the limit of 16384/,
  },
  // Newer SDKs' checkpoint metadata: kept on the name record, typed dict[str, str] (W7).
  {
    name: 'save_weights metadata with a number value',
    path: 'save_weights',
    body: () => ({ model_id: ids.model, seq_id: 10, path: 'meta', user_metadata: { step: 3 } }),
    status: 400,
    field: 'user_metadata.step',
    error: /expected string/,
  },
  {
    name: 'save_weights metadata over 16 KiB',
    path: 'save_weights',
    body: () => ({
      model_id: ids.model,
      seq_id: 10,
      path: 'meta',
      user_metadata: { blob: 'x'.repeat(20_000) },
    }),
    status: 413,
    field: 'user_metadata',
    error: /exceeds the limit of 16384/,
  },
  {
    name: 'unnamed save_weights_for_sampler with metadata',
    path: 'save_weights_for_sampler',
    body: () => ({ model_id: ids.model, seq_id: 10, sampling_session_seq_id: 3, user_metadata: { a: 'b' } }),
    status: 400,
    field: 'user_metadata',
    error: /only on named saves/,
  },
  // Issue 25's repros at this table's limits: counted before the schema runs, or stopped at the
  // first bad element (test/unit/intake-bounds.test.ts counts the issues built).
  {
    name: 'data: [{}] x 10,000 (issue 25: x 400,000)',
    path: 'forward_backward',
    body: () => emptyJsonDatums(ids.model, 10, 10_000),
    status: 413,
    field: 'forward_backward_input.data',
    error: new RegExp(`10000 datums exceeds the limit of ${MAX_DATUMS}`),
  },
  {
    name: 'forward: data: [{}] x 10,000',
    path: 'forward',
    body: () => emptyJsonDatums(ids.model, 10, 10_000).replace('forward_backward_input', 'forward_input'),
    status: 413,
    field: 'forward_input.data',
    error: /10000 datums exceeds the limit/,
  },
  {
    name: `more chunks than ${CHUNKS_PER_DATUM} per datum of MAX_DATUMS`,
    path: 'forward_backward',
    body: () =>
      fb(
        {},
        {
          data: [{ ...datum(), model_input: { chunks: Array(CHUNKS_PER_DATUM * MAX_DATUMS + 1).fill({}) } }],
        },
      ),
    status: 413,
    field: 'forward_backward_input.data',
    error: /model_input chunks exceeds the limit/,
  },
  {
    name: 'datums 1 to 60 all {}: only the first bad one is named',
    path: 'forward_backward',
    body: () => fb({}, { data: [datum(), ...Array(60).fill({})] }),
    status: 400,
    field: 'forward_backward_input.data.1.model_input',
    error:
      /^forward_backward_input\.data\.1\.model_input: [^;]*; forward_backward_input\.data\.1\.loss_fn_inputs: [^;]*$/,
  },
  {
    name: '17 loss_fn_inputs in a datum',
    path: 'forward_backward',
    body: () =>
      fb(
        {},
        {
          data: [
            {
              ...datum(),
              loss_fn_inputs: Object.fromEntries(
                Array.from({ length: 17 }, (_, i) => [`x${i}`, datum().loss_fn_inputs.target_tokens]),
              ),
            },
          ],
        },
      ),
    status: 400,
    field: 'forward_backward_input.data.0.loss_fn_inputs',
    error: /17 entries exceeds the limit of 16/,
  },
  ...[[4, 1, 1], shapeOfRank(5_000, 4)].map(
    (shape): BadRequest => ({
      name: `target_tokens of rank ${shape.length} ([4, 1, 1, ...])`,
      path: 'forward_backward',
      body: () => fb({}, { data: [jsonDatumWithTargetShape([1, 2, 3, 4], shape)] }),
      status: 400,
      field: 'forward_backward_input.data.0.loss_fn_inputs.target_tokens.shape',
      error: new RegExp(`has rank ${shape.length}`),
    }),
  ),
  {
    name: 'target_tokens whose shape holds more values than its data',
    path: 'forward_backward',
    body: () => fb({}, { data: [jsonDatumWithTargetShape([1, 2, 3, 4], [2, 4])] }),
    status: 400,
    field: 'forward_backward_input.data.0.loss_fn_inputs.target_tokens.shape',
    error: /holds 8 values, data has 4/,
  },
];

const replays: BadRequest[] = [
  {
    name: 'optim_step seq_id with other adam_params',
    path: 'optim_step',
    body: () => ({ model_id: ids.model, seq_id: 3, adam_params: { learning_rate: 0.5 } }),
    status: 400,
    field: 'seq_id',
    error: /already used with a different payload/,
  },
  {
    name: 'save_weights seq_id with another name',
    path: 'save_weights',
    body: () => ({ model_id: ids.model, seq_id: 2, path: 'another' }),
    status: 400,
    field: 'seq_id',
    error: /already used with a different payload/,
  },
  {
    name: 'load_weights seq_id with the optimizer now',
    path: 'load_weights',
    body: () => ({
      model_id: ids.model,
      seq_id: 4,
      path: `tinker://${ids.model}/weights/taken`,
      optimizer: true,
    }),
    status: 400,
    field: 'seq_id',
    error: /already used with a different payload/,
  },
  {
    name: 'unnamed save_weights_for_sampler seq_id with another sampling_session_seq_id',
    path: 'save_weights_for_sampler',
    body: () => ({ model_id: ids.model, seq_id: 5, sampling_session_seq_id: 2 }),
    status: 400,
    field: 'seq_id',
    error: /already used with a different payload/,
  },
  {
    name: 'forward seq_id of a forward_backward',
    path: 'forward',
    body: () => ({
      model_id: ids.model,
      seq_id: 1,
      forward_input: { data: [datum()], loss_fn: 'cross_entropy' },
    }),
    status: 400,
    field: 'seq_id',
    error: /already used with a different payload/,
  },
  {
    name: 'asample seq_id with another prompt',
    path: 'asample',
    body: () => sample({ seq_id: 0, prompt: { chunks: [{ tokens: [7, 7] }] } }),
    status: 400,
    field: 'seq_id',
    error: /already used with a different payload/,
  },
  {
    name: 'create_sampling_session seq id with another base model',
    path: 'create_sampling_session',
    body: () => ({ session_id: ids.session, sampling_session_seq_id: 0, base_model: 'other/model' }),
    status: 400,
    field: 'sampling_session_seq_id',
    error: /already used with a different payload/,
  },
];

const headers: BadRequest[] = [
  {
    name: 'no X-API-Key header at all',
    path: 'create_session',
    body: () => ({}),
    headers: { 'x-api-key': null },
    status: 401,
    error: /missing X-API-Key/,
  },
  {
    name: 'the key as a bearer token only',
    path: 'create_session',
    body: () => ({}),
    headers: { 'x-api-key': null, authorization: 'Bearer KEY' },
    status: 401,
    error: /missing X-API-Key/,
  },
  {
    name: 'the key with its case changed',
    path: 'create_session',
    body: () => ({}),
    headers: { 'x-api-key': 'CASE' },
    status: 401,
    error: /invalid or revoked/,
  },
  {
    name: 'the key with a character appended',
    path: 'create_session',
    body: () => ({}),
    headers: { 'x-api-key': 'LONGER' },
    status: 401,
    error: /invalid or revoked/,
  },
  {
    name: 'two keys (two tenants) at once',
    path: 'create_session',
    body: () => ({}),
    headers: { 'x-api-key': ['OWNER', 'RIVAL'] },
    status: 401,
    error: /invalid or revoked/,
  },
  {
    name: 'text/xml',
    path: 'create_session',
    body: () => '<tags/>',
    headers: { 'content-type': 'text/xml' },
    status: 415,
    field: 'body',
    error: /send JSON/,
  },
  {
    name: 'application/x-protobufXYZ (not protobuf: media types match whole)',
    path: 'forward_backward',
    body: () => Buffer.from(pbForwardBackward({ modelId: ids.model, seqId: 10 })),
    headers: { 'content-type': 'application/x-protobufXYZ' },
    status: 415,
    field: 'body',
    error: /content-type application\/x-protobufxyz is not supported/,
  },
  {
    name: 'multipart/form-data',
    path: 'forward_backward',
    body: () => '--b\r\n\r\n{}\r\n--b--',
    headers: { 'content-type': 'multipart/form-data; boundary=b' },
    status: 415,
    field: 'body',
    error: /send JSON/,
  },
  {
    name: 'a form',
    path: 'create_session',
    body: () => 'tags=a',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    status: 415,
    field: 'body',
    error: /send JSON/,
  },
  {
    name: 'octet-stream',
    path: 'optim_step',
    body: () => Buffer.from('{}'),
    headers: { 'content-type': 'application/octet-stream' },
    status: 415,
    field: 'body',
    error: /send JSON/,
  },
];

const routes: BadRequest[] = [
  ...['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf'].map(
    (name): BadRequest => ({
      name: `/api/v1/${name}`,
      path: name,
      body: () => ({}),
      status: 404,
      error: /no route/,
    }),
  ),
  { name: 'no operation', path: '/api/v1/', body: () => ({}), status: 404, error: /no route/ },
  {
    name: 'another API version',
    path: '/api/v2/create_session',
    body: () => ({}),
    status: 404,
    error: /no route/,
  },
  { name: 'upper case', path: '/API/V1/CREATE_SESSION', body: () => ({}), status: 404, error: /no route/ },
  {
    name: 'trailing slash',
    path: '/api/v1/create_session/',
    body: () => ({}),
    status: 404,
    error: /no route/,
  },
  { name: 'double slash', path: '/api/v1//create_session', body: () => ({}), status: 404, error: /no route/ },
  {
    name: 'dot segments',
    path: '/api/v1/../v1/create_session',
    body: () => ({}),
    status: 404,
    error: /no route/,
  },
  {
    name: 'encoded slash',
    path: '/api/v1/create_session%2F',
    body: () => ({}),
    status: 404,
    error: /no route/,
  },
  ...['GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'].map(
    (method): BadRequest => ({
      name: `${method} on a POST route`,
      method,
      path: 'forward_backward',
      status: 405,
      error: new RegExp(`method ${method} is not allowed .* use POST`),
    }),
  ),
  { name: 'GET retrieve_future', method: 'GET', path: 'retrieve_future', status: 405, error: /use POST/ },
  { name: 'POST /healthz', path: '/healthz', body: () => ({}), status: 405, error: /use GET/ },
];

/** get_info, weights_info and GET samplers/{sampler_id} (W6): read-only, but no bad input stores anything either. */
const reads: BadRequest[] = [
  {
    name: 'get_info without model_id',
    path: 'get_info',
    body: () => ({}),
    status: 400,
    field: 'model_id',
    error: /model_id/,
  },
  {
    name: 'get_info with a numeric model_id',
    path: 'get_info',
    body: () => ({ model_id: 7 }),
    status: 400,
    field: 'model_id',
    error: /model_id/,
  },
  {
    name: 'get_info with a key separator in model_id',
    path: 'get_info',
    body: () => ({ model_id: 'a#b' }),
    status: 400,
    field: 'model_id',
    error: /must be an id/,
  },
  {
    name: 'get_info of an unknown model',
    path: 'get_info',
    body: () => ({ model_id: 'model-nobody', type: 'get_info' }),
    status: 404,
    field: 'model_id',
    error: /model model-nobody not found/,
  },
  {
    name: 'weights_info without tinker_path',
    path: 'weights_info',
    body: () => ({}),
    status: 400,
    field: 'tinker_path',
    error: /tinker_path/,
  },
  {
    name: 'weights_info with a numeric tinker_path',
    path: 'weights_info',
    body: () => ({ tinker_path: 1 }),
    status: 400,
    field: 'tinker_path',
    error: /tinker_path/,
  },
  {
    name: 'weights_info of a path that is not tinker://',
    path: 'weights_info',
    body: () => ({ tinker_path: 's3://bucket/key' }),
    status: 400,
    field: 'tinker_path',
    error: /tinker_path: must look like tinker:\/\//,
  },
  {
    name: 'weights_info of an unknown kind segment',
    path: 'weights_info',
    body: () => ({ tinker_path: `tinker://${ids.model}/checkpoints/taken` }),
    status: 400,
    field: 'tinker_path',
    error: /must look like/,
  },
  {
    name: 'weights_info of an over-long path',
    path: 'weights_info',
    body: () => ({ tinker_path: `tinker://${'m'.repeat(600)}/weights/x` }),
    status: 400,
    field: 'tinker_path',
    error: /tinker_path/,
  },
  {
    name: 'weights_info of a checkpoint not saved yet',
    path: 'weights_info',
    body: () => ({ tinker_path: `tinker://${ids.model}/weights/taken` }),
    status: 408,
    field: 'tinker_path',
    error: /not saved yet; retry/,
  },
  {
    name: 'weights_info of an unknown checkpoint',
    path: 'weights_info',
    body: () => ({ tinker_path: `tinker://${ids.model}/sampler_weights/nope` }),
    status: 404,
    field: 'tinker_path',
    error: /not found/,
  },
  {
    name: 'GET samplers/ with a key separator',
    method: 'GET',
    path: 'samplers/a%23b',
    status: 400,
    field: 'sampler_id',
    error: /sampler_id: must be an id/,
  },
  {
    name: 'GET samplers/ of an unknown id',
    method: 'GET',
    path: 'samplers/samp-nobody',
    status: 404,
    field: 'sampler_id',
    error: /sampling session samp-nobody not found/,
  },
  { name: 'GET samplers/ with no id', method: 'GET', path: 'samplers/', status: 404, error: /no route/ },
  {
    name: 'GET samplers/ with two segments',
    method: 'GET',
    path: 'samplers/a/b',
    status: 404,
    error: /no route/,
  },
  {
    name: 'GET samplers/ with an encoded slash',
    method: 'GET',
    path: 'samplers/a%2Fb',
    status: 404,
    error: /no route/,
  },
  {
    name: 'GET samplers/ with a malformed escape',
    method: 'GET',
    path: 'samplers/%E0%A4%A',
    status: 404,
    error: /no route/,
  },
  {
    name: 'GET samplers/__proto__',
    method: 'GET',
    path: 'samplers/__proto__',
    status: 404,
    field: 'sampler_id',
    error: /not found/,
  },
  {
    name: 'POST samplers/{id}',
    path: 'samplers/x',
    body: () => ({}),
    status: 405,
    error: /method POST is not allowed .* use GET/,
  },
  { name: 'GET get_info', method: 'GET', path: 'get_info', status: 405, error: /use POST/ },
  { name: 'GET weights_info', method: 'GET', path: 'weights_info', status: 405, error: /use POST/ },
];

const PROTOBUF = { 'content-type': 'application/x-protobuf' } as const;
const ZSTD = { ...PROTOBUF, 'content-encoding': 'zstd' } as const;

/** A protobuf forward_backward body of the fixture's model (seq_id 10, never accepted), `init` on top. */
const pb = (init: RequestInit = {}) =>
  Buffer.from(pbForwardBackward({ modelId: ids.model, seqId: 10, ...init }));
const zstd = (bytes: Uint8Array, level = 3) => Buffer.from(compress(bytes, level));
/** One cross_entropy datum whose input `name` is `tensor` (undefined: left out). */
const withInput = (name: string, tensor: TensorInit | undefined, tokens = [1, 2, 3]) => ({
  data: [pbDatum(tokens, { [name]: tensor })],
});
/** A float32 CSR tensor of shape [3, 2] holding two values. */
const csr = (crow: number[], col: number[]): TensorInit => ({
  encoding: {
    case: 'sparseCsr',
    value: { values: float32Bytes([1, 1]), crowIndices: int64Bytes(crow), colIndices: int64Bytes(col) },
  },
  dtype: DType.DTYPE_FLOAT32,
  shape: [3n, 2n],
});
/** A ProvenanceSpan init naming the fixture's sampled sequence (or `id`). */
const pbSpan = (arm: 'promptTokens' | 'sampledTokens', offset: number, length: number, id?: string) => ({
  span: {
    case: arm,
    value: { sequenceId: id ?? ids.sampled, offset: BigInt(offset), length: BigInt(length) },
  },
});
const tokensOf = (count: number) => Array.from({ length: count }, (_, index) => index % 250);
/** Over MAX_BODY_BYTES as protobuf (12 bytes a token: int32 in, int64 target). */
const overTheLimit = () => pb({ data: [pbDatum(tokensOf(3_000))] });
const target = 'data.0.loss_fn_inputs.target_tokens';

/** forward_backward as the SDK 0.25 sends it (W1): each refused with the field named, nothing stored. */
const protobuf: BadRequest[] = [
  {
    name: 'not a message (an illegal wire type)',
    path: 'forward_backward',
    body: () => Buffer.from([0x0f, 0x01, 0x02]),
    headers: PROTOBUF,
    status: 400,
    field: 'body',
    error: /body: not a valid ForwardBackwardRequest message \(illegal tag/,
  },
  {
    name: 'a length running past the end',
    path: 'forward_backward',
    body: () => Buffer.from([0x0a, 0xff, 0xff, 0xff, 0x0f, 0x61]),
    headers: PROTOBUF,
    status: 400,
    field: 'body',
    error: /not a valid ForwardBackwardRequest message \(premature EOF\)/,
  },
  {
    name: 'a message cut short',
    path: 'forward_backward',
    body: () => pb().subarray(0, -3),
    headers: PROTOBUF,
    status: 400,
    field: 'body',
    error: /premature EOF/,
  },
  {
    name: 'a message cut in half',
    path: 'forward_backward',
    body: () => {
      const bytes = pb();
      return bytes.subarray(0, bytes.length >> 1);
    },
    headers: PROTOBUF,
    status: 400,
    field: 'body',
    error: /premature EOF/,
  },
  {
    name: 'JSON sent as protobuf',
    path: 'forward_backward',
    body: () => JSON.stringify(fb()),
    headers: PROTOBUF,
    status: 400,
    field: 'body',
    error: /not a valid ForwardBackwardRequest/,
  },
  {
    name: 'an unknown dtype',
    path: 'forward_backward',
    body: () => pb(withInput('target_tokens', { ...int64Tensor([2, 3, 4]), dtype: 99 as DType })),
    headers: PROTOBUF,
    status: 400,
    field: `${target}.dtype`,
    error: /unknown dtype 99/,
  },
  {
    name: 'DTYPE_UNSPECIFIED',
    path: 'forward_backward',
    body: () => pb(withInput('target_tokens', { ...int64Tensor([2, 3, 4]), dtype: DType.DTYPE_UNSPECIFIED })),
    headers: PROTOBUF,
    status: 400,
    field: `${target}.dtype`,
    error: /DTYPE_UNSPECIFIED is not a tensor dtype/,
  },
  {
    name: 'data and shape disagree',
    path: 'forward_backward',
    body: () => pb(withInput('target_tokens', int64Tensor([2, 3, 4], [4]))),
    headers: PROTOBUF,
    status: 400,
    field: `${target}.shape`,
    error: /shape \[4\] holds 4 values, data has 3/,
  },
  {
    name: 'data bytes not a multiple of the dtype size',
    path: 'forward_backward',
    body: () =>
      pb(
        withInput('target_tokens', {
          encoding: { case: 'dense', value: int64Bytes([2, 3, 4]).subarray(0, 20) },
          dtype: DType.DTYPE_INT64,
          shape: [3n],
        }),
      ),
    headers: PROTOBUF,
    status: 400,
    field: `${target}.dense`,
    error: /byte length 20 is not a multiple of 8 \(INT64\)/,
  },
  {
    name: 'a tensor with neither dense nor sparse data',
    path: 'forward_backward',
    body: () => pb(withInput('target_tokens', { dtype: DType.DTYPE_INT64, shape: [3n] })),
    headers: PROTOBUF,
    status: 400,
    field: target,
    error: /needs dense or sparse_csr data/,
  },
  {
    name: 'CSR row offsets that fall back',
    path: 'forward_backward',
    body: () => pb(withInput('weights', csr([0, 2, 1, 2], [0, 1]))),
    headers: PROTOBUF,
    status: 400,
    field: 'data.0.loss_fn_inputs.weights.sparse_crow_indices',
    error: /entry 2 is 1; offsets must rise/,
  },
  {
    name: 'CSR column outside the shape',
    path: 'forward_backward',
    body: () => pb(withInput('weights', csr([0, 1, 1, 2], [0, 5]))),
    headers: PROTOBUF,
    status: 400,
    field: 'data.0.loss_fn_inputs.weights.sparse_col_indices',
    error: /entry 1 is 5, outside \[0, 2\)/,
  },
  {
    name: 'CSR column indices of odd byte length',
    path: 'forward_backward',
    body: () =>
      pb(
        withInput('weights', {
          ...csr([0, 1, 1, 2], [0, 1]),
          encoding: {
            case: 'sparseCsr',
            value: {
              values: float32Bytes([1, 1]),
              crowIndices: int64Bytes([0, 1, 1, 2]),
              colIndices: int64Bytes([0, 1]).subarray(0, 12),
            },
          },
        }),
      ),
    headers: PROTOBUF,
    status: 400,
    field: 'data.0.loss_fn_inputs.weights.sparse_csr.col_indices',
    error: /byte length 12 is not a multiple of 8/,
  },
  {
    name: 'a CSR shape expanding past the budget',
    path: 'forward_backward',
    body: () => pb(withInput('weights', { ...csr([0, 0], []), shape: [1n, 1n << 30n] } as TensorInit)),
    headers: PROTOBUF,
    status: 413,
    field: 'data.0.loss_fn_inputs.weights.shape',
    error: /expand to more than/,
  },
  {
    name: 'a 200-byte CSR tensor expanding past the body limit',
    path: 'forward_backward',
    body: () => pb(withInput('weights', { ...csr([0, 1, 1, 2], [0, 1]), shape: [3n, 5_000_000n] })),
    headers: PROTOBUF,
    status: 413,
    field: 'data.0.loss_fn_inputs.weights.shape',
    // Stored dense, a sparse tensor counts against MAX_BODY_BYTES: one float32 per 4 bytes.
    error: new RegExp(`expand to more than ${MAX_BODY_BYTES / 4} values`),
  },
  {
    name: 'an image chunk',
    path: 'forward_backward',
    body: () =>
      pb({
        data: [
          {
            ...pbDatum(),
            modelInput: [
              { chunk: { case: 'image', value: { data: new Uint8Array([0x89, 0x50]), format: 'png' } } },
            ],
          },
        ],
      }),
    headers: PROTOBUF,
    status: 422,
    field: 'data.0.model_input.chunks.0',
    error: /only encoded_text chunks are supported, got image/,
  },
  {
    name: 'a chunk with no content',
    path: 'forward_backward',
    body: () => pb({ data: [{ ...pbDatum(), modelInput: [{}] }] }),
    headers: PROTOBUF,
    status: 400,
    field: 'data.0.model_input.chunks.0',
    error: /the chunk has no content/,
  },
  {
    name: 'a negative token id',
    path: 'forward_backward',
    body: () => pb({ data: [{ ...pbDatum([1]), modelInput: [textChunk([-1])] }] }),
    headers: PROTOBUF,
    status: 400,
    field: 'data.0.model_input.chunks.0.tokens',
    error: /token 0 is -1, negative/,
  },
  {
    name: 'token bytes not a multiple of 4',
    path: 'forward_backward',
    body: () =>
      pb({
        data: [
          {
            ...pbDatum([1]),
            modelInput: [{ chunk: { case: 'encodedText', value: { tokens: new Uint8Array(6) } } }],
          },
        ],
      }),
    headers: PROTOBUF,
    status: 400,
    field: 'data.0.model_input.chunks.0.tokens',
    error: /byte length 6 is not a multiple of 4/,
  },
  {
    name: 'a negative target token',
    path: 'forward_backward',
    body: () => pb(withInput('target_tokens', int64Tensor([2, -3, 4]))),
    headers: PROTOBUF,
    status: 400,
    field: `${target}.data`,
    error: /token ids must not be negative/,
  },
  ...(
    [
      ['a NaN weight', 'weights', float32Tensor([1, Number.NaN, 1]), 'cross_entropy', 1],
      ['an infinite advantage', 'advantages', float32Tensor([1, 1, Number.NEGATIVE_INFINITY]), 'ppo', 2],
      [
        'an infinite BFLOAT16 logprob',
        'logprobs',
        {
          encoding: { case: 'dense', value: new Uint8Array([0, 0, 0x80, 0xff, 0, 0]) },
          dtype: DType.DTYPE_BFLOAT16,
        },
        'importance_sampling',
        1,
      ],
    ] as const
  ).map(
    ([name, input, tensor, lossFn, index]): BadRequest => ({
      name: `${name} (the JSON wire cannot send one either)`,
      path: 'forward_backward',
      body: () =>
        pb({
          lossFn,
          data: [
            pbDatum([1, 2, 3], {
              logprobs: float32Tensor([-1, -1, -1]),
              advantages: float32Tensor([0, 0, 0]),
              [input]: tensor as TensorInit,
            }),
          ],
        }),
      headers: PROTOBUF,
      status: 400,
      field: `data.0.loss_fn_inputs.${input}.data.${index}`,
      error: /must be a finite float32, got -?(NaN|Infinity)/,
    }),
  ),
  {
    name: 'a non-finite loss_fn_config value',
    path: 'forward_backward',
    body: () => pb({ lossFnConfig: { clip: Number.NaN } }),
    headers: PROTOBUF,
    status: 400,
    field: 'loss_fn_config.clip',
    error: /must be a finite number/,
  },
  {
    name: 'seq_id 0 (the proto3 default)',
    path: 'forward_backward',
    body: () => pb({ seqId: 0 }),
    headers: PROTOBUF,
    status: 400,
    field: 'seq_id',
    error: /seq_id: .*>=1/,
  },
  {
    name: 'a negative seq_id',
    path: 'forward_backward',
    body: () => pb({ seqId: -5 }),
    headers: PROTOBUF,
    status: 400,
    field: 'seq_id',
    error: /seq_id: .*>=1/,
  },
  {
    name: 'no model_id (the proto3 default)',
    path: 'forward_backward',
    body: () => pb({ modelId: '' }),
    headers: PROTOBUF,
    status: 400,
    field: 'model_id',
    error: /model_id/,
  },
  {
    name: 'a key separator in model_id',
    path: 'forward_backward',
    body: () => pb({ modelId: `${ids.model}#x` }),
    headers: PROTOBUF,
    status: 400,
    field: 'model_id',
    error: /model_id: must be an id/,
  },
  {
    name: 'NUL and a right-to-left override in model_id',
    path: 'forward_backward',
    body: () => pb({ modelId: `\u202e${ids.model}\u0000` }),
    headers: PROTOBUF,
    status: 400,
    field: 'model_id',
    error: /model_id: must be an id/,
  },
  {
    name: 'a loss_fn that does not exist',
    path: 'forward_backward',
    body: () => pb({ lossFn: 'mean_squared_error' }),
    headers: PROTOBUF,
    status: 400,
    field: 'loss_fn',
    error: /unknown loss function "mean_squared_error"/,
  },
  {
    name: 'no loss_fn (the proto3 default)',
    path: 'forward_backward',
    body: () => pb({ lossFn: '' }),
    headers: PROTOBUF,
    status: 400,
    field: 'loss_fn',
    error: /unknown loss function ""/,
  },
  {
    name: 'a required loss input missing',
    path: 'forward_backward',
    body: () => pb(withInput('target_tokens', undefined)),
    headers: PROTOBUF,
    status: 400,
    field: target,
    error: /required by loss_fn cross_entropy/,
  },
  {
    name: 'no datums',
    path: 'forward_backward',
    body: () => pb({ data: [] }),
    headers: PROTOBUF,
    status: 400,
    field: 'data',
    error: /must hold at least one datum/,
  },
  {
    name: 'too many datums',
    path: 'forward_backward',
    body: () => pb({ data: Array.from({ length: MAX_DATUMS + 1 }, () => pbDatum([1])) }),
    headers: PROTOBUF,
    status: 413,
    field: 'data',
    error: new RegExp(`${MAX_DATUMS + 1} datums exceeds the limit of ${MAX_DATUMS}`),
  },
  // Issue 25's repros at this table's limits (MAX_BODY_BYTES 32 KiB, MAX_DATUMS 64): counted on the
  // bytes before any message is built (test/unit/intake-bounds.test.ts counts the datums built).
  ...[
    ['as sent', (bytes: Uint8Array) => Buffer.from(bytes), PROTOBUF],
    ['zstd-compressed', (bytes: Uint8Array) => zstd(bytes, 19), ZSTD],
  ].map(
    ([how, encode, headers]): BadRequest => ({
      name: `16,000 empty datums, ${how} (issue 25: 2,500,000)`,
      path: 'forward_backward',
      body: () => (encode as (bytes: Uint8Array) => Buffer)(emptyProtobufDatums(16_000)),
      headers: headers as typeof PROTOBUF,
      status: 413,
      field: 'data',
      error: new RegExp(`at least ${MAX_DATUMS + 1} datums exceeds the limit of ${MAX_DATUMS}`),
    }),
  ),
  {
    name: `more chunks than ${CHUNKS_PER_DATUM} per datum of MAX_DATUMS`,
    path: 'forward_backward',
    body: () => Buffer.from(emptyProtobufChunks(CHUNKS_PER_DATUM * MAX_DATUMS + 1)),
    headers: PROTOBUF,
    status: 413,
    field: 'data',
    error: /model_input chunks exceeds the limit/,
  },
  ...[3, 5_000].map(
    (rank): BadRequest => ({
      name: `target_tokens of rank ${rank}`,
      path: 'forward_backward',
      body: () =>
        pb(withInput('target_tokens', int64Tensor([2, 3, 4, 5], shapeOfRank(rank, 4)), [1, 2, 3, 4])),
      headers: PROTOBUF,
      status: 400,
      field: `${target}.shape`,
      error: new RegExp(`has rank ${rank}`),
    }),
  ),
  {
    name: '17 loss_fn_inputs in a datum',
    path: 'forward_backward',
    body: () =>
      pb({
        data: [
          pbDatum(
            [1, 2, 3],
            Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`x${i}`, float32Tensor([1, 1, 1])])),
          ),
        ],
      }),
    headers: PROTOBUF,
    status: 400,
    field: 'data.0.loss_fn_inputs',
    error: /17 entries exceeds the limit of 16/,
  },
  {
    name: '17 loss_fn_config entries',
    path: 'forward_backward',
    body: () => pb({ lossFnConfig: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 1])) }),
    headers: PROTOBUF,
    status: 400,
    field: 'loss_fn_config',
    error: /17 entries exceeds the limit of 16/,
  },
  {
    name: '20,000 empty zstd frames with 8 MiB windows (issue 25)',
    path: 'forward_backward',
    body: () => Buffer.from(emptyZstdFrames(20_000)),
    headers: ZSTD,
    status: 413,
    field: 'body',
    error: /more than the 16 frames this server inflates/,
  },
  {
    name: 'three empty zstd frames whose windows need 24 MiB',
    path: 'forward_backward',
    body: () => Buffer.from(emptyZstdFrames(3)),
    headers: ZSTD,
    status: 413,
    field: 'body',
    error: /windows need more than/,
  },
  {
    name: 'too many tokens',
    path: 'forward_backward',
    body: () => pb({ data: [pbDatum(tokensOf(600)), pbDatum(tokensOf(600))] }),
    headers: PROTOBUF,
    status: 413,
    field: 'data',
    error: new RegExp(`1200 tokens exceeds the limit of ${MAX_TOKENS_PER_REQUEST}`),
  },
  {
    name: 'too many tokens, zstd-compressed',
    path: 'forward_backward',
    body: () => zstd(pb({ data: [pbDatum(tokensOf(600)), pbDatum(tokensOf(600))] })),
    headers: ZSTD,
    status: 413,
    field: 'data',
    error: /1200 tokens exceeds the limit/,
  },
  {
    name: 'a body over MAX_BODY_BYTES',
    path: 'forward_backward',
    body: overTheLimit,
    headers: PROTOBUF,
    status: 413,
    field: 'body',
    error: new RegExp(`body: \\d+ bytes exceeds the limit of ${MAX_BODY_BYTES} bytes`),
  },
  {
    name: 'a zstd body under the limit inflating over it',
    path: 'forward_backward',
    body: () => {
      const compressed = zstd(overTheLimit(), 19);
      expect(compressed.length).toBeLessThan(MAX_BODY_BYTES);
      return compressed;
    },
    headers: ZSTD,
    status: 413,
    field: 'body',
    error: new RegExp(`body: decompressed body exceeds the limit of ${MAX_BODY_BYTES} bytes`),
  },
  ...['bomb-declared.zst', 'bomb-streamed.zst'].map(
    (name): BadRequest => ({
      name: `a 100 MB zstd bomb (${name})`,
      path: 'forward_backward',
      body: () => Buffer.from(fixtureBytes(name)),
      headers: ZSTD,
      status: 413,
      field: 'body',
      error: /decompressed body exceeds the limit/,
    }),
  ),
  {
    name: 'a zstd frame cut short',
    path: 'forward_backward',
    body: () => zstd(pb()).subarray(0, -4),
    headers: ZSTD,
    status: 400,
    field: 'body',
    error: /zstd/,
  },
  {
    name: 'garbage declared as zstd',
    path: 'forward_backward',
    body: () => Buffer.from('not zstd at all, just text'),
    headers: ZSTD,
    status: 400,
    field: 'body',
    error: /zstd/,
  },
  {
    name: 'a zstd frame followed by garbage',
    path: 'forward_backward',
    body: () => Buffer.concat([zstd(pb()), Buffer.from([0xde, 0xad, 0xbe, 0xef, 1, 2, 3])]),
    headers: ZSTD,
    status: 400,
    field: 'body',
    error: /zstd/,
  },
  {
    name: 'a protobuf message sent as zstd without compressing it',
    path: 'forward_backward',
    body: () => pb(),
    headers: ZSTD,
    status: 400,
    field: 'body',
    error: /zstd/,
  },
  {
    name: 'a zstd body that inflates to a broken message',
    path: 'forward_backward',
    body: () => zstd(pb().subarray(0, -3)),
    headers: ZSTD,
    status: 400,
    field: 'body',
    error: /not a valid ForwardBackwardRequest message/,
  },
  ...['gzip', 'br', 'deflate', 'zstd, gzip'].map(
    (encoding): BadRequest => ({
      name: `Content-Encoding: ${encoding}`,
      path: 'forward_backward',
      body: () => pb(),
      headers: { ...PROTOBUF, 'content-encoding': encoding },
      status: 415,
      field: 'body',
      error: new RegExp(`body: content-encoding ${encoding} is not supported; use zstd`),
    }),
  ),
  {
    name: 'zstd on a JSON body',
    path: 'forward_backward',
    body: () => zstd(Buffer.from(JSON.stringify(fb()))),
    headers: { 'content-encoding': 'zstd' },
    status: 415,
    field: 'body',
    error: /content-encoding zstd is not supported on JSON bodies/,
  },
  ...['forward', 'optim_step', 'asample', 'retrieve_future', 'create_session'].map(
    (path): BadRequest => ({
      name: `protobuf on ${path}, a JSON-only route`,
      path,
      body: () => pb(),
      headers: PROTOBUF,
      status: 415,
      field: 'body',
      error: /body: application\/x-protobuf is accepted only by forward_backward; send JSON/,
    }),
  ),
  {
    name: 'zstd protobuf on a JSON-only route',
    path: 'forward',
    body: () => Buffer.from(fixtureBytes('bomb-declared.zst')),
    headers: ZSTD,
    status: 415,
    field: 'body',
    error: /accepted only by forward_backward/,
  },
  {
    name: 'a replayed seq_id with other data',
    path: 'forward_backward',
    body: () => pb({ seqId: 1, data: [pbDatum([1, 2, 4])] }),
    headers: PROTOBUF,
    status: 400,
    field: 'seq_id',
    error: /already used with a different payload/,
  },
  {
    name: 'a replayed seq_id as forward_only',
    path: 'forward_backward',
    body: () => pb({ seqId: 1, forwardOnly: true }),
    headers: PROTOBUF,
    status: 400,
    field: 'seq_id',
    error: /already used with a different payload/,
  },
  // SDK 0.26+ (W8): provenance spans (Datum 3, 4) and loss_fn_config_v2 (7).
  {
    name: 'a provenance span with neither arm',
    path: 'forward_backward',
    body: () => pb({ data: [{ ...pbDatum(), modelInputSpans: [{}] }] }),
    headers: PROTOBUF,
    status: 400,
    field: 'data.0.model_input_spans.0',
    error: /names neither prompt_tokens nor sampled_tokens/,
  },
  {
    name: 'a provenance span at offset -1',
    path: 'forward_backward',
    body: () => pb({ data: [{ ...pbDatum(), lossFnInputSpans: [pbSpan('promptTokens', -1, 3)] }] }),
    headers: PROTOBUF,
    status: 400,
    field: 'data.0.loss_fn_input_spans.0.prompt_tokens.offset',
    error: /must be >= 0/,
  },
  {
    name: 'provenance spans that do not tile the datum',
    path: 'forward_backward',
    body: () => pb({ data: [{ ...pbDatum(), modelInputSpans: [pbSpan('promptTokens', 0, 2)] }] }),
    headers: PROTOBUF,
    status: 400,
    field: 'data.0.model_input_spans',
    error: /must tile the datum's 3/,
  },
  {
    name: 'a provenance span naming a sequence never issued',
    path: 'forward_backward',
    body: () =>
      pb({
        data: [{ ...pbDatum(), modelInputSpans: [pbSpan('sampledTokens', 0, 3, `${'f'.repeat(32)}:0`)] }],
      }),
    headers: PROTOBUF,
    status: 400,
    field: 'data.0.model_input_spans.0.sequence_id',
    error: /names no sampled sequence issued to this tenant/,
  },
  {
    name: 'a sampled provenance span past max_tokens',
    path: 'forward_backward',
    body: () => pb({ data: [{ ...pbDatum(), modelInputSpans: [pbSpan('sampledTokens', 2, 3)] }] }),
    headers: PROTOBUF,
    status: 400,
    field: 'data.0.model_input_spans.0.length',
    error: /runs past the sequence's 4 max_tokens/,
  },
  {
    name: 'loss_fn_config_v2 text where ppo needs a number',
    path: 'forward_backward',
    body: () =>
      pb({
        lossFn: 'ppo',
        data: [
          pbDatum([1, 2, 3], { logprobs: float32Tensor([-1, -1, -1]), advantages: float32Tensor([1, 0, 1]) }),
        ],
        lossFnConfigV2: { clip_low_threshold: { value: { case: 'text', value: 'low' } } },
      }),
    headers: PROTOBUF,
    status: 400,
    field: 'loss_fn_config.clip_low_threshold',
    error: /must be a number .*got the string "low"/,
  },
  {
    name: 'loss_fn_config_v2 entry with neither number nor text',
    path: 'forward_backward',
    body: () => pb({ lossFnConfigV2: { beta: {} } }),
    headers: PROTOBUF,
    status: 400,
    field: 'loss_fn_config_v2.beta',
    error: /has neither number nor text/,
  },
  {
    name: 'loss_fn_config_v2 NaN',
    path: 'forward_backward',
    body: () => pb({ lossFnConfigV2: { beta: { value: { case: 'number', value: Number.NaN } } } }),
    headers: PROTOBUF,
    status: 400,
    field: 'loss_fn_config_v2.beta',
    error: /must be a finite number/,
  },
  {
    name: 'loss_fn_config_v2 key cross_entropy does not take',
    path: 'forward_backward',
    body: () => pb({ lossFnConfigV2: { mode: { value: { case: 'text', value: 'strict' } } } }),
    headers: PROTOBUF,
    status: 400,
    field: 'loss_fn_config.mode',
    error: /not a config key of loss_fn cross_entropy/,
  },
];

/** Keys stand in the table as words; the real ones are only known once the fixture ran. */
function realHeaders(given: BadRequest['headers']): BadRequest['headers'] {
  if (given === undefined) return undefined;
  const swap = (value: string) =>
    value
      .replace('KEY', ownerKey)
      .replace('CASE', ownerKey.toUpperCase())
      .replace('LONGER', `${ownerKey}x`)
      .replace('OWNER', ownerKey)
      .replace('RIVAL', rivalKey);
  return Object.fromEntries(
    Object.entries(given).map(([name, value]) => [
      name,
      value === null ? null : Array.isArray(value) ? value.map(swap) : swap(value),
    ]),
  );
}

/** The listings' query parameters (C1): each bad one is a 400 naming it; unknown ids are 404s. */
const listings: BadRequest[] = [
  ...(
    [
      ['training_runs?limit=0', 'limit'],
      ['training_runs?limit=1001', 'limit'],
      ['training_runs?limit=abc', 'limit'],
      ['training_runs?offset=-1', 'offset'],
      ['training_runs?access_scope=everyone', 'access_scope'],
      ['checkpoints?limit=1.5', 'limit'],
      ['checkpoints?limit=10&limit=20', 'limit'],
      ['checkpoints?offset=%2B1', 'offset'],
      ['sessions?offset=1e3', 'offset'],
      ['sessions?access_scope=', 'access_scope'],
      ['sessions?limit=', 'limit'],
      ['sessions/<session>?access_scope=all', 'access_scope'],
      ['training_runs/<model>?access_scope=public', 'access_scope'],
    ] as const
  ).map(
    ([path, field]): BadRequest => ({
      name: `GET ${path}`,
      method: 'GET',
      path,
      status: 400,
      field,
      error: new RegExp(`^${field}: `),
    }),
  ),
  {
    name: 'GET training_runs/ of an unknown run',
    method: 'GET',
    path: 'training_runs/model-nobody',
    status: 404,
    field: 'run_id',
    error: /training run model-nobody not found/,
  },
  {
    name: 'GET the checkpoints of an unknown run',
    method: 'GET',
    path: 'training_runs/model-nobody/checkpoints',
    status: 404,
    field: 'run_id',
    error: /training run model-nobody not found/,
  },
  {
    name: 'GET sessions/ of an unknown session',
    method: 'GET',
    path: 'sessions/sess-nobody',
    status: 404,
    field: 'session_id',
    error: /session sess-nobody not found/,
  },
  { name: 'POST training_runs', path: 'training_runs', body: () => ({}), status: 405, error: /use GET/ },
  { name: 'DELETE sessions/{id}', method: 'DELETE', path: 'sessions/x', status: 405, error: /use GET/ },
];

/**
 * What SDK releases after 0.25.0 send beside the 0.25 routes: session futures (W9), session finish,
 * copy_weights, optimizer configs. Refused ones store nothing, as everywhere.
 */
const newer: BadRequest[] = [
  {
    name: 'retrieve_futures without a target',
    path: 'retrieve_futures',
    body: () => ({ prev_cursor: 0 }),
    status: 400,
    field: 'target',
    error: /target/,
  },
  {
    name: 'retrieve_futures of another target type',
    path: 'retrieve_futures',
    body: () => ({ target: { type: 'model', sampling_session_id: ids.samplingSession } }),
    status: 400,
    field: 'target.type',
    error: /must be sampling_session/,
  },
  {
    name: 'retrieve_futures with a negative cursor',
    path: 'retrieve_futures',
    body: () => ({ target: { sampling_session_id: ids.samplingSession }, prev_cursor: -1 }),
    status: 400,
    field: 'prev_cursor',
    error: /prev_cursor/,
  },
  {
    name: 'retrieve_futures with a fractional cursor',
    path: 'retrieve_futures',
    body: () => ({ target: { sampling_session_id: ids.samplingSession }, prev_cursor: 1.5 }),
    status: 400,
    field: 'prev_cursor',
    error: /prev_cursor/,
  },
  {
    name: 'retrieve_futures with a cursor past any log',
    path: 'retrieve_futures',
    body: () => ({ target: { sampling_session_id: ids.samplingSession }, prev_cursor: 1e16 }),
    status: 400,
    field: 'prev_cursor',
    error: /prev_cursor/,
  },
  {
    name: 'retrieve_futures with a negative clone',
    path: 'retrieve_futures',
    body: () => ({ target: { sampling_session_id: ids.samplingSession, cloned_sampler_id: -1 } }),
    status: 400,
    field: 'target.cloned_sampler_id',
    error: /cloned_sampler_id/,
  },
  {
    name: 'retrieve_futures of an unknown sampling session',
    path: 'retrieve_futures',
    body: () => ({ target: { sampling_session_id: 'samp-nobody' } }),
    status: 404,
    field: 'target.sampling_session_id',
    error: /samp-nobody not found/,
  },
  {
    name: 'retrieve_futures with an id outside the alphabet',
    path: 'retrieve_futures',
    body: () => ({ target: { sampling_session_id: 'a#b' } }),
    status: 400,
    field: 'target.sampling_session_id',
    error: /must be an id/,
  },
  {
    name: 'join_sampling_session without an id',
    path: 'join_sampling_session',
    body: () => ({}),
    status: 400,
    field: 'sampling_session_id',
    error: /sampling_session_id/,
  },
  {
    name: 'join_sampling_session of an unknown sampling session',
    path: 'join_sampling_session',
    body: () => ({ sampling_session_id: 'samp-nobody' }),
    status: 404,
    field: 'sampling_session_id',
    error: /not found/,
  },
  {
    name: 'cancel_future without a request id',
    path: 'cancel_future',
    body: () => ({}),
    status: 400,
    field: 'request_id',
    error: /request_id/,
  },
  {
    name: 'cancel_future of an unknown future',
    path: 'cancel_future',
    body: () => ({ request_id: '0'.repeat(32) }),
    status: 404,
    field: 'request_id',
    error: /not found/,
  },
  {
    name: 'cancel_future of a malformed id',
    path: 'cancel_future',
    body: () => ({ request_id: 'x/../y' }),
    status: 404,
    field: 'request_id',
    error: /not found/,
  },
  {
    name: 'finish with an unknown reason',
    path: 'sessions/<session>/finish',
    body: () => ({ reason: { type: 'bored' } }),
    status: 400,
    field: 'reason.type',
    error: /success, errored or interrupted/,
  },
  {
    name: 'finish without a reason',
    path: 'sessions/<session>/finish',
    body: () => ({ detail: null }),
    status: 400,
    field: 'reason',
    error: /reason/,
  },
  {
    name: 'finish of an unknown session',
    path: 'sessions/sess-nobody/finish',
    body: () => ({ reason: { type: 'success' } }),
    status: 404,
    field: 'session_id',
    error: /not found/,
  },
  { name: 'GET finish', method: 'GET', path: 'sessions/<session>/finish', status: 405, error: /use POST/ },
  {
    name: 'copy_weights without a source',
    path: 'copy_weights',
    body: () => ({ session_id: ids.session, model_seq_id: 7 }),
    status: 400,
    field: 'source_path',
    error: /source_path/,
  },
  {
    name: 'copy_weights of an unknown checkpoint',
    path: 'copy_weights',
    body: () => ({
      session_id: ids.session,
      model_seq_id: 7,
      source_path: `tinker://${ids.model}/weights/none`,
    }),
    status: 404,
    field: 'source_path',
    error: /not found/,
  },
  {
    name: 'copy_weights of a checkpoint not saved yet',
    path: 'copy_weights',
    body: () => ({
      session_id: ids.session,
      model_seq_id: 7,
      source_path: `tinker://${ids.model}/weights/taken`,
    }),
    status: 408,
    field: 'source_path',
    error: /not saved yet/,
  },
  {
    name: 'copy_weights with a TTL of 0',
    path: 'copy_weights',
    body: () => ({
      session_id: ids.session,
      model_seq_id: 7,
      source_path: `tinker://${ids.model}/weights/taken`,
      ttl_seconds: 0,
    }),
    status: 400,
    field: 'ttl_seconds',
    error: /seconds/,
  },
  {
    name: 'copy_weights with an access token',
    path: 'copy_weights',
    body: () => ({
      session_id: ids.session,
      model_seq_id: 7,
      source_path: `tinker://${ids.model}/weights/taken`,
      weights_access_token: 't',
    }),
    status: 400,
    field: 'weights_access_token',
    error: /not offered/,
  },
  {
    name: 'create_model with dimuon',
    path: 'create_model',
    body: () => ({
      session_id: ids.session,
      model_seq_id: 9,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 4 },
      optimizer_config: { type: 'dimuon', version: 1 },
    }),
    status: 400,
    field: 'optimizer_config.type',
    error: /"dimuon" is not offered by this server; supported: adamw/,
  },
  {
    name: 'create_model with an optimizer type that is not a string',
    path: 'create_model',
    body: () => ({
      session_id: ids.session,
      model_seq_id: 9,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 4 },
      optimizer_config: { type: 1 },
    }),
    status: 400,
    field: 'optimizer_config.type',
    error: /expected string/,
  },
  {
    name: 'optim_step with dimuon params',
    path: 'optim_step',
    body: () => ({
      model_id: ids.model,
      seq_id: 20,
      optimizer_params: { type: 'dimuon', learning_rate: 0.1, grad_clip_norm: 0, beta1: 0.9 },
    }),
    status: 400,
    field: 'optimizer_params.type',
    error: /not offered/,
  },
  {
    name: 'optim_step with neither adam_params nor optimizer_params',
    path: 'optim_step',
    body: () => ({ model_id: ids.model, seq_id: 20 }),
    status: 400,
    field: 'adam_params',
    error: /exactly one of adam_params and optimizer_params/,
  },
];

describe.each([
  ['JSON syntax', syntax],
  ['wrong types', types],
  ['numbers', numbers],
  ['loss functions', losses],
  ['SDK 0.26+ fields', newerFields],
  ['unicode and control characters', text],
  ['deep nesting', nesting],
  ['sizes', sizes],
  ['replayed seq_ids with other payloads', replays],
  ['headers and content types', headers],
  ['paths and methods', routes],
  ['read endpoints', reads],
  ['listings', listings],
  ['routes of SDK releases after 0.25', newer],
] as const)('%s', (_group, cases) => {
  it.each(cases)('$name -> $status', (testCase) => checkRefused(testCase));
});

describe('protobuf and zstd bodies of forward_backward', () => {
  it.each(protobuf)('$name -> $status', (testCase) => checkRefused(testCase, { namesField: true }));
});

/**
 * Sends the case and checks its answer and that nothing was stored; `namesField`: the message also
 * names the field (`<field>: <problem>`, or `seq_id 1 of model ...` for a replay).
 */
async function checkRefused(testCase: BadRequest, options: { namesField?: boolean } = {}): Promise<void> {
  const before: Counts = await api.counts();
  const raw = testCase.body?.();
  const body =
    raw === undefined || typeof raw === 'string' || Buffer.isBuffer(raw) ? raw : JSON.stringify(raw);
  const named = testCase.path.replace('<session>', ids.session).replace('<model>', ids.model);
  const path = named.startsWith('/') ? named : `/api/v1/${named}`;
  const answer = await send(testCase.method ?? 'POST', path, body, realHeaders(testCase.headers));
  expect(answer.status).toBe(testCase.status);
  const error = answer.body as { error?: unknown; field?: unknown };
  expect(typeof error.error).toBe('string');
  expect(error.error).toMatch(testCase.error);
  if (testCase.field !== undefined) expect(error.field).toBe(testCase.field);
  if (options.namesField === true) {
    expect(testCase.field).toBeDefined();
    expect(error.error as string).toContain(testCase.field);
  }
  expect(await api.counts()).toEqual(before);
}

describe('the protobuf wire answers as the JSON one', () => {
  it('an unknown model: the same 404 on both wires, and on zstd', async () => {
    const before = await api.counts();
    const json = await send(
      'POST',
      '/api/v1/forward_backward',
      JSON.stringify(fb({ model_id: 'model-nobody' })),
    );
    expect(json.status).toBe(404);
    expect(json.body).toMatchObject({ field: 'model_id', error: expect.stringMatching(/model-nobody/) });
    const bytes = pb({ modelId: 'model-nobody' });
    expect(await send('POST', '/api/v1/forward_backward', bytes, PROTOBUF)).toEqual(json);
    expect(await send('POST', '/api/v1/forward_backward', zstd(bytes), ZSTD)).toEqual(json);
    expect(await api.counts()).toEqual(before);
  });

  it("another tenant's model: the same 404 as an unknown one, on both wires", async () => {
    const before = await api.counts();
    const json = await send('POST', '/api/v1/forward_backward', JSON.stringify(fb()), {
      'x-api-key': rivalKey,
    });
    expect(json.status).toBe(404);
    expect(
      await send('POST', '/api/v1/forward_backward', pb(), { ...PROTOBUF, 'x-api-key': rivalKey }),
    ).toEqual(json);
    expect(await api.counts()).toEqual(before);
  });

  it.each([
    ['no key', { 'x-api-key': null }, 401],
    ['an empty key', { 'x-api-key': '' }, 401],
    ['a wrong key', { 'x-api-key': 'tml-unknownunknownunknownunknown' }, 401],
    ['an operator key', { 'x-api-key': 'OPERATOR' }, 403],
  ] as const)(
    '%s: the JSON answer, before any body is read (a bomb included)',
    async (_name, key, status) => {
      const headers = { 'x-api-key': key['x-api-key'] === 'OPERATOR' ? operatorKey : key['x-api-key'] };
      const before = await api.counts();
      const json = await send('POST', '/api/v1/forward_backward', JSON.stringify(fb()), headers);
      expect(json.status).toBe(status);
      expect(typeof (json.body as { error?: unknown }).error).toBe('string');
      for (const [body, wire] of [
        [pb(), PROTOBUF],
        [zstd(pb()), ZSTD],
        [Buffer.from(fixtureBytes('bomb-streamed.zst')), ZSTD],
        [Buffer.from([0xff, 0xfe, 0x00]), PROTOBUF],
      ] as const) {
        expect(await send('POST', '/api/v1/forward_backward', body, { ...wire, ...headers })).toEqual(json);
      }
      expect(await api.counts()).toEqual(before);
    },
  );
});

describe('the edges of the table', () => {
  it('HEAD on a POST route is refused without a body, and stores nothing', async () => {
    const before = await api.counts();
    const answer = await send('HEAD', '/api/v1/create_session', undefined);
    expect(answer.status).toBe(405);
    expect(await api.counts()).toEqual(before);
  });

  it('the fixture is intact: the model takes its next step and every replay above was refused', async () => {
    const next = await owner.raw('POST', '/api/v1/optim_step', {
      model_id: ids.model,
      seq_id: 6,
      adam_params: {},
    });
    expect(next.status).toBe(200);
    const retry = await owner.raw('POST', '/api/v1/optim_step', {
      model_id: ids.model,
      seq_id: 3,
      adam_params: { learning_rate: 0.001 },
    });
    expect(retry.status).toBe(200);
  });
});

describe('after the table (these are accepted, and move the model on)', () => {
  it('a valid body passes on both encodings (the rows above fail only for their own reason)', async () => {
    const before = await api.counts();
    const raw = await send('POST', '/api/v1/forward_backward', pb({ seqId: 20 }), PROTOBUF);
    expect(raw.status).toBe(200);
    const compressed = await send('POST', '/api/v1/forward_backward', zstd(pb({ seqId: 21 })), ZSTD);
    expect(compressed.status).toBe(200);
    // A retry of either is its original future, whatever the encoding.
    expect(await send('POST', '/api/v1/forward_backward', zstd(pb({ seqId: 20 })), ZSTD)).toEqual(raw);
    expect(await send('POST', '/api/v1/forward_backward', pb({ seqId: 21 }), PROTOBUF)).toEqual(compressed);
    const after = await api.counts();
    expect(after.futures).toBe(before.futures + 2);
    expect(after.objects).toBe(before.objects + 2);
  });

  it('a zstd body padded with skippable frames is accepted, and stores no more than it holds', async () => {
    const keys = async () =>
      new Map(
        (
          (await api.cloud.clients.s3.send(new ListObjectsV2Command({ Bucket: api.cloud.names.bucket })))
            .Contents ?? []
        ).map((object) => [object.Key, object.Size ?? 0]),
      );
    const padding = new Uint8Array(8 + 4 * MAX_BODY_BYTES);
    new DataView(padding.buffer).setUint32(0, 0x184d2a50, true);
    new DataView(padding.buffer).setUint32(4, 4 * MAX_BODY_BYTES, true);
    const before = await keys();
    const answer = await send(
      'POST',
      '/api/v1/forward_backward',
      Buffer.concat([padding, zstd(pb({ seqId: 40 }))]),
      ZSTD,
    );
    expect(answer.status).toBe(200);
    const added = [...(await keys())].filter(([name]) => !before.has(name));
    expect(added).toHaveLength(1);
    expect(added[0]?.[1]).toBeLessThan(pb().length);
  });

  it('a sparse tensor within the limit is accepted', async () => {
    const answer = await send(
      'POST',
      '/api/v1/forward_backward',
      pb({
        seqId: 41,
        data: [
          pbDatum([1, 2, 3], {
            // 2-D targets to match the sparse [3, 2] weights (a top-k distillation datum).
            target_tokens: { ...int64Tensor([2, 3, 4, 5, 6, 7]), shape: [3n, 2n] },
            weights: csr([0, 1, 1, 2], [0, 1]),
          }),
        ],
      }),
      PROTOBUF,
    );
    expect(answer.status).toBe(200);
  });
});
