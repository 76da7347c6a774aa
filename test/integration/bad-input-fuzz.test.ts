import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { registryKey } from '../../shared/domain/records.js';
import { type ApiHarness, startApiHarness } from './api-harness.js';

/**
 * A fuzzer over real HTTP: valid request bodies as the Tinker SDK sends them, mutated by dropping,
 * replacing or retyping members anywhere in them (and sometimes by breaking the JSON text). Whatever
 * comes out, the API answers below 500; a 4xx carries a message and leaves every table and the bucket
 * exactly as they were. Bounded: a fixed seed, 200 runs, under a minute.
 */

const RUNS = 200;
const SEED = 20_261_129;
const TIME_LIMIT_MS = 45_000;

let api: ApiHarness;
let client: TinkerClient;
const ids = { session: '', model: '', samplingSession: '', future: '' };

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

/** Valid bodies per endpoint (for run `n`), with the members and `type` tags the SDK (<= 0.24.1) sends. */
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
  retrieve_future: () => ({ request_id: ids.future, allow_metadata_only: false }),
  get_info: () => ({ model_id: ids.model, type: 'get_info' }),
  weights_info: () => ({ tinker_path: `tinker://${ids.model}/weights/base-ckpt` }),
  telemetry: () => ({ events: [{ event: 'GENERIC_EVENT', severity: 'INFO' }], platform: 'linux' }),
};
const ENDPOINTS = Object.keys(VALID);

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
  ({ client } = await api.tenant('fuzz'));
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
});

afterAll(async () => {
  await api?.stop();
});

describe('fuzzed SDK bodies', () => {
  it('every unmutated body is accepted (the fuzzer starts from valid requests)', async () => {
    for (const endpoint of ENDPOINTS) {
      const answer = await client.raw('POST', `/api/v1/${endpoint}`, VALID[endpoint]!(0));
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
          const answer = await client.raw('POST', `/api/v1/${endpoint}`, text);
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
