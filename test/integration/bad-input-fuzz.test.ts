import { PutObjectCommand } from '@aws-sdk/client-s3';
import { GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { compress, init as initZstd } from '@bokuweb/zstd-wasm';
import { create, toBinary } from '@bufbuild/protobuf';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import {
  type CheckpointNameRecord,
  registryKey,
  type SeqCounterRecord,
} from '../../shared/domain/records.js';
import { checkpointObjectKeys } from '../../shared/repositories/checkpoints/names.js';
import { DType, ForwardBackwardRequestSchema } from '../../shared/wire/gen/tinker_public_pb.js';
import { type ApiHarness, type Counts, startApiHarness } from '../support/api-harness.js';
import { fixtureBytes } from '../support/wire/fixtures.js';
import {
  emptyProtobufChunks,
  emptyProtobufDatums,
  emptyZstdFrames,
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
} from '../support/wire/requests.js';

/**
 * A fuzzer over real HTTP: valid request bodies as the Tinker SDK sends them, mutated by dropping,
 * replacing or retyping members anywhere in them (and sometimes by breaking the JSON text). Whatever
 * comes out, the API answers below 500; a 4xx carries a message and leaves every table and the bucket
 * exactly as they were. Bounded: a fixed seed, 200 runs, under a minute. Then the same for the
 * protobuf wire of forward_backward (W1, W3): valid `ForwardBackwardRequest` bodies and random bytes,
 * bit-flipped, cut, spliced and given extra fields, raw or zstd-compressed, under random
 * Content-Encoding headers, with issue 25's repros (many empty datums, chunks or 8 MiB-window zstd
 * frames, shapes of high rank) among the mutations; 300 runs, under 45 s.
 */

const RUNS = 200;
const SEED = 20_261_129;
const TIME_LIMIT_MS = 45_000;

let api: ApiHarness;
let client: TinkerClient;
let apiKey = '';
const ids = { session: '', model: '', samplingSession: '', future: '', sample: '', sequence: '' };

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

const datum = (): Json => ({
  model_input: { chunks: [{ type: 'encoded_text', tokens: [5, 6, 7] }] },
  loss_fn_inputs: {
    target_tokens: { data: [6, 7, 8], dtype: 'int64', shape: [3] },
    weights: { data: [1, 1, 0.5], dtype: 'float32', shape: [3] },
  },
});

/**
 * Sequence numbers of run `n`: fresh per run, so a mutation that keeps a body valid is accepted and
 * stored (rather than refused as a replay), and above any number a mutation puts in (2^53 + 2 is
 * refused), so no accepted run blocks the ones after it.
 */
const fresh = (n: number, step = 0) => 2 ** 40 + n * 16 + step;

/**
 * Valid bodies per endpoint (for run `n`), with the members and `type` tags the SDK (<= 0.24.1) sends;
 * `#newer` entries as SDK 0.26+ sends them (W8).
 */
const VALID: Record<string, (n: number) => Json> = {
  create_session: () => ({
    tags: ['fuzz'],
    user_metadata: { run: 'x' },
    sdk_version: '0.24.1',
    type: 'create_session',
  }),
  session_heartbeat: () => ({ session_id: ids.session, type: 'session_heartbeat' }),
  create_model: (n) => ({
    session_id: ids.session,
    model_seq_id: fresh(n),
    base_model: 'reference/byte-lm',
    lora_config: { rank: 4, seed: 3, train_unembed: true, train_mlp: true, train_attn: true },
    user_metadata: null,
    optimizer_config: { type: 'adamw' },
    type: 'create_model',
  }),
  forward_backward: (n) => ({
    model_id: ids.model,
    seq_id: fresh(n, 1),
    forward_backward_input: { data: [datum()], loss_fn: 'cross_entropy', loss_fn_config: null },
    type: 'forward_backward',
  }),
  forward: (n) => ({
    model_id: ids.model,
    seq_id: fresh(n, 2),
    forward_input: { data: [datum()], loss_fn: 'cross_entropy', loss_fn_config: null },
    type: 'forward',
  }),
  optim_step: (n) => ({
    model_id: ids.model,
    seq_id: fresh(n, 3),
    adam_params: {
      learning_rate: 0.001,
      beta1: 0.9,
      beta2: 0.95,
      eps: 1e-12,
      weight_decay: 0,
      grad_clip_norm: 0,
    },
    type: 'optim_step',
  }),
  save_weights: (n) => ({
    model_id: ids.model,
    seq_id: fresh(n, 4),
    path: `fuzz-${n}`,
    type: 'save_weights',
  }),
  save_weights_for_sampler: (n) => ({
    model_id: ids.model,
    seq_id: fresh(n, 5),
    path: null,
    sampling_session_seq_id: n,
    type: 'save_weights_for_sampler',
  }),
  load_weights: (n) => ({
    model_id: ids.model,
    seq_id: fresh(n, 6),
    path: `tinker://${ids.model}/weights/base-ckpt`,
    optimizer: false,
    type: 'load_weights',
  }),
  create_sampling_session: (n) => ({
    session_id: ids.session,
    sampling_session_seq_id: fresh(n),
    base_model: 'reference/byte-lm',
    model_path: null,
    type: 'create_sampling_session',
  }),
  asample: (n) => ({
    sampling_session_id: ids.samplingSession,
    seq_id: fresh(n),
    num_samples: 1,
    prompt: { chunks: [{ type: 'encoded_text', tokens: [1, 2, 3] }] },
    sampling_params: { max_tokens: 4, temperature: 0.7, top_k: -1, top_p: 1, seed: null, stop: null },
    prompt_logprobs: false,
    topk_prompt_logprobs: 0,
    type: 'sample',
  }),
  // What SDK 0.26+ adds (W8): the newer sampling outputs, and spans naming a sampled sequence.
  'asample#newer': (n) => ({
    sampling_session_id: ids.samplingSession,
    seq_id: fresh(n, 1),
    num_samples: 1,
    prompt: { chunks: [{ type: 'encoded_text', tokens: [1, 2, 3] }] },
    sampling_params: { max_tokens: 4, temperature: 0.7, top_k: -1, top_p: 1, seed: 5, stop: null },
    prompt_logprobs: false,
    topk_prompt_logprobs: 0,
    topk_sample_logprobs: 2,
    prompt_alt_tokens_k: 2,
    record_stability_info: false,
    target_prompt_logprobs: { data: [2, -1, 3, 4], dtype: 'int64', shape: [2, 2] },
    type: 'sample',
  }),
  'forward_backward#newer': (n) => ({
    model_id: ids.model,
    seq_id: fresh(n, 7),
    forward_backward_input: {
      data: [
        {
          ...(datum() as Record<string, Json>),
          model_input_spans: [
            { type: 'prompt_tokens', sequence_id: ids.sequence, offset: 0, length: 2 },
            { type: 'sampled_tokens', sequence_id: ids.sequence, offset: 0, length: 1 },
          ],
          loss_fn_input_spans: [{ type: 'sampled_tokens', sequence_id: ids.sequence, offset: 1, length: 3 }],
        },
      ],
      loss_fn: 'cross_entropy',
      loss_fn_config: null,
    },
    type: 'forward_backward',
  }),
  retrieve_future: () => ({ request_id: ids.future, allow_metadata_only: false }),
  // What SDK releases after 0.25.0 add (W9, copy_weights).
  retrieve_futures: () => ({
    target: { type: 'sampling_session', sampling_session_id: ids.samplingSession, cloned_sampler_id: 0 },
    prev_cursor: 0,
  }),
  join_sampling_session: () => ({ sampling_session_id: ids.samplingSession, type: 'join_sampling_session' }),
  cancel_future: () => ({ request_id: ids.sample }),
  copy_weights: (n) => ({
    session_id: ids.session,
    model_seq_id: fresh(n, 7),
    source_path: `tinker://${ids.model}/weights/base-ckpt`,
    ttl_seconds: 7200,
  }),
  get_info: () => ({ model_id: ids.model, type: 'get_info' }),
  weights_info: () => ({ tinker_path: `tinker://${ids.model}/weights/base-ckpt` }),
  telemetry: () => ({ events: [{ event: 'GENERIC_EVENT', severity: 'INFO' }], platform: 'linux' }),
};
const ENDPOINTS = Object.keys(VALID);
/** The route of a VALID entry (`asample#newer` is asample). */
const routeOf = (endpoint: string) => endpoint.split('#')[0] as string;

type Path = (string | number)[];

/** Every member's path (object keys and array indexes), the root excluded. */
function pathsOf(value: Json, prefix: Path = []): Path[] {
  if (Array.isArray(value)) {
    return value.flatMap((member, index) => [[...prefix, index], ...pathsOf(member, [...prefix, index])]);
  }
  if (value !== null && typeof value === 'object') {
    return Object.entries(value).flatMap(([key, member]) => [
      [...prefix, key],
      ...pathsOf(member, [...prefix, key]),
    ]);
  }
  return [];
}

/** Applies `change` to the member at `path` of a copy: it returns the new member, or undefined to drop it. */
function edit(value: Json, path: Path, change: (member: Json) => Json | undefined): Json {
  const copy = structuredClone(value);
  let parent: Json = copy;
  for (const step of path.slice(0, -1)) parent = (parent as Record<string | number, Json>)[step] as Json;
  const last = path.at(-1)!;
  const container = parent as Record<string | number, Json>;
  const next = change(container[last] as Json);
  if (next !== undefined) container[last] = next;
  else if (Array.isArray(parent)) parent.splice(last as number, 1);
  else delete container[last];
  return copy;
}

function retype(member: Json): Json {
  if (typeof member === 'number') return String(member);
  if (typeof member === 'string') return Number.isNaN(Number(member)) ? member.length : Number(member);
  if (typeof member === 'boolean') return String(member);
  if (member === null) return {};
  if (Array.isArray(member)) return Object.fromEntries(member.map((item, index) => [String(index), item]));
  return Object.values(member);
}

function nest(depth: number, inObjects: boolean): Json {
  let value: Json = 1;
  for (let level = 0; level < depth; level++) value = inObjects ? { a: value } : [value];
  return value;
}

/** Values that break parsers, validators and DynamoDB: edge numbers, odd strings, nesting, JSON at large. */
const strangeValue: fc.Arbitrary<Json> = fc.oneof(
  fc.constantFrom<Json>(-1, 0, 0.5, 1.5, 2 ** 31, 2 ** 53 + 2, 1e308, -1e308, 5e-324, 1e-200, 1e200),
  fc.constantFrom<Json>(
    '',
    'NaN',
    'Infinity',
    '1e999',
    '\u0000',
    '\u202e',
    '\ud800',
    '😀',
    '../../etc/passwd',
    'tinker://model-0/weights/x',
    'x'.repeat(300),
    '__proto__',
    'constructor',
  ),
  fc.constantFrom<Json>([], {}, null, true, false),
  // Issue 25: long arrays of bad elements (validation stops at the first), shapes of rank 3 and more.
  fc.constantFrom<Json>(Array(3_000).fill({}), Array(3_000).fill('x'), [4, 1, 1], shapeOfRank(2_000, 3)),
  fc.string({ unit: 'binary', maxLength: 12 }),
  fc.jsonValue({ maxDepth: 3 }) as fc.Arbitrary<Json>,
  fc
    .tuple(fc.integer({ min: 10, max: 60 }), fc.boolean())
    .map(([depth, inObjects]) => nest(depth, inObjects)),
);

interface Mutation {
  readonly pick: number;
  readonly action: 'drop' | 'replace' | 'retype';
  readonly value: Json;
}

const mutation: fc.Arbitrary<Mutation> = fc.record({
  pick: fc.nat(),
  action: fc.constantFrom('drop', 'replace', 'retype'),
  value: strangeValue,
});

/** Sometimes the text itself breaks: cut short, or a character slipped in. */
const textDamage = fc.oneof(
  { arbitrary: fc.constant(null), weight: 5 },
  {
    arbitrary: fc.record({
      at: fc.nat(),
      cut: fc.boolean(),
      insert: fc.constantFrom('"', ',', '}', ']', '\\', 'x', '\u0000'),
    }),
    weight: 1,
  },
);

function mutate(body: Json, mutations: readonly Mutation[]): Json {
  let current = body;
  for (const { pick, action, value } of mutations) {
    const paths = pathsOf(current);
    if (paths.length === 0) return action === 'retype' ? retype(current) : value;
    const path = paths[pick % paths.length]!;
    current = edit(current, path, (member) =>
      action === 'drop' ? undefined : action === 'replace' ? value : retype(member),
    );
  }
  return current;
}

beforeAll(async () => {
  api = await startApiHarness({ MAX_BODY_BYTES: String(16 * 1024) });
  await initZstd();
  ({ client, key: apiKey } = await api.tenant('fuzz'));
  ids.session = (await client.createSession()).session_id;
  const model = await client.createModel({
    session_id: ids.session,
    model_seq_id: 0,
    base_model: 'reference/byte-lm',
    lora_config: { rank: 4 },
  });
  ids.model = model.model_id;
  ids.future = model.request_id;
  await client.saveWeights({ model_id: ids.model, seq_id: 1, path: 'base-ckpt' });
  // Committed, as the worker's commit would, so weights_info answers 200 on the valid body.
  await api.cloud.clients.doc.send(
    new UpdateCommand({
      TableName: api.cloud.names.tables.registry,
      Key: { pk: registryKey.checkpointName(ids.model, 'weights', 'base-ckpt') },
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
  const sampled = await client.raw('POST', '/api/v1/asample', {
    sampling_session_id: ids.samplingSession,
    seq_id: 2 ** 50,
    prompt: { chunks: [{ tokens: [1, 2, 3] }] },
    sampling_params: { max_tokens: 4 },
  });
  ids.sequence = (sampled.body as { sample_sequence_ids: string[] }).sample_sequence_ids[0] as string;
  ids.sample = (
    await client.asample({
      sampling_session_id: ids.samplingSession,
      seq_id: 0,
      prompt: { chunks: [{ type: 'encoded_text', tokens: [1, 2] }] },
      sampling_params: { max_tokens: 2 },
    })
  ).request_id;
  // The checkpoint's blob, where its record says, for copy_weights to copy.
  const record = await api.cloud.clients.doc.send(
    new GetCommand({
      TableName: api.cloud.names.tables.registry,
      Key: { pk: registryKey.checkpointName(ids.model, 'weights', 'base-ckpt') },
      ConsistentRead: true,
    }),
  );
  await api.cloud.clients.s3.send(
    new PutObjectCommand({
      Bucket: api.cloud.names.bucket,
      // The record holds no blob_key (no commit ran): the copy reads the key the record names without one.
      Key: checkpointObjectKeys(record.Item as CheckpointNameRecord)[0] as string,
      Body: Buffer.from('blob'),
    }),
  );
});

afterAll(async () => {
  await api?.stop();
});

describe('fuzzed SDK bodies', () => {
  it('every unmutated body is accepted (the fuzzer starts from valid requests)', async () => {
    for (const endpoint of ENDPOINTS) {
      const answer = await client.raw('POST', `/api/v1/${routeOf(endpoint)}`, VALID[endpoint]!(0));
      expect(answer.status, endpoint).toBe(200);
    }
  });

  it(`${RUNS} mutated bodies: never a 5xx; every 4xx has a message and stores nothing`, async () => {
    const statuses = new Map<number, number>();
    const endpoints = new Set<string>();
    let runs = 0;
    let counts = await api.counts();
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...ENDPOINTS),
        fc.array(mutation, { minLength: 1, maxLength: 3 }),
        textDamage,
        async (endpoint, mutations, damage) => {
          runs++;
          endpoints.add(endpoint);
          let text = JSON.stringify(mutate(VALID[endpoint]!(runs + 1), mutations));
          if (damage !== null) {
            const at = damage.at % (text.length + 1);
            text = damage.cut ? text.slice(0, at) : `${text.slice(0, at)}${damage.insert}${text.slice(at)}`;
          }
          const answer = await client.raw('POST', `/api/v1/${routeOf(endpoint)}`, text);
          statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
          const after = await api.counts();
          const context = `${endpoint} ${text.slice(0, 300)} -> ${answer.status} ${JSON.stringify(answer.body)}`;
          expect(answer.status, context).toBeLessThan(500);
          if (answer.status >= 400) {
            const error = (answer.body as { error?: unknown } | undefined)?.error;
            expect(typeof error === 'string' && error.length > 0, context).toBe(true);
            expect(after, context).toEqual(counts);
          } else {
            expect(answer.status, context).toBe(200);
          }
          counts = after;
        },
      ),
      { numRuns: RUNS, seed: SEED, endOnFailure: true, interruptAfterTimeLimit: TIME_LIMIT_MS },
    );
    const rejected = [...statuses]
      .filter(([status]) => status >= 400)
      .reduce((sum, [, count]) => sum + count, 0);
    // Bounded by time on a loaded machine, but never vacuous: most runs happened and most were refused.
    expect(runs).toBeGreaterThanOrEqual(RUNS / 4);
    expect(rejected).toBeGreaterThan(runs / 2);
    expect(endpoints.size).toBeGreaterThanOrEqual(ENDPOINTS.length - 2);
    console.info(`fuzz: ${runs} runs, statuses ${JSON.stringify(Object.fromEntries(statuses))}`);
  }, 90_000);
});

const PB_RUNS = 300;
const PB_SEED = 20_261_201;
const PB_TIME_LIMIT_MS = 40_000;
/** Past this seq_id (int32 on the protobuf wire) the fuzz moves to a new model, so steps stay acceptable. */
const PB_SEQ_CEILING = 2 ** 31 - 2 ** 20;

/** The protobuf fuzz's own model and the next seq_id it has not used (see `nextSeq`). */
const pbModel = { id: '', next: 1, count: 0 };

async function newPbModel(): Promise<void> {
  // model_seq_ids above the JSON fuzz's (2^40 + runs x 16): never one a mutation made there.
  const model = await client.createModel({
    session_id: ids.session,
    model_seq_id: 2 ** 45 + pbModel.count++,
    base_model: 'reference/byte-lm',
    lora_config: { rank: 4 },
  });
  pbModel.id = model.model_id;
  pbModel.next = 1;
}

/**
 * A fresh seq_id for each run, so a mutation that keeps the body valid is accepted, not refused as a
 * replay. A mutation may set any int32 seq_id: after an accepted run the next one starts past the
 * model's last accepted seq_id, and past the ceiling on a new model.
 */
async function nextSeq(): Promise<number> {
  if (pbModel.next > PB_SEQ_CEILING) await newPbModel();
  return pbModel.next++;
}

async function afterAccepted(): Promise<void> {
  const counter = (
    await api.cloud.clients.doc.send(
      new GetCommand({
        TableName: api.cloud.names.tables.registry,
        Key: { pk: registryKey.seqCounter(pbModel.id) },
        ConsistentRead: true,
      }),
    )
  ).Item as SeqCounterRecord | undefined;
  pbModel.next = Math.max(pbModel.next, (counter?.last_seq_id ?? 0) + 1);
}

/** Valid protobuf bodies as the SDK 0.25 sends them (dense and CSR tensors, several loss functions), and 0.26+. */
const PB_VALID: ((seqId: number) => RequestInit)[] = [
  (seqId) => ({
    modelId: pbModel.id,
    seqId,
    data: [pbDatum([5, 6, 7], { weights: float32Tensor([1, 1, 0.5]) })],
  }),
  (seqId) => ({
    modelId: pbModel.id,
    seqId,
    lossFn: 'importance_sampling',
    data: [1, 2].map(() =>
      pbDatum([5, 6, 7, 8], {
        logprobs: float32Tensor([-1, -2, -3, -4]),
        advantages: float32Tensor([0.5, 0.5, -1, 0]),
      }),
    ),
  }),
  (seqId) => ({
    modelId: pbModel.id,
    seqId,
    data: [
      pbDatum([5, 6, 7], {
        // 2-D, as sparse tensors are: the targets take the weights' [3, 1] shape (one target per position).
        target_tokens: { ...int64Tensor([6, 7, 8]), shape: [3n, 1n] },
        weights: {
          encoding: {
            case: 'sparseCsr',
            value: {
              values: float32Bytes([1, 2]),
              crowIndices: int64Bytes([0, 1, 1, 2]),
              colIndices: int64Bytes([0, 0]),
            },
          },
          dtype: DType.DTYPE_FLOAT32,
          shape: [3n, 1n],
        },
      }),
    ],
  }),
  (seqId) => ({
    modelId: pbModel.id,
    seqId,
    forwardOnly: true,
    lossFn: 'ppo',
    lossFnConfig: { clip_low_threshold: 0.8 },
    data: [
      pbDatum([5, 6, 7], { logprobs: float32Tensor([-1, -2, -3]), advantages: float32Tensor([1, 0, -1]) }),
    ],
  }),
  // As SDK 0.26+ sends an RL step (W8): spans naming a sampled sequence, numbers in both configs.
  (seqId) => ({
    modelId: pbModel.id,
    seqId,
    lossFn: 'ppo',
    lossFnConfig: { clip_low_threshold: 0.8 },
    lossFnConfigV2: { clip_low_threshold: { value: { case: 'number', value: 0.8 } } },
    data: [
      {
        ...pbDatum([5, 6, 7], {
          logprobs: float32Tensor([-1, -2, -3]),
          advantages: float32Tensor([1, 0, -1]),
        }),
        modelInputSpans: [pbSpan('promptTokens', 0, 3)],
        lossFnInputSpans: [pbSpan('promptTokens', 1, 2), pbSpan('sampledTokens', 0, 1)],
      },
    ],
  }),
];

/** A ProvenanceSpan init naming the fuzz's sampled sequence (a 3-token prompt, max_tokens 4). */
const pbSpan = (arm: 'promptTokens' | 'sampledTokens', offset: number, length: number) => ({
  span: { case: arm, value: { sequenceId: ids.sequence, offset: BigInt(offset), length: BigInt(length) } },
});

/** Bytes of one more top-level field: appended to a message, protobuf merges it in (last one wins). */
const extraField: fc.Arbitrary<Uint8Array> = fc
  .oneof(
    fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }).map((seqId): RequestInit => ({ seqId })),
    fc
      .constantFrom('', 'model-nobody', 'a#b', '\u0000', 'x'.repeat(300))
      .map((modelId): RequestInit => ({ modelId })),
    fc.constantFrom('cross_entropy', 'ppo', 'dro', 'nope', '').map((lossFn): RequestInit => ({ lossFn })),
    fc.boolean().map((forwardOnly): RequestInit => ({ forwardOnly })),
    fc
      .tuple(fc.constantFrom('clip', 'clip_high_threshold', 'beta', '', '__proto__'), fc.double())
      .map(([name, value]): RequestInit => ({ lossFnConfig: { [name]: value } })),
    fc
      .tuple(
        fc.constantFrom('clip_low_threshold', 'beta', 'mode', '__proto__'),
        fc.oneof(
          fc.double().map((value) => ({ case: 'number' as const, value })),
          fc.string({ maxLength: 8 }).map((value) => ({ case: 'text' as const, value })),
        ),
      )
      .map(([name, value]): RequestInit => ({ lossFnConfigV2: { [name]: { value } } })),
    fc
      .tuple(
        fc.constantFrom('promptTokens' as const, 'sampledTokens' as const),
        fc.integer({ min: -1, max: 5 }),
        fc.integer({ min: 0, max: 5 }),
      )
      .map(
        ([arm, offset, length]): RequestInit => ({
          data: [{ ...pbDatum([5, 6, 7]), modelInputSpans: [pbSpan(arm, offset, length)] }],
        }),
      ),
    fc
      .constantFrom(
        pbDatum([1]),
        pbDatum([-1]),
        pbDatum([1, 2], { target_tokens: undefined }),
        pbDatum([1], { weights: { dtype: 99 as DType } }),
      )
      .map((datum): RequestInit => ({ data: [datum] })),
    fc.integer({ min: 2, max: 100_000 }).map(
      (rank): RequestInit => ({
        data: [pbDatum([1, 2], { target_tokens: int64Tensor([2, 3], shapeOfRank(rank, 2)) })],
      }),
    ),
  )
  .map((init) => toBinary(ForwardBackwardRequestSchema, create(ForwardBackwardRequestSchema, init)));

