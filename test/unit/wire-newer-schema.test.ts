import { fromBinary } from '@bufbuild/protobuf';
import { describe, expect, it } from 'vitest';
import type { Datum } from '../../shared/backend/pass-input.js';
import type { ValidationError } from '../../shared/base/errors.js';
import {
  decodeForwardBackwardRequest,
  encodeStoredPass,
  type ForwardBackwardMessage,
} from '../../shared/wire/forward-backward-request.js';
import { DType, SampleResponseSchema, StopReason } from '../../shared/wire/gen/tinker_public_pb.js';
import { encodeSampleResponse, type StoredSampleResult } from '../../shared/wire/results.js';
import { validationErrorOf } from '../support/validation.js';
import { decodeSampleResponse } from '../support/wire/decode-results.js';

/**
 * The wire additions of SDK releases after 0.25.0 (docs/design.md#w8), against bytes laid out by hand
 * from the newer schema's field numbers and wire types (shared/wire/tinker_public.proto), not by the
 * generated code: Datum.model_input_spans (3) / loss_fn_input_spans (4) of ProvenanceSpan
 * {prompt_tokens 1 | sampled_tokens 2} {sequence_id 1, offset 2, length 3};
 * ForwardBackwardRequest.loss_fn_config_v2 (7) of LossConfigValue {number 1 | text 2};
 * SampledSequence.topk_sampled_logprobs (4) of TopkLogprobs {token_ids 1, logprobs 2, k 3, length 4};
 * SampleResponse.target_prompt_logprobs (5) of Tensor and prompt_alt_tokens (6) of PromptAltTokens
 * {tokens 1, logprobs 2}. Each is checked in both directions: our decoder reads the bytes, and our
 * encoder (the stored pass, the result) writes exactly them.
 */

const VARINT = 0;
const I64 = 1;
const LEN = 2;

const concat = (...parts: readonly Uint8Array[]) => Uint8Array.from(parts.flatMap((part) => [...part]));

/** Base-128 varint; negative numbers as their 64-bit two's complement (10 bytes), as int64 is written. */
function varint(value: number | bigint): Uint8Array {
  let rest = BigInt.asUintN(64, BigInt(value));
  const out: number[] = [];
  do {
    const low = Number(rest & 0x7fn);
    rest >>= 7n;
    out.push(rest === 0n ? low : low | 0x80);
  } while (rest !== 0n);
  return Uint8Array.from(out);
}

const tag = (field: number, wireType: number) => varint((field << 3) | wireType);
const uint = (field: number, value: number | bigint) => concat(tag(field, VARINT), varint(value));
const len = (field: number, ...body: Uint8Array[]) => {
  const bytes = concat(...body);
  return concat(tag(field, LEN), varint(bytes.length), bytes);
};
const text = (field: number, value: string) => len(field, new TextEncoder().encode(value));
const double = (field: number, value: number) => {
  const bytes = new Uint8Array(8);
  new DataView(bytes.buffer).setFloat64(0, value, true);
  return concat(tag(field, I64), bytes);
};
/** proto3 packs repeated scalars: one length-delimited run of varints. */
const packed = (field: number, values: readonly number[]) => len(field, ...values.map(varint));

/** Little-endian array bytes, as numpy's `.tobytes()` writes them. */
function le(kind: 'i32' | 'f32' | 'i64', values: readonly number[]): Uint8Array {
  const size = kind === 'i64' ? 8 : 4;
  const view = new DataView(new ArrayBuffer(values.length * size));
  values.forEach((value, i) => {
    if (kind === 'i32') view.setInt32(i * 4, value, true);
    else if (kind === 'f32') view.setFloat32(i * 4, value, true);
    else view.setBigInt64(i * 8, BigInt(value), true);
  });
  return new Uint8Array(view.buffer);
}

/** A dense Tensor as our canonical form writes it: dense 1, dtype 3, shape 4 (packed). */
const denseTensor = (dtype: DType, data: Uint8Array, shape: readonly number[]) =>
  concat(len(1, data), uint(3, dtype), packed(4, shape));

// --- ForwardBackwardRequest: provenance spans and loss_fn_config_v2 ---------------------------------

const ID_A = `${'a'.repeat(32)}:0`;
const ID_B = `${'b'.repeat(32)}:1`;

/** ProvenanceSpan: arm 1 (prompt_tokens) or 2 (sampled_tokens) holding {sequence_id 1, offset 2, length 3}. */
const span = (arm: 1 | 2, sequenceId: string, offset: number, length: number) =>
  len(arm, text(1, sequenceId), offset === 0 ? new Uint8Array() : uint(2, offset), uint(3, length));

