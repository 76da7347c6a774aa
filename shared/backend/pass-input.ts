import { invalidField as invalid } from '../base/errors.js';
import type { LossConfigValue } from './loss-config.js';
import {
  checkShape,
  denseFromCsr,
  type Float32Tensor,
  type Int64Tensor,
  shapeSize,
  type Tensor,
  type TensorDtype,
} from './tensor.js';

/**
 * A forward / forward_backward input as the backend takes it (W4; docs/architecture.md#the-request-path):
 * token ids in Int32Array, loss inputs as dense typed tensors. The protobuf decoder (shared/wire) and the
 * JSON converter below both produce it, so everything after intake is one form whichever wire the
 * client spoke.
 */

export interface EncodedTextChunk {
  readonly type: 'encoded_text';
  readonly tokens: Int32Array;
}

export interface ModelInput {
  readonly chunks: readonly EncodedTextChunk[];
}

/**
 * Where a run of a datum's positions came from (SDK 0.26+, W8): positions [offset, offset + length)
 * of the prompt (`prompt_tokens`) or of the sampled tokens (`sampled_tokens`) of the sampled sequence
 * `sequence_id`. A datum's spans tile the field they annotate, in order. Intake checks and stores them;
 * the backend does not read them.
 */
export interface ProvenanceSpan {
  readonly type: 'prompt_tokens' | 'sampled_tokens';
  readonly sequence_id: string;
  readonly offset: number;
  readonly length: number;
}

export interface Datum {
  readonly model_input: ModelInput;
  readonly loss_fn_inputs: Readonly<Record<string, Tensor>>;
  readonly model_input_spans?: readonly ProvenanceSpan[];
  readonly loss_fn_input_spans?: readonly ProvenanceSpan[];
}

export interface ForwardBackwardInput {
  readonly data: readonly Datum[];
  readonly loss_fn: string;
  /** Always present (empty when the client sent none); strings only from SDK 0.26+ clients. */
  readonly loss_fn_config: Readonly<Record<string, LossConfigValue>>;
}

/** The JSON members this converter reads (the zod schemas in shared/services/api/schemas.ts check their types). */
export interface TensorDataJson {
  readonly data: readonly number[];
  readonly dtype: TensorDtype;
  readonly shape?: readonly number[] | null;
  readonly sparse_crow_indices?: readonly number[] | null;
  readonly sparse_col_indices?: readonly number[] | null;
}

export interface ModelInputJson {
  readonly chunks: readonly { readonly type?: string; readonly tokens?: readonly number[] }[];
}

/** A span as JSON carries it: `offset` defaults to 0, as in the SDK. */
export type ProvenanceSpanJson = Omit<ProvenanceSpan, 'offset'> & { readonly offset?: number };

export interface DatumJson {
  readonly model_input: ModelInputJson;
  readonly loss_fn_inputs: Readonly<Record<string, TensorDataJson>>;
  readonly model_input_spans?: readonly ProvenanceSpanJson[] | null;
  readonly loss_fn_input_spans?: readonly ProvenanceSpanJson[] | null;
}

function spansFromJson(spans: readonly ProvenanceSpanJson[] | null | undefined): ProvenanceSpan[] {
  return (spans ?? []).map((span) => ({
    type: span.type,
    sequence_id: span.sequence_id,
    offset: span.offset ?? 0,
    length: span.length,
  }));
}

export interface ForwardBackwardInputJson {
  readonly data: readonly DatumJson[];
  readonly loss_fn: string;
  readonly loss_fn_config?: Readonly<Record<string, number | string>> | null;
}

/** Every token id of a model input, chunks concatenated. */
export function inputTokenCount(input: ModelInput): number {
  let count = 0;
  for (const chunk of input.chunks) count += chunk.tokens.length;
  return count;
}

export function concatTokens(input: ModelInput): Int32Array {
  if (input.chunks.length === 1) return (input.chunks[0] as EncodedTextChunk).tokens;
  const all = new Int32Array(inputTokenCount(input));
  let offset = 0;
  for (const chunk of input.chunks) {
    all.set(chunk.tokens, offset);
    offset += chunk.tokens.length;
  }
  return all;
}

export function modelInputFromJson(input: ModelInputJson, field: string): ModelInput {
  return {
    chunks: input.chunks.map((chunk, index) => {
      const chunkField = `${field}.chunks.${index}`;
      if (chunk.type !== undefined && chunk.type !== 'encoded_text') {
        throw invalid(
          `${chunkField}.type`,
          `only encoded_text chunks are supported, got "${chunk.type}"`,
          422,
        );
      }
      if (chunk.tokens === undefined)
        throw invalid(`${chunkField}.tokens`, 'required for an encoded_text chunk');
      return { type: 'encoded_text', tokens: Int32Array.from(chunk.tokens) };
    }),
  };
}

