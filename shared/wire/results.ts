import { create, toBinary } from '@bufbuild/protobuf';
import { float32Tensor, int64Tensor } from '../backend/tensor.js';
import { InfrastructureError } from '../base/errors.js';
import { arrayBytes } from './array-bytes.js';
import {
  type BatchedTensor,
  DType,
  ForwardBackwardOutputSchema,
  SampleResponseSchema,
  StopReason,
} from './gen/tinker_public_pb.js';
import { tensorToMessage } from './tensor-message.js';

/**
 * Results as the worker stores them (JSON), encoded as the protobuf the SDK 0.25 accepts for
 * `retrieve_future` (Accept: application/x-protobuf). Bad input here is our own stored data gone
 * wrong, never the client's, hence `InfrastructureError`.
 */

export interface StoredTensor {
  readonly data: readonly number[];
  readonly dtype: 'float32' | 'int64';
  readonly shape?: readonly number[] | null;
}

export interface StoredForwardBackwardResult {
  readonly loss_fn_output_type: string;
  readonly loss_fn_outputs: readonly Readonly<Record<string, StoredTensor>>[];
  readonly metrics: Readonly<Record<string, number>>;
}

type TopkRows = readonly (readonly (readonly [number, number])[] | null)[];

export interface StoredSampledSequence {
  readonly stop_reason: 'stop' | 'length';
  readonly tokens: readonly number[];
  readonly logprobs?: readonly number[] | null;
  /** SDK 0.26+ `topk_sample_logprobs`: a row per generated token. */
  readonly topk_logprobs?: TopkRows | null;
}

export interface StoredSampleResult {
  readonly sequences: readonly StoredSampledSequence[];
  readonly prompt_logprobs?: readonly (number | null)[] | null;
  readonly topk_prompt_logprobs?: TopkRows | null;
  readonly prompt_cache_hit_tokens?: number;
  /** SDK 0.26+ (W8): [prompt tokens - 1][k] draws and their logprobs. */
  readonly prompt_alt_tokens?: {
    readonly tokens: readonly (readonly number[])[];
    readonly logprobs: readonly (readonly number[])[];
  } | null;
  /** SDK 0.26+ (W8): [prompt tokens - 1][K]; null where no id was asked. */
  readonly target_prompt_logprobs?: readonly (readonly (number | null)[])[] | null;
}

/** What the SDK reads as "no top-k entry here" (tinker/types/sample_response.py MASK_LOGPROB). */
const TOPK_EMPTY_TOKEN = 0;
const TOPK_EMPTY_LOGPROB = -99999.0;

function broken(field: string, problem: string): InfrastructureError {
  return new InfrastructureError(`stored result ${field}: ${problem}`, { context: { field } });
}