/** Issue 25's repros as fields to append: many empty datums or chunks (counted before decoding). */
const hostileField: fc.Arbitrary<Uint8Array> = fc.oneof(
  fc.integer({ min: 1, max: 12_000 }).map(emptyProtobufDatums),
  fc.integer({ min: 1, max: 6_000 }).map(emptyProtobufChunks),
);

type ByteMutation =
  | { kind: 'flip'; at: number[]; bit: number[] }
  | { kind: 'truncate'; at: number }
  | { kind: 'insert'; at: number; bytes: Uint8Array }
  | { kind: 'splice'; at: number; from: number; donor: number; length: number }
  | { kind: 'append'; field: Uint8Array };

const byteMutation: fc.Arbitrary<ByteMutation> = fc.oneof(
  fc.record({
    kind: fc.constant('flip' as const),
    at: fc.array(fc.nat(), { minLength: 1, maxLength: 4 }),
    bit: fc.array(fc.nat(7), { minLength: 4, maxLength: 4 }),
  }),
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({
    kind: fc.constant('insert' as const),
    at: fc.nat(),
    bytes: fc.uint8Array({ minLength: 1, maxLength: 12 }),
  }),
  fc.record({
    kind: fc.constant('splice' as const),
    at: fc.nat(),
    from: fc.nat(),
    donor: fc.nat(),
    length: fc.integer({ min: 1, max: 64 }),
  }),
  { arbitrary: fc.record({ kind: fc.constant('append' as const), field: extraField }), weight: 2 },
  fc.record({ kind: fc.constant('append' as const), field: hostileField }),
);