/** Datum: model_input 1 (Chunk{encoded_text 1{tokens 1}}), loss_fn_inputs 2 (map entry {key 1, value 2}). */
function datumBytes(spans: { input: Uint8Array[]; loss: Uint8Array[] }): Uint8Array {
  return concat(
    len(1, len(1, len(1, le('i32', [72, 105, 5, 6])))),
    len(2, text(1, 'target_tokens'), len(2, denseTensor(DType.DTYPE_INT64, le('i64', [105, 5, 6, 7]), [4]))),
    ...spans.input.map((bytes) => len(3, bytes)),
    ...spans.loss.map((bytes) => len(4, bytes)),
  );
}

const SPANS = {
  input: [span(1, ID_A, 0, 2), span(2, ID_A, 0, 1), span(2, ID_B, 3, 1)],
  loss: [span(1, ID_A, 1, 1), span(2, ID_B, 0, 3)],
};

/** ForwardBackwardRequest: model_id 1, seq_id 2, data 3, loss_fn 4, loss_fn_config 5, loss_fn_config_v2 7. */
const requestBytes = (datum: Uint8Array, config: Uint8Array[] = []) =>
  concat(text(1, 'tenant:model'), uint(2, 7), len(3, datum), text(4, 'cross_entropy'), ...config);

const SPANS_TYPED: Pick<Datum, 'model_input_spans' | 'loss_fn_input_spans'> = {
  model_input_spans: [
    { type: 'prompt_tokens', sequence_id: ID_A, offset: 0, length: 2 },
    { type: 'sampled_tokens', sequence_id: ID_A, offset: 0, length: 1 },
    { type: 'sampled_tokens', sequence_id: ID_B, offset: 3, length: 1 },
  ],
  loss_fn_input_spans: [
    { type: 'prompt_tokens', sequence_id: ID_A, offset: 1, length: 1 },
    { type: 'sampled_tokens', sequence_id: ID_B, offset: 0, length: 3 },
  ],
};

function rejection(bytes: Uint8Array): ValidationError {
  return validationErrorOf(() => decodeForwardBackwardRequest(bytes));
}

describe('Datum.model_input_spans (3) and loss_fn_input_spans (4), laid out by hand', () => {
  const bytes = requestBytes(datumBytes(SPANS));

  it('decode: each span in order, its arm, sequence_id, offset (absent = 0) and length', () => {
    const decoded = decodeForwardBackwardRequest(bytes);
    const datum = decoded.input.data[0] as Datum;
    expect(datum.model_input.chunks[0]?.tokens).toEqual(new Int32Array([72, 105, 5, 6]));
    expect({
      model_input_spans: datum.model_input_spans,
      loss_fn_input_spans: datum.loss_fn_input_spans,
    }).toEqual(SPANS_TYPED);
  });

  it('encode: the stored pass is exactly these bytes (the spans after the chunks and inputs)', () => {
    const message: ForwardBackwardMessage = {
      model_id: 'tenant:model',
      seq_id: 7,
      forward_only: false,
      input: {
        loss_fn: 'cross_entropy',
        loss_fn_config: {},
        data: [
          {
            model_input: { chunks: [{ type: 'encoded_text', tokens: new Int32Array([72, 105, 5, 6]) }] },
            loss_fn_inputs: {
              target_tokens: { dtype: 'int64', data: new BigInt64Array([105n, 5n, 6n, 7n]), shape: [4] },
            },
            ...SPANS_TYPED,
          },
        ],
      },
    };
    expect(Buffer.from(encodeStoredPass(message)).toString('hex')).toBe(Buffer.from(bytes).toString('hex'));
  });

  it('a datum without spans reads back without the keys (the 0.25.0 layout is unchanged)', () => {
    const datum = decodeForwardBackwardRequest(requestBytes(datumBytes({ input: [], loss: [] }))).input
      .data[0] as Datum;
    expect('model_input_spans' in datum || 'loss_fn_input_spans' in datum).toBe(false);
  });

  it.each([
    ['a span with neither arm', { input: [new Uint8Array()], loss: [] }, 'data.0.model_input_spans.0'],
    [
      'an empty sequence_id',
      { input: [], loss: [len(2, uint(3, 1))] },
      'data.0.loss_fn_input_spans.0.sampled_tokens.sequence_id',
    ],
    [
      'a negative offset (int64 -1, ten bytes)',
      { input: [len(1, text(1, ID_A), uint(2, -1), uint(3, 1))], loss: [] },
      'data.0.model_input_spans.0.prompt_tokens.offset',
    ],
    [
      'a length of 0 (left out, the proto3 default)',
      { input: [], loss: [len(2, text(1, ID_A), uint(2, 1))] },
      'data.0.loss_fn_input_spans.0.sampled_tokens.length',
    ],
    [
      'a sequence_id of 129 characters',
      { input: [span(2, 'x'.repeat(129), 0, 1)], loss: [] },
      'data.0.model_input_spans.0.sampled_tokens.sequence_id',
    ],
  ])('%s -> 400 naming the field', (_name, spans, field) => {
    const error = rejection(requestBytes(datumBytes(spans)));
    expect({ status: error.status, field: error.context.field }).toEqual({ status: 400, field });
    expect(error.message.startsWith(`${field}: `)).toBe(true);
  });

  it('a span field of the wrong wire type (sequence_id as a varint) -> 400 body', () => {
    const error = rejection(requestBytes(datumBytes({ input: [len(1, uint(1, 5), uint(3, 1))], loss: [] })));
    expect({ status: error.status, field: error.context.field }).toEqual({ status: 400, field: 'body' });
  });
});

