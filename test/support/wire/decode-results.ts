import { fromBinary } from '@bufbuild/protobuf';
import {
  DType,
  ForwardBackwardOutputSchema,
  SampleResponseSchema,
  StopReason,
  type Tensor,
  type TopkLogprobs,
} from '../../../shared/wire/gen/tinker_public_pb.js';

/**
 * Test-only decoders for our result encoders, reading the bytes the way the SDK's response_conv.py
 * does (byte offsets, trailing shapes, NaN and top-k padding), but taking each record's own field set.
 */

export interface PlainTensor {
  dtype: 'float32' | 'int64';
  shape: number[];
  data: number[];
}

function view(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function numbers(bytes: Uint8Array, kind: 'i32' | 'f32' | 'i64'): number[] {
  const data = view(bytes);
  const size = kind === 'i64' ? 8 : 4;
  return Array.from({ length: bytes.length / size }, (_, i) =>
    kind === 'i32'
      ? data.getInt32(i * 4, true)
      : kind === 'f32'
        ? data.getFloat32(i * 4, true)
        : Number(data.getBigInt64(i * 8, true)),
  );
}

export function decodeForwardBackwardOutput(bytes: Uint8Array) {
  const message = fromBinary(ForwardBackwardOutputSchema, bytes);
  const outputs: Record<string, PlainTensor>[] = [];
  const records = message.lossFnOutputs.map((record) => {
    const datums: Record<string, PlainTensor>[] = Array.from(
      { length: Number(record.numDatums) },
      () => ({}),
    );
    for (const [name, batched] of Object.entries(record.fields)) {
      const float = batched.dtype === DType.DTYPE_FLOAT32;
      const offsets = numbers(batched.offsets, 'i64');
      const trailing = batched.trailingShape.map(Number);
      const inner = trailing.reduce((a, b) => a * b, 1);
      datums.forEach((datum, i) => {
        const slice = batched.data.subarray(offsets[i], offsets[i + 1]);
        const data = numbers(slice, float ? 'f32' : 'i64');
        datum[name] = { dtype: float ? 'float32' : 'int64', shape: [data.length / inner, ...trailing], data };
      });
    }
    outputs.push(...datums);
    return { numDatums: Number(record.numDatums), fields: Object.keys(record.fields).sort() };
  });
  return {
    loss_fn_output_type: message.lossFnOutputType,
    loss_fn_outputs: outputs,
    metrics: { ...message.metrics },
    records,
  };
}

type TopkRows = ([number, number][] | null)[];

/** [length, k] top-k matrices as rows, trailing (0, -99999.0) padding dropped, an all-padding row null. */
function topkRows(topk: TopkLogprobs): TopkRows {
  const ids = numbers(topk.tokenIds, 'i32');
  const logprobs = numbers(topk.logprobs, 'f32');
  return Array.from({ length: topk.length }, (_, row) => {
    const cells: [number, number][] = [];
    for (let column = 0; column < topk.k; column++) {
      const at = row * topk.k + column;
      cells.push([ids[at] as number, logprobs[at] as number]);
    }
    while (cells.length > 0 && cells.at(-1)?.[0] === 0 && cells.at(-1)?.[1] === -99999) cells.pop();
    return cells.length === 0 ? null : cells;
  });
}

/** A dense float32 or int64 Tensor of shape [rows, columns] as rows (NaN as null when `nullNaN`). */
function matrixRows(tensor: Tensor, nullNaN: boolean): (number | null)[][] {
  if (tensor.encoding.case !== 'dense') throw new Error('expected a dense tensor');
  const values = numbers(tensor.encoding.value, tensor.dtype === DType.DTYPE_INT64 ? 'i64' : 'f32');
  const [rows, columns] = tensor.shape.map(Number) as [number, number];
  return Array.from({ length: rows }, (_, row) =>
    values
      .slice(row * columns, (row + 1) * columns)
      .map((value) => (nullNaN && Number.isNaN(value) ? null : value)),
  );
}

/**
 * A SampleResponse as plain values. The SDK 0.26+ outputs (W8) appear only when the message has them:
 * `sequences[].topk_logprobs`, `prompt_alt_tokens` and `target_prompt_logprobs`.
 */
export function decodeSampleResponse(bytes: Uint8Array) {
  const message = fromBinary(SampleResponseSchema, bytes);
  const topk = message.topkPromptLogprobs;
  const rows: TopkRows | null = topk !== undefined && topk.k > 0 && topk.length > 0 ? topkRows(topk) : null;
  const alt = message.promptAltTokens;
  return {
    sequences: message.sequences.map((sequence) => ({
      stop_reason: sequence.stopReason === StopReason.LENGTH ? 'length' : 'stop',
      tokens: numbers(sequence.tokens, 'i32'),
      logprobs: sequence.logprobs?.length ? numbers(sequence.logprobs, 'f32') : null,
      ...(sequence.topkSampledLogprobs === undefined
        ? {}
        : { topk_logprobs: topkRows(sequence.topkSampledLogprobs) }),
    })),
    prompt_logprobs: message.promptLogprobs?.length
      ? numbers(message.promptLogprobs, 'f32').map((value) => (Number.isNaN(value) ? null : value))
      : null,
    topk_prompt_logprobs: rows,
    prompt_cache_hit_tokens: message.promptCacheHitTokens,
    ...(alt?.tokens === undefined || alt.logprobs === undefined
      ? {}
      : {
          prompt_alt_tokens: {
            tokens: matrixRows(alt.tokens, false),
            logprobs: matrixRows(alt.logprobs, false),
          },
        }),
    ...(message.targetPromptLogprobs === undefined
      ? {}
      : { target_prompt_logprobs: matrixRows(message.targetPromptLogprobs, true) }),
  };
}