/** Bodies bytes are spliced from: SDK-made requests and zstd frames (a bomb's header included). */
const DONORS = ['cross-entropy-4', 'sparse-csr', 'image-chunk', 'cross-entropy-4.zst', 'bomb-declared.zst']
  .map(fixtureBytes)
  // Empty frames with 8 MiB windows (issue 25): splices repeat them.
  .concat([emptyZstdFrames(40)]);

function mutateBytes(base: Uint8Array, mutations: readonly ByteMutation[]): Uint8Array {
  let bytes = Uint8Array.from(base);
  for (const m of mutations) {
    const at = m.kind === 'flip' || m.kind === 'append' ? 0 : m.at % (bytes.length + 1);
    if (m.kind === 'flip') {
      if (bytes.length === 0) continue;
      m.at.forEach((index, i) => {
        const target = index % bytes.length;
        bytes[target] = (bytes[target] as number) ^ (1 << (m.bit[i] as number));
      });
    } else if (m.kind === 'truncate') {
      bytes = bytes.slice(0, at);
    } else if (m.kind === 'insert') {
      bytes = Uint8Array.from([...bytes.subarray(0, at), ...m.bytes, ...bytes.subarray(at)]);
    } else if (m.kind === 'splice') {
      const donor = DONORS[m.donor % DONORS.length] as Uint8Array;
      const from = m.from % (donor.length + 1);
      bytes = Uint8Array.from([
        ...bytes.subarray(0, at),
        ...donor.subarray(from, from + m.length),
        ...bytes.subarray(at),
      ]);
    } else {
      bytes = Uint8Array.from([...bytes, ...m.field]);
    }
  }
  return bytes;
}