/** A map<string, LossConfigValue> entry of field 7: {key 1, value 2: {number 1 | text 2}}. */
const v2Number = (key: string, value: number) => len(7, text(1, key), len(2, double(1, value)));
const v2Text = (key: string, value: string) => len(7, text(1, key), len(2, text(2, value)));
/** A map<string, double> entry of field 5. */
const v1Number = (key: string, value: number) => len(5, text(1, key), double(2, value));

describe('ForwardBackwardRequest.loss_fn_config_v2 (7), laid out by hand', () => {
  const datum = datumBytes({ input: [], loss: [] });

  it('decode: numbers written to 5 and 7 (as the SDK writes them) and text to 7 only', () => {
    const bytes = requestBytes(datum, [
      v1Number('clip_low_threshold', 0.75),
      v2Number('clip_low_threshold', 0.75),
      v2Text('mode', 'strict'),
    ]);
    expect(decodeForwardBackwardRequest(bytes).input.loss_fn_config).toEqual({
      clip_low_threshold: 0.75,
      mode: 'strict',
    });
  });

  it('decode: a key in both reads as v2 (v2 overlays 5), and v2 alone is enough', () => {
    const both = requestBytes(datum, [v1Number('beta', 0.5), v2Number('beta', 0.25)]);
    expect(decodeForwardBackwardRequest(both).input.loss_fn_config).toEqual({ beta: 0.25 });
    const alone = requestBytes(datum, [v2Number('beta', 2)]);
    expect(decodeForwardBackwardRequest(alone).input.loss_fn_config).toEqual({ beta: 2 });
  });

  it('encode: the stored pass writes numbers to 5 and text to 7, each map sorted by key', () => {
    const decoded = decodeForwardBackwardRequest(
      requestBytes(datum, [v2Text('mode', 'strict'), v2Number('beta', 0.25), v1Number('alpha', 1.5)]),
    );
    const expected = requestBytes(datum, [
      v1Number('alpha', 1.5),
      v1Number('beta', 0.25),
      v2Text('mode', 'strict'),
    ]);
    expect(Buffer.from(encodeStoredPass(decoded)).toString('hex')).toBe(
      Buffer.from(expected).toString('hex'),
    );
    expect(decodeForwardBackwardRequest(expected)).toEqual(decoded);
  });

  it.each([
    ['a value with neither arm', len(7, text(1, 'beta'), len(2)), 'loss_fn_config_v2.beta'],
    ['a NaN number', v2Number('beta', Number.NaN), 'loss_fn_config_v2.beta'],
    ['an infinite number', v2Number('beta', Number.NEGATIVE_INFINITY), 'loss_fn_config_v2.beta'],
  ])('%s -> 400 naming the key', (_name, entry, field) => {
    const error = rejection(requestBytes(datum, [entry]));
    expect({ status: error.status, field: error.context.field }).toEqual({ status: 400, field });
  });
});

// --- SampleResponse: the newer outputs ------------------------------------------------------------

/** TopkLogprobs {token_ids 1 (int32 LE), logprobs 2 (float32 LE), k 3, length 4}, row-major [length, k]. */
const topk = (ids: number[], logprobs: number[], k: number, length: number) =>
  concat(len(1, le('i32', ids)), len(2, le('f32', logprobs)), uint(3, k), uint(4, length));

const RESULT: StoredSampleResult = {
  sequences: [
    {
      stop_reason: 'length',
      tokens: [5, 6],
      logprobs: [-0.5, -1.25],
      // Row 0 full, row 1 one entry short (padded), as k = 2.
      topk_logprobs: [
        [
          [5, -0.5],
          [9, -1.5],
        ],
        [[6, -1.25]],
      ],
    },
    { stop_reason: 'stop', tokens: [7], logprobs: [-2], topk_logprobs: [[[7, -2]]] },
  ],
  prompt_alt_tokens: {
    tokens: [
      [3, 4],
      [8, 3],
    ],
    logprobs: [
      [-0.25, -3],
      [-0.125, -4],
    ],
  },
  target_prompt_logprobs: [
    [-1, null],
    [-2.5, -0.5],
  ],
};

