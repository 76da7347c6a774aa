import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { create, toBinary } from '@bufbuild/protobuf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { type FutureRow, registryKey, type SampleSequencesRecord } from '../../shared/domain/records.js';
import { readStoredPayload } from '../../shared/repositories/payloads.js';
import type { SamplePayload } from '../../shared/services/api/payloads.js';
import { decodeForwardBackwardRequest } from '../../shared/wire/forward-backward-request.js';
import { DType, ForwardBackwardRequestSchema } from '../../shared/wire/gen/tinker_public_pb.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';
import { readPayload } from '../support/payloads.js';

/**
 * What SDK releases after 0.25.0 send (docs/design.md#w8), request by request, over HTTP
 * against the local runtime: asample with the newer outputs answers sample_sequence_ids; an RL step's
 * forward_backward names them in provenance spans (JSON and protobuf); loss_fn_config_v2.
 */

let api: ApiHarness;
let client: TinkerClient;
let apiKey: string;
let other: TinkerClient;
let modelId: string;
let samplingSessionId: string;
let issued: string[];

async function registry<T>(pk: string): Promise<T | undefined> {
  const answer = await api.cloud.clients.doc.send(
    new GetCommand({ TableName: api.cloud.names.tables.registry, Key: { pk }, ConsistentRead: true }),
  );
  return answer.Item as T | undefined;
}

async function future(requestId: string): Promise<FutureRow> {
  const answer = await api.cloud.clients.doc.send(
    new GetCommand({
      TableName: api.cloud.names.tables.futures,
      Key: { request_id: requestId },
      ConsistentRead: true,
    }),
  );
  return answer.Item as FutureRow;
}

const PROMPT = [72, 105, 33];

/** What SDK 0.32 sends for asample (its SampleRequest: the three newer output fields and record_stability_info). */
function newerSample(seqId: number, extra: Record<string, unknown> = {}) {
  return {
    sampling_session_id: samplingSessionId,
    seq_id: seqId,
    num_samples: 2,
    prompt: { chunks: [{ type: 'encoded_text', tokens: PROMPT }] },
    sampling_params: { max_tokens: 4, seed: 3, temperature: 1, top_k: -1, top_p: 1 },
    prompt_logprobs: false,
    topk_prompt_logprobs: 0,
    topk_sample_logprobs: 0,
    prompt_alt_tokens_k: 0,
    record_stability_info: false,
    type: 'sample',
    ...extra,
  };
}

/** A datum of the RL step: the prompt then 2 sampled tokens, spans naming `id`. */
function rlDatum(id: string) {
  return {
    model_input: { chunks: [{ type: 'encoded_text', tokens: [...PROMPT, 5, 6] }] },
    loss_fn_inputs: {
      target_tokens: { data: [105, 33, 5, 6, 7], dtype: 'int64', shape: [5] },
      logprobs: { data: [-1, -1, -1, -1, -1], dtype: 'float32', shape: [5] },
      advantages: { data: [0, 0, 1, 1, 1], dtype: 'float32', shape: [5] },
    },
    model_input_spans: [
      { type: 'prompt_tokens', sequence_id: id, offset: 0, length: 3 },
      { type: 'sampled_tokens', sequence_id: id, offset: 0, length: 2 },
    ],
    loss_fn_input_spans: [
      { type: 'prompt_tokens', sequence_id: id, offset: 1, length: 2 },
      { type: 'sampled_tokens', sequence_id: id, offset: 0, length: 3 },
    ],
  };
}