interface PbCase {
  /** A valid body (index into PB_VALID) or random bytes. */
  readonly base: number | Uint8Array;
  readonly mutations: readonly ByteMutation[];
  /** raw: as mutated; zstd: mutated, then compressed; zstd-mutated: compressed, then mutated. */
  readonly packing: 'raw' | 'zstd' | 'zstd-mutated';
  /** The Content-Encoding sent: the one the packing calls for, or another at random. */
  readonly encoding: 'matching' | string | null;
}

const pbCase: fc.Arbitrary<PbCase> = fc.record({
  base: fc.oneof(
    { arbitrary: fc.nat(PB_VALID.length - 1), weight: 5 },
    { arbitrary: fc.uint8Array({ maxLength: 256 }), weight: 1 },
  ),
  mutations: fc.array(byteMutation, { minLength: 0, maxLength: 3 }),
  packing: fc.constantFrom('raw', 'zstd', 'zstd-mutated'),
  encoding: fc.oneof(
    { arbitrary: fc.constant('matching'), weight: 6 },
    {
      arbitrary: fc.constantFrom(null, 'identity', 'zstd', 'ZSTD', ' zstd', 'gzip', 'br', 'zstd, gzip', ''),
      weight: 2,
    },
  ),
});

function packed(testCase: PbCase, seqId: number): { body: Uint8Array; headers: Record<string, string> } {
  const base =
    typeof testCase.base === 'number' ? pbForwardBackward(PB_VALID[testCase.base]!(seqId)) : testCase.base;
  const body =
    testCase.packing === 'raw'
      ? mutateBytes(base, testCase.mutations)
      : testCase.packing === 'zstd'
        ? compress(mutateBytes(base, testCase.mutations), 3)
        : mutateBytes(compress(base, 3), testCase.mutations);
  const headers: Record<string, string> = { 'content-type': 'application/x-protobuf' };
  const encoding =
    testCase.encoding === 'matching' ? (testCase.packing === 'raw' ? null : 'zstd') : testCase.encoding;
  if (encoding !== null) headers['content-encoding'] = encoding;
  return { body, headers };
}

