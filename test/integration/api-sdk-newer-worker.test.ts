import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWorkerHandler } from '../../functions/worker/handler.js';
import type { LocalRuntime } from '../../local/runtime/lambda-runtime.js';
import {
  type BackendState,
  type SampleRequest,
  type SampleResult,
  type SamplingParams,
  toSampleResult,
} from '../../shared/backend/backend.js';
import { modelInputFromJson, passInputFromJson } from '../../shared/backend/pass-input.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { TinkerClient } from '../../shared/client/tinker-client.js';
import type { FutureRow } from '../../shared/domain/records.js';
import { withSequenceIds } from '../../shared/domain/sample-sequences.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import { requestCut } from '../../shared/services/ops/control-store.js';
import type { WorkerEvent } from '../../shared/services/worker/index.js';
import { passResult } from '../../shared/services/worker/results.js';
import { encodeForwardBackwardOutput, encodeSampleResponse } from '../../shared/wire/results.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { startCloudRuntime } from '../support/runtime.js';
import { decodeSampleResponse } from '../support/wire/decode-results.js';

/**
 * The newer SDK's RL loop (docs/design.md#w8) through the whole local pipeline, api, scheduler and
 * worker running: a sampler checkpoint, a sample with the newer outputs (topk_sample_logprobs,
 * prompt_alt_tokens_k, target_prompt_logprobs) from it, and a policy-gradient pass whose provenance
 * spans name the sampled sequences. Each answer of retrieve_future, JSON and protobuf, is exactly what
 * the reference backend computes directly for the same requests in the same order; a sample cut by the
 * operator mid-generation and resumed from its prefixes answers the same newer outputs (P6).
 */

const BASE = 'reference/byte-lm';
const WAIT_MS = 60_000;
const LORA = { rank: 2, seed: 5 };
const ADAM = { learning_rate: 0.05 };
const PROMPT = [72, 105, 33, 32];

let cloud: TestCloud;
let runtime: LocalRuntime;
let client: TinkerClient;
let apiKey = '';

/**
 * The operator's cut, landing mid-sample whatever the machine's load: once armed, the next sample
 * slice writes `cut#<pool>` (what `tinker-serverless cut` writes), and every slice after it waits a
 * little until the worker's cut poll has seen it and the sample is cut. Counts what the worker reports.
 */
class OperatorCut {
  armed = false;
  requested = false;
  readonly cutRequests: string[] = [];
  resumed = 0;