function protobufPass(seqId: number, id: string, config: { v2?: Record<string, string | number> } = {}) {
  const span = (kind: 'promptTokens' | 'sampledTokens', offset: number, length: number) => ({
    span: { case: kind, value: { sequenceId: id, offset: BigInt(offset), length: BigInt(length) } },
  });
  const tensor = (values: ArrayLike<number>, dtype: DType) => ({
    encoding: {
      case: 'dense' as const,
      value:
        dtype === DType.DTYPE_INT64
          ? new Uint8Array(BigInt64Array.from(Array.from(values, BigInt)).buffer)
          : new Uint8Array(Float32Array.from(values).buffer),
    },
    dtype,
    shape: [BigInt(values.length)],
  });
  const message = create(ForwardBackwardRequestSchema, {
    modelId,
    seqId,
    lossFn: 'importance_sampling',
    lossFnConfigV2: Object.fromEntries(
      Object.entries(config.v2 ?? {}).map(([key, value]) => [
        key,
        {
          value:
            typeof value === 'number' ? { case: 'number' as const, value } : { case: 'text' as const, value },
        },
      ]),
    ),
    data: [
      {
        modelInput: [
          {
            chunk: {
              case: 'encodedText',
              value: { tokens: new Uint8Array(Int32Array.from([...PROMPT, 5, 6]).buffer) },
            },
          },
        ],
        lossFnInputs: {
          target_tokens: tensor([105, 33, 5, 6, 7], DType.DTYPE_INT64),
          logprobs: tensor([-1, -1, -1, -1, -1], DType.DTYPE_FLOAT32),
          advantages: tensor([0, 0, 1, 1, 1], DType.DTYPE_FLOAT32),
        },
        modelInputSpans: [span('promptTokens', 0, 3), span('sampledTokens', 0, 2)],
        lossFnInputSpans: [span('promptTokens', 1, 2), span('sampledTokens', 0, 3)],
      },
    ],
  });
  return toBinary(ForwardBackwardRequestSchema, message);
}

