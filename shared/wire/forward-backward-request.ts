import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import type { LossConfigValue } from '../backend/loss-config.js';
import type { Datum, EncodedTextChunk, ForwardBackwardInput, ProvenanceSpan } from '../backend/pass-input.js';
import type { Tensor } from '../backend/tensor.js';
import { invalidField as invalid } from '../base/errors.js';
import { arrayBytes, readInt32 } from './array-bytes.js';
import {
  type Chunk,
  type Datum as DatumMessage,
  ForwardBackwardRequestSchema,
  type LossConfigValue as LossConfigValueMessage,
  type ProvenanceSpan as ProvenanceSpanMessage,
} from './gen/tinker_public_pb.js';
import { checkRequestParts, type PartLimits } from './request-parts.js';
import { type CsrBudget, tensorFromMessage, tensorToMessage } from './tensor-message.js';

/** A `ForwardBackwardRequest` (SDK 0.25 body of POST /api/v1/forward_backward) in the backend's typed form. */
export interface ForwardBackwardMessage {
  readonly model_id: string;
  readonly seq_id: number;
  readonly forward_only: boolean;
  readonly input: ForwardBackwardInput;
}

export interface DecodeOptions {
  /** Values all sparse CSR tensors of one request may expand to (default 2^24). */
  readonly maxCsrDenseValues?: number;
  /**
   * Datums and chunks a client's request may hold, checked on the bytes before anything is built
   * (`checkRequestParts`). Absent for stored passes: they were checked at intake.
   */
  readonly limits?: PartLimits;
  /** Filled in with the datums built, for tests and the intake bench to count. */
  readonly counts?: { datumsDecoded: number };
}

const DEFAULT_MAX_CSR_DENSE_VALUES = 1 << 24;

function chunkFromMessage(chunk: Chunk, field: string): EncodedTextChunk {
  const content = chunk.chunk;
  if (content.case === 'image' || content.case === 'dmel') {
    throw invalid(field, `only encoded_text chunks are supported, got ${content.case}`, 422);
  }
  if (content.case !== 'encodedText') throw invalid(field, 'the chunk has no content');
  const bytes = content.value.tokens;
  if (bytes.length % 4 !== 0) {
    throw invalid(`${field}.tokens`, `byte length ${bytes.length} is not a multiple of 4 (int32)`);
  }
  const tokens = readInt32(bytes);
  for (let i = 0; i < tokens.length; i++) {
    if ((tokens[i] as number) < 0) throw invalid(`${field}.tokens`, `token ${i} is ${tokens[i]}, negative`);
  }
  return { type: 'encoded_text', tokens };
}

/** Longest `sequence_id` a span may name (ours are 32 hex digits, a colon and an index). */
const MAX_SEQUENCE_ID_CHARS = 128;

function spanFromMessage(span: ProvenanceSpanMessage, field: string): ProvenanceSpan {
  const arm = span.span;
  if (arm.case === undefined) throw invalid(field, 'names neither prompt_tokens nor sampled_tokens');
  const { sequenceId, offset, length } = arm.value;
  const armField = `${field}.${arm.case === 'promptTokens' ? 'prompt_tokens' : 'sampled_tokens'}`;
  if (sequenceId.length === 0 || sequenceId.length > MAX_SEQUENCE_ID_CHARS) {
    throw invalid(`${armField}.sequence_id`, `must be 1-${MAX_SEQUENCE_ID_CHARS} characters`);
  }
  if (offset < 0n || offset > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw invalid(`${armField}.offset`, `must be >= 0, got ${offset}`);
  }
  if (length < 1n || length > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw invalid(`${armField}.length`, `must be >= 1, got ${length}`);
  }
  return {
    type: arm.case === 'promptTokens' ? 'prompt_tokens' : 'sampled_tokens',
    sequence_id: sequenceId,
    offset: Number(offset),
    length: Number(length),
  };
}

function datumFromMessage(datum: DatumMessage, field: string, budget: CsrBudget): Datum {
  const chunks = datum.modelInput.map((chunk, index) =>
    chunkFromMessage(chunk, `${field}.model_input.chunks.${index}`),
  );
  // fromEntries defines own properties, so a key such as "__proto__" stays a plain key.
  const lossFnInputs = Object.fromEntries(
    Object.entries(datum.lossFnInputs).map(([name, tensor]): [string, Tensor] => [
      name,
      tensorFromMessage(tensor, `${field}.loss_fn_inputs.${name}`, budget),
    ]),
  );
  const inputSpans = datum.modelInputSpans.map((span, i) =>
    spanFromMessage(span, `${field}.model_input_spans.${i}`),
  );
  const lossSpans = datum.lossFnInputSpans.map((span, i) =>
    spanFromMessage(span, `${field}.loss_fn_input_spans.${i}`),
  );
  return {
    model_input: { chunks },
    loss_fn_inputs: lossFnInputs,
    ...(inputSpans.length > 0 ? { model_input_spans: inputSpans } : {}),
    ...(lossSpans.length > 0 ? { loss_fn_input_spans: lossSpans } : {}),
  };
}