/**
 * The bytes of RESULT. SampleResponse: sequences 1, target_prompt_logprobs 5, prompt_alt_tokens 6
 * (prompt_logprobs 2 and topk_prompt_logprobs 3 absent; prompt_cache_hit_tokens 4 = 0 left out).
 * SampledSequence: stop_reason 1 (STOP = 0 left out), tokens 2, logprobs 3, topk_sampled_logprobs 4.
 * Padding of a short or null top-k row: token 0, logprob -99999.0 (the SDK's MASK_LOGPROB).
 */
const RESULT_BYTES = concat(
  len(
    1,
    uint(1, StopReason.LENGTH),
    len(2, le('i32', [5, 6])),
    len(3, le('f32', [-0.5, -1.25])),
    len(4, topk([5, 9, 6, 0], [-0.5, -1.5, -1.25, -99999], 2, 2)),
  ),
  len(1, len(2, le('i32', [7])), len(3, le('f32', [-2])), len(4, topk([7], [-2], 1, 1))),
  len(5, denseTensor(DType.DTYPE_FLOAT32, le('f32', [-1, Number.NaN, -2.5, -0.5]), [2, 2])),
  len(
    6,
    len(1, denseTensor(DType.DTYPE_INT64, le('i64', [3, 4, 8, 3]), [2, 2])),
    len(2, denseTensor(DType.DTYPE_FLOAT32, le('f32', [-0.25, -3, -0.125, -4]), [2, 2])),
  ),
);

describe('SampleResponse with the newer outputs, laid out by hand', () => {
  it('encode: our encoder writes exactly these bytes', () => {
    expect(Buffer.from(encodeSampleResponse(RESULT)).toString('hex')).toBe(
      Buffer.from(RESULT_BYTES).toString('hex'),
    );
  });

  it('decode: the schema reads each new field at its number', () => {
    const message = fromBinary(SampleResponseSchema, RESULT_BYTES);
    const [first, second] = message.sequences;
    expect(first?.stopReason).toBe(StopReason.LENGTH);
    expect(first?.topkSampledLogprobs).toMatchObject({ k: 2, length: 2 });
    expect(second?.stopReason).toBe(StopReason.STOP);
    expect(second?.topkSampledLogprobs).toMatchObject({ k: 1, length: 1 });
    expect(message.targetPromptLogprobs).toMatchObject({ dtype: DType.DTYPE_FLOAT32, shape: [2n, 2n] });
    expect(message.promptAltTokens?.tokens).toMatchObject({ dtype: DType.DTYPE_INT64, shape: [2n, 2n] });
    expect(message.promptAltTokens?.logprobs).toMatchObject({ dtype: DType.DTYPE_FLOAT32, shape: [2n, 2n] });
    expect(message.promptLogprobs).toBeUndefined();
    expect(message.topkPromptLogprobs).toBeUndefined();
  });

  it('decode: the values read back as stored (padding dropped, NaN as null)', () => {
    const decoded = decodeSampleResponse(RESULT_BYTES);
    expect(decoded.sequences.map((sequence) => sequence.topk_logprobs)).toEqual(
      RESULT.sequences.map((sequence) => sequence.topk_logprobs),
    );
    expect(decoded.prompt_alt_tokens).toEqual(RESULT.prompt_alt_tokens);
    expect(decoded.target_prompt_logprobs).toEqual(RESULT.target_prompt_logprobs);
  });

  it('a result without the newer outputs is the 0.25.0 layout, byte for byte', () => {
    const plain: StoredSampleResult = {
      sequences: [{ stop_reason: 'length', tokens: [5, 6], logprobs: [-0.5, -1.25] }],
    };
    const bytes = len(
      1,
      uint(1, StopReason.LENGTH),
      len(2, le('i32', [5, 6])),
      len(3, le('f32', [-0.5, -1.25])),
    );
    expect(Buffer.from(encodeSampleResponse(plain)).toString('hex')).toBe(Buffer.from(bytes).toString('hex'));
  });

  it('TopkLogprobs at field 3 (prompt) keeps the 0.25.0 TopkPromptLogprobs layout (length = prompt_length, 4)', () => {
    const bytes = encodeSampleResponse({ sequences: [], topk_prompt_logprobs: [[[4, -0.5]], null] });
    expect(Buffer.from(bytes).toString('hex')).toBe(
      Buffer.from(len(3, topk([4, 0], [-0.5, -99999], 1, 2))).toString('hex'),
    );
  });
});