async function postProtobuf(
  body: Uint8Array,
  headers: Record<string, string>,
): Promise<{ status: number; body: unknown }> {
  const response = await fetch(`${api.url}/api/v1/forward_backward`, {
    method: 'POST',
    headers: { 'x-api-key': apiKey, ...headers },
    body,
  });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // Not JSON: the assertions will say so.
  }
  return { status: response.status, body: parsed };
}

const minus = (a: Counts, b: Counts) =>
  Object.fromEntries(Object.entries(a).map(([name, count]) => [name, count - b[name as keyof Counts]]));

describe('fuzzed protobuf bodies of forward_backward', () => {
  /** What one accepted step adds to the tables and the bucket. */
  let oneStep: Record<string, number> = {};
  /** Every future accepted so far: a mutation may rebuild one of their steps, a retry. */
  const futures = new Set<string>();

  beforeAll(async () => {
    await newPbModel();
  });

  it('every unmutated body is accepted, raw and zstd, each adding one future and its payload', async () => {
    for (const [index, build] of PB_VALID.entries()) {
      for (const zstd of [false, true]) {
        const before = await api.counts();
        const bytes = pbForwardBackward(build(await nextSeq()));
        const answer = await postProtobuf(
          zstd ? compress(bytes, 3) : bytes,
          zstd
            ? { 'content-type': 'application/x-protobuf', 'content-encoding': 'zstd' }
            : { 'content-type': 'application/x-protobuf' },
        );
        expect(answer.status, `${index} ${zstd} ${JSON.stringify(answer.body)}`).toBe(200);
        oneStep = minus(await api.counts(), before);
        futures.add((answer.body as { request_id: string }).request_id);
      }
    }
    expect(oneStep.futures).toBe(1);
    expect(oneStep.objects).toBe(1);
  });

  it(`${PB_RUNS} mutated bodies: never a 5xx; a 4xx has a message and stores nothing; a 200 is one new future`, async () => {
    const statuses = new Map<number, number>();
    let runs = 0;
    let counts = await api.counts();
    await fc.assert(
      fc.asyncProperty(pbCase, async (testCase) => {
        runs++;
        const model = pbModel.id;
        const { body, headers } = packed(testCase, await nextSeq());
        if (pbModel.id !== model) counts = await api.counts();
        const answer = await postProtobuf(body, headers);
        statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
        const after = await api.counts();
        const context = `${JSON.stringify(headers)} ${Buffer.from(body).toString('hex').slice(0, 400)} -> ${answer.status} ${JSON.stringify(answer.body)}`;
        expect(answer.status, context).toBeLessThan(500);
        if (answer.status >= 400) {
          const error = (answer.body as { error?: unknown } | undefined)?.error;
          expect(typeof error === 'string' && error.length > 0, context).toBe(true);
          expect(after, context).toEqual(counts);
        } else {
          expect(answer.status, context).toBe(200);
          const requestId = (answer.body as { request_id?: unknown }).request_id;
          expect(typeof requestId, context).toBe('string');
          // A new step adds exactly one future; a mutation that rebuilt an earlier step is its retry.
          const fresh = !futures.has(requestId as string);
          futures.add(requestId as string);
          expect(minus(after, counts), context).toEqual(
            fresh ? oneStep : Object.fromEntries(Object.keys(oneStep).map((name) => [name, 0])),
          );
          await afterAccepted();
        }
        counts = after;
      }),
      { numRuns: PB_RUNS, seed: PB_SEED, endOnFailure: true, interruptAfterTimeLimit: PB_TIME_LIMIT_MS },
    );
    const rejected = [...statuses]
      .filter(([status]) => status >= 400)
      .reduce((sum, [, count]) => sum + count, 0);
    expect(runs).toBeGreaterThanOrEqual(PB_RUNS / 4);
    expect(rejected).toBeGreaterThan(runs / 2);
    // Not vacuous the other way either: some mutations stay valid and are stored.
    expect(statuses.get(200) ?? 0).toBeGreaterThan(0);
    console.info(`protobuf fuzz: ${runs} runs, statuses ${JSON.stringify(Object.fromEntries(statuses))}`);
  }, 60_000);
});