function byKey<T>(record: Readonly<Record<string, T>>): [string, T][] {
  return Object.entries(record).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

function tensorValues(tensor: StoredTensor, field: string): Float32Array | BigInt64Array {
  if (tensor.dtype === 'float32') return Float32Array.from(tensor.data);
  const values = new BigInt64Array(tensor.data.length);
  for (let i = 0; i < values.length; i++) {
    const value = tensor.data[i] as number;
    if (!Number.isSafeInteger(value)) throw broken(`${field}.data`, `int64 value ${i} is ${value}`);
    values[i] = BigInt(value);
  }
  return values;
}

/** Everything after the leading dimension; the SDK rebuilds that one from the element count. */
function trailingShape(tensor: StoredTensor, field: string): number[] {
  const shape = tensor.shape ?? [tensor.data.length];
  let size = 1;
  for (const dimension of shape) size *= dimension;
  if (size !== tensor.data.length) {
    throw broken(`${field}.shape`, `[${shape.join(', ')}] does not hold ${tensor.data.length} values`);
  }
  return shape.slice(1);
}

/** Datums can share a record when the same fields have the same dtypes and trailing shapes. */
function recordSignature(datum: Readonly<Record<string, StoredTensor>>, field: string): string {
  return JSON.stringify(
    byKey(datum).map(([name, tensor]) => [name, tensor.dtype, trailingShape(tensor, `${field}.${name}`)]),
  );
}

function concatenate(parts: readonly Uint8Array[], total: number): Uint8Array {
  const out = new Uint8Array(total);
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

/** One field of consecutive datums as a BatchedTensor: values concatenated, byte offsets. */
function batchField(
  datums: readonly Readonly<Record<string, StoredTensor>>[],
  first: number,
  name: string,
): Omit<BatchedTensor, '$typeName'> {
  const parts: Uint8Array[] = [];
  const offsets = new BigInt64Array(datums.length + 1);
  let total = 0;
  for (const [index, datum] of datums.entries()) {
    const field = `loss_fn_outputs.${first + index}.${name}`;
    const bytes = arrayBytes(tensorValues(datum[name] as StoredTensor, field));
    parts.push(bytes);
    total += bytes.length;
    offsets[index + 1] = BigInt(total);
  }
  const sample = datums[0]?.[name] as StoredTensor;
  return {
    data: concatenate(parts, total),
    offsets: arrayBytes(offsets),
    dtype: sample.dtype === 'float32' ? DType.DTYPE_FLOAT32 : DType.DTYPE_INT64,
    trailingShape: trailingShape(sample, `loss_fn_outputs.${first}.${name}`).map(BigInt),
  };
}

/**
 * A stored forward / forward_backward result as `ForwardBackwardOutput` bytes. Consecutive datums
 * with the same fields, dtypes and trailing shapes share one ArrayRecord; a change starts the next,
 * so datum order survives and there are as few records as the data allows.
 */
export function encodeForwardBackwardOutput(result: StoredForwardBackwardResult): Uint8Array {
  const outputs = result.loss_fn_outputs;
  const records: { first: number; datums: (typeof outputs)[number][]; signature: string }[] = [];
  for (const [index, datum] of outputs.entries()) {
    const signature = recordSignature(datum, `loss_fn_outputs.${index}`);
    const open = records.at(-1);
    if (open !== undefined && open.signature === signature) open.datums.push(datum);
    else records.push({ first: index, datums: [datum], signature });
  }
  for (const [key, value] of Object.entries(result.metrics)) {
    if (typeof value !== 'number') throw broken(`metrics.${key}`, `is ${typeof value}, not a number`);
  }
  const message = create(ForwardBackwardOutputSchema, {
    lossFnOutputType: result.loss_fn_output_type,
    metrics: Object.fromEntries(byKey(result.metrics)),
    lossFnOutputs: records.map(({ first, datums }) => ({
      numDatums: BigInt(datums.length),
      fields: Object.fromEntries(
        byKey(datums[0] ?? {}).map(([name]) => [name, batchField(datums, first, name)]),
      ),
    })),
  });
  return toBinary(ForwardBackwardOutputSchema, message);
}

function topkMatrices(rows: TopkRows) {
  let k = 0;
  for (const row of rows) k = Math.max(k, row?.length ?? 0);
  const tokenIds = new Int32Array(rows.length * k).fill(TOPK_EMPTY_TOKEN);
  const logprobs = new Float32Array(rows.length * k).fill(TOPK_EMPTY_LOGPROB);
  for (const [index, row] of rows.entries()) {
    for (const [column, [token, logprob]] of (row ?? []).entries()) {
      tokenIds[index * k + column] = token;
      logprobs[index * k + column] = logprob;
    }
  }
  return {
    tokenIds: arrayBytes(tokenIds),
    logprobs: arrayBytes(logprobs),
    k,
    length: rows.length,
  };
}

/** Rows of equal width as one flat array and its [rows, width] shape (width from the first row). */
function matrix(rows: readonly (readonly (number | null)[])[], field: string) {
  const width = rows[0]?.length ?? 0;
  const values: number[] = [];
  for (const [index, row] of rows.entries()) {
    if (row.length !== width) throw broken(`${field}.${index}`, `has ${row.length} values, not ${width}`);
    for (const value of row) values.push(value ?? Number.NaN);
  }
  return { values, shape: [rows.length, width] };
}

function promptAltTokens(alt: NonNullable<StoredSampleResult['prompt_alt_tokens']>) {
  const tokens = matrix(alt.tokens, 'prompt_alt_tokens.tokens');
  const logprobs = matrix(alt.logprobs, 'prompt_alt_tokens.logprobs');
  return {
    tokens: tensorToMessage(int64Tensor(tokens.values, tokens.shape)),
    logprobs: tensorToMessage(float32Tensor(logprobs.values, logprobs.shape)),
  };
}

/** Dense float32 [prompt tokens - 1, K]: NaN (the SDK's "no value") where no id was asked. */
function targetPromptLogprobs(rows: NonNullable<StoredSampleResult['target_prompt_logprobs']>) {
  const { values, shape } = matrix(rows, 'target_prompt_logprobs');
  return tensorToMessage(float32Tensor(values, shape));
}

/**
 * A stored sample result as `SampleResponse` bytes: a null prompt logprob is NaN (the SDK's "no
 * value"); top-k rows (prompt and sampled) are padded to the widest row with (0, -99999.0), a null row
 * all padding; `prompt_alt_tokens` and `target_prompt_logprobs` are dense Tensors (W8).
 */
export function encodeSampleResponse(result: StoredSampleResult): Uint8Array {
  const prompt = result.prompt_logprobs;
  const message = create(SampleResponseSchema, {
    sequences: result.sequences.map((sequence) => ({
      stopReason: sequence.stop_reason === 'length' ? StopReason.LENGTH : StopReason.STOP,
      tokens: arrayBytes(Int32Array.from(sequence.tokens)),
      logprobs: sequence.logprobs == null ? undefined : arrayBytes(Float32Array.from(sequence.logprobs)),
      topkSampledLogprobs: sequence.topk_logprobs == null ? undefined : topkMatrices(sequence.topk_logprobs),
    })),
    promptLogprobs:
      prompt == null ? undefined : arrayBytes(Float32Array.from(prompt, (value) => value ?? Number.NaN)),
    topkPromptLogprobs:
      result.topk_prompt_logprobs == null ? undefined : topkMatrices(result.topk_prompt_logprobs),
    promptCacheHitTokens: result.prompt_cache_hit_tokens ?? 0,
    targetPromptLogprobs:
      result.target_prompt_logprobs == null ? undefined : targetPromptLogprobs(result.target_prompt_logprobs),
    promptAltTokens: result.prompt_alt_tokens == null ? undefined : promptAltTokens(result.prompt_alt_tokens),
  });
  return toBinary(SampleResponseSchema, message);
}