/**
 * `loss_fn_config` (numbers) overlaid by `loss_fn_config_v2` (numbers or text): SDK 0.26+ writes its
 * number entries to both and text entries to v2 only, so v2 wins where a key is in both.
 */
function lossConfigFromMessage(
  numbers: Readonly<Record<string, number>>,
  v2: Readonly<Record<string, LossConfigValueMessage>>,
): Record<string, LossConfigValue> {
  const config: [string, LossConfigValue][] = Object.entries(numbers);
  for (const [key, value] of config) {
    if (!Number.isFinite(value))
      throw invalid(`loss_fn_config.${key}`, `must be a finite number, got ${value}`);
  }
  const merged = Object.fromEntries(config);
  for (const [key, entry] of Object.entries(v2)) {
    const { value } = entry;
    if (value.case === undefined) throw invalid(`loss_fn_config_v2.${key}`, 'has neither number nor text');
    if (value.case === 'number' && !Number.isFinite(value.value)) {
      throw invalid(`loss_fn_config_v2.${key}`, `must be a finite number, got ${value.value}`);
    }
    // defineProperty: a key such as "__proto__" stays a plain key.
    Object.defineProperty(merged, key, { value: value.value, enumerable: true, writable: true });
  }
  return merged;
}

/**
 * Decodes a protobuf `ForwardBackwardRequest`, as the SDK sends it or as `encodeStoredPass` stored it.
 * Every problem is a `ValidationError` naming the field (`body` when the bytes are no such message);
 * limits and required loss inputs are the caller's to check, on the typed result, for both wires.
 */
export function decodeForwardBackwardRequest(
  bytes: Uint8Array,
  options: DecodeOptions = {},
): ForwardBackwardMessage {
  if (options.limits !== undefined) checkRequestParts(bytes, options.limits);
  let message: ReturnType<typeof fromBinary<typeof ForwardBackwardRequestSchema>>;
  try {
    message = fromBinary(ForwardBackwardRequestSchema, bytes, { readUnknownFields: false });
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw invalid('body', `not a valid ForwardBackwardRequest message (${reason})`, 400, error);
  }
  if (options.counts) options.counts.datumsDecoded += message.data.length;
  const limit = options.maxCsrDenseValues ?? DEFAULT_MAX_CSR_DENSE_VALUES;
  const budget: CsrBudget = { remaining: limit, limit };
  const config = lossConfigFromMessage(message.lossFnConfig, message.lossFnConfigV2);
  return {
    model_id: message.modelId,
    seq_id: message.seqId,
    forward_only: message.forwardOnly,
    input: {
      data: message.data.map((datum, index) => datumFromMessage(datum, `data.${index}`, budget)),
      loss_fn: message.lossFn,
      loss_fn_config: config,
    },
  };
}

function spanToMessage(span: ProvenanceSpan) {
  const value = { sequenceId: span.sequence_id, offset: BigInt(span.offset), length: BigInt(span.length) };
  return {
    span:
      span.type === 'prompt_tokens'
        ? { case: 'promptTokens' as const, value }
        : { case: 'sampledTokens' as const, value },
  };
}

/** Entries in one order whatever order they were built in (JS objects still put integer-like keys first). */
function sortedEntries<T>(record: Readonly<Record<string, T>>): [string, T][] {
  return Object.entries(record).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * The canonical bytes of a pass, stored in S3 for both wires and read back by
 * `decodeForwardBackwardRequest`: dense tensors, FLOAT32 / INT64, shapes written, map entries
 * sorted, so equal requests give equal bytes (their digest is the idempotency fingerprint).
 * A rank-0 tensor (shape []) reads back as shape [1]: proto3 cannot tell an empty shape from none.
 */
export function encodeStoredPass(message: ForwardBackwardMessage): Uint8Array {
  const config = sortedEntries(message.input.loss_fn_config);
  const wire = create(ForwardBackwardRequestSchema, {
    modelId: message.model_id,
    seqId: message.seq_id,
    forwardOnly: message.forward_only,
    lossFn: message.input.loss_fn,
    // Numbers where every reader looks; text (SDK 0.26+) only in v2, as the SDK writes it.
    lossFnConfig: Object.fromEntries(
      config.filter((entry): entry is [string, number] => typeof entry[1] === 'number'),
    ),
    lossFnConfigV2: Object.fromEntries(
      config
        .filter((entry): entry is [string, string] => typeof entry[1] === 'string')
        .map(([key, text]) => [key, { value: { case: 'text' as const, value: text } }]),
    ),
    data: message.input.data.map((datum) => ({
      modelInput: datum.model_input.chunks.map((chunk) => ({
        chunk: { case: 'encodedText' as const, value: { tokens: arrayBytes(chunk.tokens) } },
      })),
      lossFnInputs: Object.fromEntries(
        sortedEntries(datum.loss_fn_inputs).map(([name, tensor]) => [name, tensorToMessage(tensor)]),
      ),
      modelInputSpans: (datum.model_input_spans ?? []).map(spanToMessage),
      lossFnInputSpans: (datum.loss_fn_input_spans ?? []).map(spanToMessage),
    })),
  });
  return toBinary(ForwardBackwardRequestSchema, wire);
}