  readonly onEvent = async (event: WorkerEvent): Promise<void> => {
    if (event.kind === 'sample-cut') {
      this.cutRequests.push(event.request_id);
      this.armed = false;
    } else if (event.kind === 'sample-resumed') {
      this.resumed += event.sequences.filter((sequence) => sequence.from === 'restored').length;
    } else if (event.kind === 'sample-slice' && this.armed) {
      if (!this.requested) {
        this.requested = true;
        await requestCut(cloud.clients.doc, cloud.names.tables.registry, cloud.env.POOL as string, 'test');
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  };
}
const cuts = new OperatorCut();

/** The newer outputs, as SDK 0.32 asks for them (docs/design.md#w8). */
function sampleBody(samplingSessionId: string, seqId: number, maxTokens: number, seed: number) {
  return {
    sampling_session_id: samplingSessionId,
    seq_id: seqId,
    num_samples: 2,
    prompt: { chunks: [{ type: 'encoded_text' as const, tokens: PROMPT }] },
    sampling_params: { max_tokens: maxTokens, seed, temperature: 1, top_k: -1, top_p: 1 },
    prompt_logprobs: true,
    topk_prompt_logprobs: 2,
    topk_sample_logprobs: 3,
    prompt_alt_tokens_k: 2,
    record_stability_info: false,
    // [prompt - 1, 2] ids, -1 = none asked.
    target_prompt_logprobs: { data: [105, 33, -1, 32, 72, 101], dtype: 'int64', shape: [3, 2] },
    type: 'sample',
  };
}

/** The same request in the backend's form (target ids dense, as intake stores them). */
function backendRequest(body: ReturnType<typeof sampleBody>): SampleRequest {
  return {
    num_samples: body.num_samples,
    prompt: modelInputFromJson(body.prompt, 'prompt'),
    sampling_params: body.sampling_params as SamplingParams,
    prompt_logprobs: body.prompt_logprobs,
    topk_prompt_logprobs: body.topk_prompt_logprobs,
    topk_sample_logprobs: body.topk_sample_logprobs,
    prompt_alt_tokens_k: body.prompt_alt_tokens_k,
    target_prompt_logprobs: { shape: [3, 2], data: body.target_prompt_logprobs.data },
  };
}

/** A forward_backward input as the client sends it. */
type PassInput = Parameters<TinkerClient['forwardBackward']>[0]['forward_backward_input'];

const json = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;

/** retrieve_future as the SDK reads these results: `Accept: application/x-protobuf`. */
async function retrieveProtobuf(requestId: string): Promise<Uint8Array> {
  const response = await fetch(`${runtime.apiUrl}/api/v1/retrieve_future`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/x-protobuf', 'x-api-key': apiKey },
    body: JSON.stringify({ request_id: requestId, allow_metadata_only: false }),
  });
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toBe('application/x-protobuf');
  return new Uint8Array(await response.arrayBuffer());
}

/** float32 as the protobuf carries logprobs (ids stay integers). */
const f32 = (value: number | null) => (value === null ? null : Math.fround(value));

/** The newer outputs of a result, as the SDK reads them from the protobuf SampleResponse. */
function newerOutputsAsFloat32(result: SampleResult) {
  return {
    topk: result.sequences.map((sequence) =>
      sequence.topk_logprobs?.map((row) => row.map(([token, logprob]) => [token, f32(logprob)])),
    ),
    prompt_alt_tokens: {
      tokens: result.prompt_alt_tokens?.tokens,
      logprobs: result.prompt_alt_tokens?.logprobs.map((row) => row.map(f32)),
    },
    target_prompt_logprobs: result.target_prompt_logprobs?.map((row) => row.map(f32)),
  };
}

function newerOutputsDecoded(bytes: Uint8Array) {
  const decoded = decodeSampleResponse(bytes);
  return {
    topk: decoded.sequences.map((sequence) => sequence.topk_logprobs),
    prompt_alt_tokens: decoded.prompt_alt_tokens,
    target_prompt_logprobs: decoded.target_prompt_logprobs,
  };
}

/**
 * The reference backend run directly on the same requests in the same order: the model, its first
 * step, the sampler checkpoint and its samples, the RL pass.
 */
class DirectRun {
  readonly backend = new ReferenceBackend();
  state!: BackendState;
  samplerWeights!: Uint8Array;

  async train(input: PassInput): Promise<unknown> {
    const out = await this.backend.forwardBackward(this.state, passInputFromJson(input, 'input'));
    this.state = out.state;
    return json(passResult(out.result));
  }

