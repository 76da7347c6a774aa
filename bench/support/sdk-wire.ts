import { compress, init } from '@bokuweb/zstd-wasm';
import { create, toBinary } from '@bufbuild/protobuf';
import { DType, ForwardBackwardRequestSchema } from '../../shared/wire/gen/tinker_public_pb.js';
import { seededRandom } from '../../test/support/seeded-random.js';

/**
 * A `forward_backward` request body built exactly as the official SDK sends it, for benchmarks:
 *
 *  - SDK 0.25.0 (`resources/training.py`, `proto/request_conv.py`): a protobuf `ForwardBackwardRequest`
 *    with `model_id`, `seq_id`, `loss_fn`, no `loss_fn_config` (None: no entries), and per datum one
 *    `encoded_text` chunk whose `tokens` are int32 little-endian bytes, `loss_fn_inputs`
 *    `target_tokens` (dense int64, DTYPE_INT64, shape [n]) and `weights` (dense float32,
 *    DTYPE_FLOAT32, shape [n]); `forward_only` false (not written). With `proto_compress_fwdbwd`
 *    (our `client/config` answers true) the body is `zstd.ZstdCompressor().compress(body)`: the
 *    python-zstandard defaults, level 3, content size in the frame header, no checksum; here
 *    `@bokuweb/zstd-wasm`'s `compress(bytes, 3)`, the same libzstd one-shot API and level.
 *  - SDK 0.24.1 with `proto_write_fwdbwd` off (the JSON wire): `model_dump(exclude_none=True,
 *    mode='json')` of the same request, sent by httpx (0.28: compact separators), so `loss_fn_config`
 *    (None) is left out, chunk `type` is written, and float32 weights are Python floats (`1.0`, `0.0`).
 *
 * Token ids are drawn from a seeded PRNG, uniform over a 151,936-token vocabulary (Qwen2/3's): the
 * least compressible choice (real text, with its skew toward frequent low ids, compresses better),
 * so the zstd sizes here are conservative. Targets are the ids shifted by one (next-token
 * prediction); weights are 0 over a prompt prefix and 1 after it.
 */

export const SDK_VOCABULARY = 151_936;

export interface SdkRequestShape {
  readonly datums: number;
  readonly tokensPerDatum: number;
  /** Leading positions of each datum with weight 0 (the prompt). */
  readonly promptTokens: number;
}

/** The request the issue names: 4 datums x 512 tokens, a 128-token prompt each. */
export const SDK_4X512: SdkRequestShape = { datums: 4, tokensPerDatum: 512, promptTokens: 128 };

export interface SdkBodies {
  /** SDK 0.25.0, `Content-Type: application/x-protobuf`, uncompressed (`proto_compress_fwdbwd` false). */
  readonly protobuf: Uint8Array;
  /** SDK 0.25.0 as it talks to us: the protobuf body zstd-compressed (`Content-Encoding: zstd`). */
  readonly zstd: Uint8Array;
  /** SDK 0.24.1, `Content-Type: application/json`. */
  readonly json: string;
  /** Tokens in the request (all datums). */
  readonly tokens: number;
}

let ready: Promise<void> | undefined;

/** Loads the zstd WebAssembly module; call (and await) once before `sdkBodies`. */
export function initSdkWire(): Promise<void> {
  ready ??= init();
  return ready;
}

const prng = seededRandom;

interface DatumValues {
  readonly tokens: Int32Array;
  readonly targets: BigInt64Array;
  readonly weights: Float32Array;
}

function datumValues(shape: SdkRequestShape, random: () => number): DatumValues {
  const n = shape.tokensPerDatum;
  // n + 1 ids: the model sees ids[0..n), its targets are ids[1..n].
  const ids = Array.from({ length: n + 1 }, () => Math.floor(random() * SDK_VOCABULARY));
  return {
    tokens: Int32Array.from(ids.slice(0, n)),
    targets: BigInt64Array.from(ids.slice(1), (id) => BigInt(id)),
    weights: Float32Array.from({ length: n }, (_, i) => (i < shape.promptTokens ? 0 : 1)),
  };
}

function bytesOf(array: Int32Array | BigInt64Array | Float32Array): Uint8Array {
  // Typed arrays are little-endian on every platform Node runs on, as numpy's tobytes() is for the SDK.
  return new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
}

/** Python's `json.dumps` of a float: always a decimal point or exponent. */
function pythonFloat(value: number): string {
  const text = String(value);
  return /[.eE]/.test(text) || !Number.isFinite(value) ? text : `${text}.0`;
}

/**
 * The same request on both wires; `salt` makes requests distinct (ids depend on it, as on the
 * request's `seq_id` in a real run: every step trains on new tokens).
 */
export function sdkBodies(
  modelId: string,
  seqId: number,
  salt: number,
  shape: SdkRequestShape = SDK_4X512,
): SdkBodies {
  const random = prng(salt * 2_654_435_761 + 1);
  const datums = Array.from({ length: shape.datums }, () => datumValues(shape, random));
  const message = create(ForwardBackwardRequestSchema, {
    modelId,
    seqId,
    lossFn: 'cross_entropy',
    data: datums.map((datum) => ({
      modelInput: [{ chunk: { case: 'encodedText' as const, value: { tokens: bytesOf(datum.tokens) } } }],
      lossFnInputs: {
        target_tokens: {
          encoding: { case: 'dense' as const, value: bytesOf(datum.targets) },
          dtype: DType.DTYPE_INT64,
          shape: [BigInt(shape.tokensPerDatum)],
        },
        weights: {
          encoding: { case: 'dense' as const, value: bytesOf(datum.weights) },
          dtype: DType.DTYPE_FLOAT32,
          shape: [BigInt(shape.tokensPerDatum)],
        },
      },
    })),
  });
  const protobuf = toBinary(ForwardBackwardRequestSchema, message);
  if (ready === undefined) throw new Error('call (and await) initSdkWire() first');
  const zstd = compress(protobuf, 3);

  // Pydantic's field order: ForwardBackwardRequest(forward_backward_input, model_id, seq_id),
  // Datum(loss_fn_inputs, model_input), TensorData(data, dtype, shape), chunk (tokens, type).
  const weightsMarker = (index: number) => `__weights_${index}__`;
  const json = JSON.stringify({
    forward_backward_input: {
      data: datums.map((datum, index) => ({
        loss_fn_inputs: {
          target_tokens: {
            data: Array.from(datum.targets, Number),
            dtype: 'int64',
            shape: [shape.tokensPerDatum],
          },
          weights: { data: weightsMarker(index), dtype: 'float32', shape: [shape.tokensPerDatum] },
        },
        model_input: { chunks: [{ tokens: Array.from(datum.tokens), type: 'encoded_text' }] },
      })),
      loss_fn: 'cross_entropy',
    },
    model_id: modelId,
    seq_id: seqId,
  }).replace(/"__weights_(\d+)__"/g, (_, index: string) => {
    const weights = datums[Number(index)]!.weights;
    return `[${Array.from(weights, pythonFloat).join(',')}]`;
  });
  return { protobuf, zstd, json, tokens: shape.datums * shape.tokensPerDatum };
}