async function postProtobuf(bytes: Uint8Array) {
  const response = await fetch(`${api.url}/api/v1/forward_backward`, {
    method: 'POST',
    headers: {
      'content-type': 'application/x-protobuf',
      'x-api-key': apiKey,
    },
    body: bytes,
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

beforeAll(async () => {
  api = await startApiHarness({ API_KEY_CACHE_SECONDS: '0' });
  ({ client, key: apiKey } = await api.tenant('newer'));
  ({ client: other } = await api.tenant('stranger'));
  const { session_id } = await client.createSession();
  const model = await client.createModel({
    session_id,
    model_seq_id: 0,
    base_model: 'reference/byte-lm',
    lora_config: { rank: 2 },
  });
  modelId = model.model_id as string;
  ({ sampling_session_id: samplingSessionId } = await client.createSamplingSession({
    session_id,
    sampling_session_seq_id: 0,
    base_model: 'reference/byte-lm',
  }));
});

afterAll(async () => {
  await api?.stop();
});

describe('client/config per release (W7)', () => {
  it('the body names the release, the package header stands in without it', async () => {
    const flag = async (body: object, headers: Record<string, string> = {}) => {
      const answer = await client.raw('POST', '/api/v1/client/config', body, headers);
      expect(answer.status).toBe(200);
      return (answer.body as { sample_use_retrieve_futures?: boolean }).sample_use_retrieve_futures;
    };
    expect(await flag({ sdk_version: '0.25.0' })).toBeUndefined();
    expect(await flag({ sdk_version: '0.32.0' })).toBe(true);
    expect(await flag({})).toBeUndefined();
    expect(await flag({}, { 'x-stainless-package-version': '0.24.1' })).toBeUndefined();
    expect(await flag({}, { 'x-stainless-package-version': '0.32.0' })).toBe(true);
    expect(
      await flag({ sdk_version: '0.25.0' }, { 'x-stainless-package-version': '0.32.0' }),
    ).toBeUndefined();
    const dynamic = await client.raw(
      'POST',
      '/api/v1/client/dynamic_config',
      {},
      {
        'x-stainless-package-version': '0.24.1',
      },
    );
    expect(dynamic.body).toEqual({
      refresh_interval_sec: 300,
      sample_cancel_enabled: true,
      sample_cancel_max_batch_size: 64,
    });
  });
});

describe('sampling ids (W8)', () => {
  it('asample answers one sequence id per sample, the same on a retry, and stores what produced them', async () => {
    const body = newerSample(1, { topk_sample_logprobs: 3, prompt_alt_tokens_k: 2 });
    const first = await client.raw('POST', '/api/v1/asample', body);
    expect(first.status).toBe(200);
    const answer = first.body as { request_id: string; sample_sequence_ids: string[] };
    expect(answer.sample_sequence_ids).toEqual([`${answer.request_id}:0`, `${answer.request_id}:1`]);
    expect((await client.raw('POST', '/api/v1/asample', body)).body).toEqual(answer);
    issued = answer.sample_sequence_ids;
    const record = await registry<SampleSequencesRecord>(registryKey.sampleSequences(answer.request_id));
    expect(record).toMatchObject({
      num_samples: 2,
      prompt_tokens: 3,
      max_tokens: 4,
      base_model: 'reference/byte-lm',
    });
    const row = await future(answer.request_id);
    const payload = await readPayload<SamplePayload>(
      row.payload_key,
      row.payload_digest,
      api.cloud.clients.s3,
    );
    expect(payload).toMatchObject({ topk_sample_logprobs: 3, prompt_alt_tokens_k: 2 });
  });

  it('SDK 0.24.1 and 0.25.0 (by their X-Stainless-Package-Version) get the bare future, 0.32.0 the ids', async () => {
    for (const [version, seqId, keys] of [
      ['0.24.1', 20, ['request_id']],
      ['0.25.0', 21, ['request_id']],
      ['0.32.0', 22, ['request_id', 'sample_sequence_ids']],
    ] as const) {
      const answer = await client.raw('POST', '/api/v1/asample', newerSample(seqId), {
        'x-stainless-package-version': version,
      });
      expect(Object.keys(answer.body as object)).toEqual(keys);
    }
  });

  it('target_prompt_logprobs in sparse CSR is stored dense, -1 where nothing is asked', async () => {
    const answer = (
      await client.raw(
        'POST',
        '/api/v1/asample',
        newerSample(2, {
          target_prompt_logprobs: {
            data: [7, 9],
            dtype: 'int64',
            shape: [2, 2],
            sparse_crow_indices: [0, 1, 2],
            sparse_col_indices: [1, 0],
          },
        }),
      )
    ).body as { request_id: string };
    const row = await future(answer.request_id);
    const payload = await readPayload<SamplePayload>(
      row.payload_key,
      row.payload_digest,
      api.cloud.clients.s3,
    );
    expect(payload.target_prompt_logprobs).toEqual({ shape: [2, 2], data: [-1, 7, 9, -1] });
  });

  it('GET sample_sequences/{id} names the sampler; another tenant gets a 404', async () => {
    const id = issued[1] as string;
    const answer = await client.raw('GET', `/api/v1/sample_sequences/${encodeURIComponent(id)}`);
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({
      sequence_id: id,
      sample_index: 1,
      sampling_session_id: samplingSessionId,
      model_path: null,
      weights_version: null,
    });
    expect((await other.raw('GET', `/api/v1/sample_sequences/${encodeURIComponent(id)}`)).status).toBe(404);
  });
});

describe('provenance spans (W8)', () => {
  it('a JSON forward_backward naming issued ids is stored with its spans', async () => {
    const answer = await client.raw('POST', '/api/v1/forward_backward', {
      model_id: modelId,
      seq_id: 1,
      forward_backward_input: { data: [rlDatum(issued[0] as string)], loss_fn: 'importance_sampling' },
    });
    expect(answer.status).toBe(200);
    const row = await future((answer.body as { request_id: string }).request_id);
    const stored = await readStoredPayload(api.cloud.clients.s3, api.cloud.names.bucket, row.payload_key);
    const bytes = (stored as { bytes: Uint8Array }).bytes;
    const datum = decodeForwardBackwardRequest(bytes).input.data[0];
    expect(datum?.model_input_spans?.map((span) => span.type)).toEqual(['prompt_tokens', 'sampled_tokens']);
    expect(datum?.loss_fn_input_spans?.[1]).toEqual({
      type: 'sampled_tokens',
      sequence_id: issued[0],
      offset: 0,
      length: 3,
    });
  });

  it('a protobuf forward_backward with spans and a numeric loss_fn_config_v2 is accepted', async () => {
    const answer = await postProtobuf(protobufPass(2, issued[1] as string));
    expect(answer.status).toBe(200);
  });

  const refusals: [string, () => Promise<{ status: number; body: unknown }>, string][] = [
    [
      'an id issued to another tenant',
      async () => {
        const theirs = await other.createSession();
        const ss = await other.createSamplingSession({
          session_id: theirs.session_id,
          sampling_session_seq_id: 0,
          base_model: 'reference/byte-lm',
        });
        const sample = (
          await other.raw('POST', '/api/v1/asample', {
            ...newerSample(1),
            sampling_session_id: ss.sampling_session_id,
          })
        ).body as { sample_sequence_ids: string[] };
        return client.raw('POST', '/api/v1/forward_backward', {
          model_id: modelId,
          seq_id: 3,
          forward_backward_input: {
            data: [rlDatum(sample.sample_sequence_ids[0] as string)],
            loss_fn: 'importance_sampling',
          },
        });
      },
      'forward_backward_input.data.0.model_input_spans.0.sequence_id',
    ],
    [
      'an index past num_samples',
      () =>
        client.raw('POST', '/api/v1/forward_backward', {
          model_id: modelId,
          seq_id: 3,
          forward_backward_input: {
            data: [rlDatum(`${(issued[0] as string).split(':')[0]}:2`)],
            loss_fn: 'importance_sampling',
          },
        }),
      'forward_backward_input.data.0.model_input_spans.0.sequence_id',
    ],
    [
      'spans that do not tile the datum',
      () => {
        const datum = rlDatum(issued[0] as string);
        return client.raw('POST', '/api/v1/forward_backward', {
          model_id: modelId,
          seq_id: 3,
          forward_backward_input: {
            data: [{ ...datum, model_input_spans: datum.model_input_spans.slice(0, 1) }],
            loss_fn: 'importance_sampling',
          },
        });
      },
      'forward_backward_input.data.0.model_input_spans',
    ],
    [
      'a sampled span past max_tokens',
      () => {
        const datum = rlDatum(issued[0] as string);
        return client.raw('POST', '/api/v1/forward_backward', {
          model_id: modelId,
          seq_id: 3,
          forward_backward_input: {
            data: [
              {
                ...datum,
                loss_fn_input_spans: [
                  { type: 'sampled_tokens', sequence_id: issued[0], offset: 2, length: 5 },
                ],
              },
            ],
            loss_fn: 'importance_sampling',
          },
        });
      },
      'forward_backward_input.data.0.loss_fn_input_spans.0.length',
    ],
    [
      'a string loss_fn_config value where a number is needed (JSON)',
      () =>
        client.raw('POST', '/api/v1/forward_backward', {
          model_id: modelId,
          seq_id: 3,
          forward_backward_input: {
            data: [rlDatum(issued[0] as string)],
            loss_fn: 'ppo',
            loss_fn_config: { clip_low_threshold: 'low' },
          },
        }),
      'forward_backward_input.loss_fn_config.clip_low_threshold',
    ],
    [
      'a text loss_fn_config_v2 value (protobuf)',
      () => postProtobuf(protobufPass(3, issued[1] as string, { v2: { mode: 'strict' } })),
      'loss_fn_config.mode',
    ],
    [
      'a target_prompt_logprobs of the wrong shape',
      () =>
        client.raw(
          'POST',
          '/api/v1/asample',
          newerSample(9, { target_prompt_logprobs: { data: [1, 2, 3], dtype: 'int64', shape: [3, 1] } }),
        ),
      'target_prompt_logprobs.shape',
    ],
  ];

  it.each(refusals)('refuses %s with a 400 naming the field', async (_name, send, field) => {
    const result = await send();
    expect(result.status).toBe(400);
    expect((result.body as { field?: string }).field).toBe(field);
  });

  it('a refused pass stores nothing', async () => {
    const before = await api.counts();
    const result = await client.raw('POST', '/api/v1/forward_backward', {
      model_id: modelId,
      seq_id: 3,
      forward_backward_input: { data: [rlDatum(`${'0'.repeat(32)}:0`)], loss_fn: 'importance_sampling' },
    });
    expect(result.status).toBe(400);
    expect(await api.counts()).toEqual(before);
  });
});
