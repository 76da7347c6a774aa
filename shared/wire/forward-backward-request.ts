import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import type { Datum, EncodedTextChunk, ForwardBackwardInput } from '../backend/pass-input.js';
import type { Tensor } from '../backend/tensor.js';
import { invalidField as invalid } from '../errors.js';
import { arrayBytes, readInt32 } from './array-bytes.js';
import {
  type Chunk,
  type Datum as DatumMessage,
  ForwardBackwardRequestSchema,
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
  return { model_input: { chunks }, loss_fn_inputs: lossFnInputs };
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
  const config: [string, number][] = Object.entries(message.lossFnConfig);
  for (const [key, value] of config) {
    if (!Number.isFinite(value))
      throw invalid(`loss_fn_config.${key}`, `must be a finite number, got ${value}`);
  }
  return {
    model_id: message.modelId,
    seq_id: message.seqId,
    forward_only: message.forwardOnly,
    input: {
      data: message.data.map((datum, index) => datumFromMessage(datum, `data.${index}`, budget)),
      loss_fn: message.lossFn,
      loss_fn_config: Object.fromEntries(config),
    },
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
  const wire = create(ForwardBackwardRequestSchema, {
    modelId: message.model_id,
    seqId: message.seq_id,
    forwardOnly: message.forward_only,
    lossFn: message.input.loss_fn,
    lossFnConfig: Object.fromEntries(sortedEntries(message.input.loss_fn_config)),
    data: message.input.data.map((datum) => ({
      modelInput: datum.model_input.chunks.map((chunk) => ({
        chunk: { case: 'encodedText' as const, value: { tokens: arrayBytes(chunk.tokens) } },
      })),
      lossFnInputs: Object.fromEntries(
        sortedEntries(datum.loss_fn_inputs).map(([name, tensor]) => [name, tensorToMessage(tensor)]),
      ),
    })),
  });
  return toBinary(ForwardBackwardRequestSchema, wire);
}