  async sample(body: ReturnType<typeof sampleBody>): Promise<SampleResult> {
    const sampler = await this.backend.loadSampler(BASE, this.samplerWeights);
    return json(toSampleResult(await this.backend.sample(sampler, backendRequest(body))));
  }
}

const direct = new DirectRun();
const ids = { session: '', model: '', samplingSession: '', samplerPath: '' };
let seqId = 0;

const firstStep: PassInput = {
  loss_fn: 'cross_entropy',
  data: [
    {
      model_input: { chunks: [{ type: 'encoded_text', tokens: [104, 101, 108, 108] }] },
      loss_fn_inputs: { target_tokens: { data: [101, 108, 108, 111], dtype: 'int64', shape: [4] } },
    },
  ],
};

beforeAll(async () => {
  cloud = await setupTestCloud();
  // The worker Lambda as deployed, its slices and cut poll short so an operator cut lands mid-sample.
  const worker = createWorkerHandler({
    worker: { onEvent: cuts.onEvent, cutPollMs: 50, sampleSliceTokens: 2 },
  });
  runtime = await startCloudRuntime(cloud, {
    functions: ['api', 'scheduler', 'worker'],
    handlers: { worker },
    env: { LONG_POLL_SECONDS: '1' },
  });
  apiKey = await createApiKey(cloud.clients.doc, cloud.names.tables.registry, 'newer-rl');
  client = new TinkerClient({ baseUrl: runtime.apiUrl as string, apiKey });

  ids.session = (await client.createSession()).session_id;
  const created = await client.createModel({
    session_id: ids.session,
    model_seq_id: 0,
    base_model: BASE,
    lora_config: LORA,
  });
  ids.model = created.model_id;
  await client.waitFor(created.request_id, { timeoutMs: WAIT_MS });
  direct.state = await direct.backend.createModel({ base_model: BASE, lora_config: LORA });

  const pass = await client.forwardBackward({
    model_id: ids.model,
    seq_id: ++seqId,
    forward_backward_input: firstStep,
  });
  expect(await client.waitFor(pass.request_id, { timeoutMs: WAIT_MS })).toEqual(
    await direct.train(firstStep),
  );
  const step = await client.optimStep({ model_id: ids.model, seq_id: ++seqId, adam_params: ADAM });
  await client.waitFor(step.request_id, { timeoutMs: WAIT_MS });
  direct.state = (await direct.backend.optimStep(direct.state, ADAM)).state;

  const saved = await client.saveWeightsForSampler({ model_id: ids.model, seq_id: ++seqId, path: 'rl-1' });
  ids.samplerPath = (await client.waitFor<{ path: string }>(saved.request_id, { timeoutMs: WAIT_MS })).path;
  direct.samplerWeights = await direct.backend.exportWeights(direct.state, 'sampler');
  ids.samplingSession = (
    await client.createSamplingSession({
      session_id: ids.session,
      sampling_session_seq_id: 0,
      model_path: ids.samplerPath,
    })
  ).sampling_session_id;
}, 120_000);

afterAll(async () => {
  await runtime?.stop();
});

interface Sampled {
  readonly requestId: string;
  readonly sequenceIds: string[];
  readonly expected: SampleResult;
}

async function submitSample(body: ReturnType<typeof sampleBody>): Promise<Omit<Sampled, 'expected'>> {
  const answer = await client.raw('POST', '/api/v1/asample', body);
  expect(answer.status).toBe(200);
  const { request_id: requestId, sample_sequence_ids: sequenceIds } = answer.body as {
    request_id: string;
    sample_sequence_ids: string[];
  };
  return { requestId, sequenceIds };
}

/**
 * Both wires answer exactly the direct run: JSON (with each sequence id for a client naming a newer
 * release, W7), and protobuf byte for byte.
 */
async function expectAnswers(sampled: Sampled): Promise<void> {
  const answer = await client.waitFor<SampleResult>(sampled.requestId, { timeoutMs: WAIT_MS });
  expect(answer).toEqual(sampled.expected);
  const named = await client.raw(
    'POST',
    '/api/v1/retrieve_future',
    { request_id: sampled.requestId },
    { 'x-stainless-package-version': '0.32.0' },
  );
  expect(named.body).toEqual(withSequenceIds(sampled.requestId, sampled.expected));
  const bytes = await retrieveProtobuf(sampled.requestId);
  expect(Buffer.from(bytes).equals(Buffer.from(encodeSampleResponse(sampled.expected)))).toBe(true);
  expect(newerOutputsDecoded(bytes)).toEqual(newerOutputsAsFloat32(sampled.expected));
}

let first: Sampled;

describe('the newer sampling outputs through the worker (W8)', () => {
  it('retrieve_future answers them exactly as the reference backend computes them, on both wires', async () => {
    const body = sampleBody(ids.samplingSession, 0, 6, 11);
    const submitted = await submitSample(body);
    first = { ...submitted, expected: await direct.sample(body) };
    // Not vacuous: each output was asked for and computed.
    expect(first.expected.sequences.map((sequence) => sequence.topk_logprobs?.[0]?.length)).toEqual([3, 3]);
    expect(first.expected.prompt_alt_tokens?.tokens).toHaveLength(3);
    expect(first.expected.target_prompt_logprobs?.[1]).toEqual([null, expect.any(Number)]);
    expect(first.sequenceIds).toEqual([`${first.requestId}:0`, `${first.requestId}:1`]);
    await expectAnswers(first);
  });

  it('each sampled sequence names the sampler checkpoint and the weights version that produced it', async () => {
    const answer = await client.raw(
      'GET',
      `/api/v1/sample_sequences/${encodeURIComponent(first.sequenceIds[1] as string)}`,
    );
    expect(answer.body).toMatchObject({
      sequence_id: first.sequenceIds[1],
      sample_index: 1,
      sampling_session_id: ids.samplingSession,
      model_path: ids.samplerPath,
      weights_version: 1,
    });
  });

  it('a policy-gradient pass whose spans name the sampled sequences trains exactly as the direct run', async () => {
    const sequence = first.expected.sequences[0];
    const tokens = [...PROMPT, ...(sequence?.tokens ?? [])];
    const positions = tokens.length - 1;
    const generated = (sequence?.tokens.length ?? 0) - 1;
    const id = first.sequenceIds[0] as string;
    const datum: PassInput['data'][number] = {
      model_input: { chunks: [{ type: 'encoded_text', tokens: tokens.slice(0, -1) }] },
      loss_fn_inputs: {
        target_tokens: { data: tokens.slice(1), dtype: 'int64', shape: [positions] },
        logprobs: {
          data: [0, 0, 0, ...(sequence?.logprobs ?? [])],
          dtype: 'float32',
          shape: [positions],
        },
        advantages: {
          data: [0, 0, 0, ...(sequence?.tokens ?? []).map(() => 1)],
          dtype: 'float32',
          shape: [positions],
        },
      },
      model_input_spans: [
        { type: 'prompt_tokens', sequence_id: id, offset: 0, length: PROMPT.length },
        { type: 'sampled_tokens', sequence_id: id, offset: 0, length: generated },
      ],
      loss_fn_input_spans: [
        { type: 'prompt_tokens', sequence_id: id, offset: 1, length: PROMPT.length - 1 },
        { type: 'sampled_tokens', sequence_id: id, offset: 0, length: generated + 1 },
      ],
    };
    const input: PassInput = { loss_fn: 'importance_sampling', data: [datum] };
    const pass = await client.forwardBackward({
      model_id: ids.model,
      seq_id: ++seqId,
      forward_backward_input: input,
    });
    const expected = await direct.train(input);
    expect(await client.waitFor(pass.request_id, { timeoutMs: WAIT_MS })).toEqual(expected);
    const bytes = await retrieveProtobuf(pass.request_id);
    expect(
      Buffer.from(bytes).equals(
        Buffer.from(
          encodeForwardBackwardOutput(expected as Parameters<typeof encodeForwardBackwardOutput>[0]),
        ),
      ),
    ).toBe(true);
  });

  it('a sample cut by the operator mid-generation and resumed answers the same newer outputs (P6)', async () => {
    const body = sampleBody(ids.samplingSession, 1, 24, 23);
    cuts.armed = true;
    const submitted = await submitSample(body);
    const sampled = { ...submitted, expected: await direct.sample(body) };
    await expectAnswers(sampled);
    expect(cuts.requested).toBe(true);
    expect(cuts.cutRequests).toContain(sampled.requestId);
    expect(cuts.resumed).toBeGreaterThan(0);
    const row = (
      await cloud.clients.doc.send(
        new GetCommand({
          TableName: cloud.names.tables.futures,
          Key: { request_id: sampled.requestId },
          ConsistentRead: true,
        }),
      )
    ).Item as FutureRow;
    expect(row.prefix_ref?.cuts).toBeGreaterThanOrEqual(1);
  });
});