/** Values the sparse tensors of one request may still expand to (a shape costs nothing in the body). */
export interface SparseBudget {
  remaining: number;
  readonly limit: number;
}

/** As the protobuf decoder's default (shared/wire/forward-backward-request.ts). */
const DEFAULT_MAX_SPARSE_VALUES = 1 << 24;

/** A JSON tensor made typed and dense; the shape defaults to 1-D. */
export function tensorFromJson(tensor: TensorDataJson, field: string, budget?: SparseBudget): Tensor {
  const sparse = tensor.sparse_crow_indices != null || tensor.sparse_col_indices != null;
  if (tensor.dtype === 'int64' && !tensor.data.every(Number.isSafeInteger)) {
    throw invalid(`${field}.data`, 'dtype int64 needs integer values');
  }
  const values =
    tensor.dtype === 'float32'
      ? Float32Array.from(tensor.data)
      : BigInt64Array.from(tensor.data, (value) => BigInt(value));
  if (sparse) {
    if (tensor.sparse_crow_indices == null || tensor.sparse_col_indices == null) {
      throw invalid(field, 'a sparse tensor needs both sparse_crow_indices and sparse_col_indices');
    }
    if (tensor.shape == null) throw invalid(`${field}.shape`, 'a sparse CSR tensor needs its 2-D shape');
    const expanded = shapeSize(tensor.shape);
    if (budget !== undefined && tensor.shape.length === 2 && expanded > budget.remaining) {
      throw invalid(
        `${field}.shape`,
        `sparse tensors of this request expand to more than ${budget.limit} values`,
        413,
      );
    }
    if (budget !== undefined) budget.remaining -= expanded;
    const dense = denseFromCsr(
      values,
      tensor.sparse_crow_indices,
      tensor.sparse_col_indices,
      tensor.shape,
      field,
    );
    return tensor.dtype === 'float32'
      ? ({ dtype: 'float32', data: dense as Float32Array, shape: [...tensor.shape] } satisfies Float32Tensor)
      : ({ dtype: 'int64', data: dense as BigInt64Array, shape: [...tensor.shape] } satisfies Int64Tensor);
  }
  const shape = tensor.shape == null ? [values.length] : [...tensor.shape];
  checkShape(shape, values.length, field);
  return tensor.dtype === 'float32'
    ? { dtype: 'float32', data: values as Float32Array, shape }
    : { dtype: 'int64', data: values as BigInt64Array, shape };
}

/**
 * `loss_fn_config` values: finite numbers, or strings (SDK 0.26+ sends `Dict[str, float | str]`);
 * which keys a loss takes, and of what type, is checked against the loss (shared/backend/loss-config.ts).
 */
export function lossFnConfigFromJson(
  config: Readonly<Record<string, number | string>> | null | undefined,
  field: string,
): Record<string, LossConfigValue> {
  const out: Record<string, LossConfigValue> = {};
  for (const [key, value] of Object.entries(config ?? {})) {
    if (typeof value !== 'string' && (typeof value !== 'number' || !Number.isFinite(value))) {
      throw invalid(`${field}.${key}`, 'must be a finite number or a string');
    }
    out[key] = value;
  }
  return out;
}

/**
 * The JSON body of `forward_backward_input` / `forward_input` in the backend's typed form; sparse
 * tensors expand to `maxSparseValues` values at most, together (413 past it).
 */
export function passInputFromJson(
  input: ForwardBackwardInputJson,
  field: string,
  maxSparseValues = DEFAULT_MAX_SPARSE_VALUES,
): ForwardBackwardInput {
  const budget: SparseBudget = { remaining: maxSparseValues, limit: maxSparseValues };
  return {
    loss_fn: input.loss_fn,
    loss_fn_config: lossFnConfigFromJson(input.loss_fn_config, `${field}.loss_fn_config`),
    data: input.data.map((datum, index) => {
      const datumField = `${field}.data.${index}`;
      const lossInputs: Record<string, Tensor> = {};
      for (const [name, tensor] of Object.entries(datum.loss_fn_inputs)) {
        lossInputs[name] = tensorFromJson(tensor, `${datumField}.loss_fn_inputs.${name}`, budget);
      }
      return {
        model_input: modelInputFromJson(datum.model_input, `${datumField}.model_input`),
        loss_fn_inputs: lossInputs,
        ...(datum.model_input_spans?.length
          ? { model_input_spans: spansFromJson(datum.model_input_spans) }
          : {}),
        ...(datum.loss_fn_input_spans?.length
          ? { loss_fn_input_spans: spansFromJson(datum.loss_fn_input_spans) }
          : {}),
      };
    }),
  };
}
