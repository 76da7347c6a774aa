import { invalidField as invalid } from '../base/errors.js';

/**
 * How many parts of each kind one forward / forward_backward request may hold, on either wire, and a
 * count of a protobuf `ForwardBackwardRequest`'s parts read from its wire bytes alone, before any
 * message is built: a 536-byte zstd body can hold 2,500,000 empty datums (`1a 00` each), and building
 * them costs ~780 MB before any check could run. The walk reads tags and lengths only, so it costs
 * what the bytes cost, never what they declare.
 */

/** Chunks per datum the request-wide chunk limit allows on average (the SDK sends one per text span). */
export const CHUNKS_PER_DATUM = 16;
/** loss_fn_inputs one datum may name: the losses use at most four (backend/loss-config.ts). */
export const MAX_LOSS_FN_INPUTS = 16;
/** loss_fn_config entries: the losses take at most two keys. */
export const MAX_LOSS_FN_CONFIG_ENTRIES = 16;
/** A loss input is [N] or [N, K]: the rank the losses can use. */
export const MAX_LOSS_INPUT_RANK = 2;

export interface PartLimits {
  readonly maxDatums: number;
  /** Model input chunks of all datums together. */
  readonly maxChunks: number;
}

export function partLimits(maxDatums: number): PartLimits {
  return { maxDatums, maxChunks: CHUNKS_PER_DATUM * maxDatums };
}

/**
 * The refusal of a request with more datums than the limit, on both wires; `atLeast` when counting
 * stopped at the limit.
 */
export function tooManyDatums(field: string, datums: number, maxDatums: number, atLeast = false) {
  return invalid(
    field,
    `${atLeast ? 'at least ' : ''}${datums} datums exceeds the limit of ${maxDatums}`,
    413,
  );
}

export function tooManyChunks(field: string, chunks: number, maxChunks: number, atLeast = false) {
  return invalid(
    field,
    `${atLeast ? 'at least ' : ''}${chunks} model_input chunks exceeds the limit of ${maxChunks} (${CHUNKS_PER_DATUM} per datum of MAX_DATUMS)`,
    413,
  );
}

export function tooManyEntries(field: string, entries: number, max: number, atLeast = false) {
  return invalid(field, `${atLeast ? 'at least ' : ''}${entries} entries exceeds the limit of ${max}`);
}

export function rankTooHigh(field: string, rank: number) {
  return invalid(
    field,
    `has rank ${rank}; a loss input is [N] or [N, K] (rank ${MAX_LOSS_INPUT_RANK} at most)`,
  );
}

/** What a walk counted. */
export interface RequestPartCounts {
  datums: number;
  chunks: number;
}

// ForwardBackwardRequest, Datum, map entry and Tensor field numbers (tinker_public.proto).
const REQUEST_DATA = 3;
const REQUEST_LOSS_FN_CONFIG = 5;
const DATUM_MODEL_INPUT = 1;
const DATUM_LOSS_FN_INPUTS = 2;
const ENTRY_KEY = 1;
const ENTRY_VALUE = 2;
const TENSOR_SHAPE = 4;

const WIRE_VARINT = 0;
const WIRE_FIXED64 = 1;
const WIRE_LENGTH = 2;
const WIRE_FIXED32 = 5;

/** A field's number, wire type and where its value lies (reused by the walk: read, don't keep). */
interface Field {
  number: number;
  wireType: number;
  /** A length-delimited field's bytes: [start, end). */
  start: number;
  end: number;
}

const WIRE_START_GROUP = 3;
const WIRE_END_GROUP = 4;

/** Bytes the walk cannot follow; the reason reads as protobuf-es words the same problem. */
function malformed(reason: string): Error {
  return invalid('body', `not a valid ForwardBackwardRequest message (${reason})`);
}

/**
 * Where the varint at `at` ends, its low 32 bits in `varint.value`: tags and lengths are read as
 * protobuf-es reads them (uint32), so the walk and the decoder see the same fields.
 */
const varint = { value: 0 };
function readVarint(bytes: Uint8Array, at: number, end: number): number {
  let value = 0;
  for (let i = 0; i < 10; i++) {
    if (at + i >= end) throw malformed('premature EOF');
    const byte = bytes[at + i] as number;
    if (i < 5) value += (byte & 0x7f) * 2 ** (7 * i);
    if ((byte & 0x80) === 0) {
      varint.value = value % 2 ** 32;
      return at + i + 1;
    }
  }
  throw malformed('invalid varint');
}

/** Where the field whose tag ends at `at` ends: its value skipped (a group up to its end tag). */
function fieldEnd(bytes: Uint8Array, at: number, end: number, field: Field): number {
  switch (field.wireType) {
    case WIRE_VARINT:
      field.start = at;
      return readVarint(bytes, at, end);
    case WIRE_FIXED64:
      field.start = at;
      return at + 8;
    case WIRE_FIXED32:
      field.start = at;
      return at + 4;
    case WIRE_LENGTH:
      field.start = readVarint(bytes, at, end);
      return field.start + varint.value;
    case WIRE_START_GROUP: {
      field.start = at;
      const member: Field = { number: 0, wireType: 0, start: 0, end: 0 };
      let next = at;
      for (;;) {
        next = readTag(bytes, next, end, member);
        if (member.wireType === WIRE_END_GROUP) {
          if (member.number !== field.number) throw malformed('invalid end group tag');
          return next;
        }
        next = fieldEnd(bytes, next, end, member);
        if (next > end) throw malformed('premature EOF');
      }
    }
    default:
      throw malformed(`cant skip wire type ${field.wireType}`);
  }
}

function readTag(bytes: Uint8Array, at: number, end: number, field: Field): number {
  const next = readVarint(bytes, at, end);
  field.number = varint.value >>> 3;
  field.wireType = varint.value & 7;
  if (field.number <= 0 || field.wireType > 5) {
    throw malformed(`illegal tag: field no ${field.number} wire type ${field.wireType}`);
  }
  return next;
}

/**
 * Calls `visit` with each field of bytes [start, end), in order, skipping fields as protobuf-es
 * does; bytes it cannot follow throw `Malformed`. A loop with one reused `Field`, not a generator:
 * a 5 MiB body can hold 2.5 million fields.
 */
function eachField(bytes: Uint8Array, start: number, end: number, visit: (field: Field) => void): void {
  const field: Field = { number: 0, wireType: 0, start: 0, end: 0 };
  let at = start;
  while (at < end) {
    at = readTag(bytes, at, end, field);
    field.end = fieldEnd(bytes, at, end, field);
    if (field.end > end) throw malformed('premature EOF');
    at = field.end;
    visit(field);
  }
}

/** Dimensions of a Tensor's `shape` (packed, or one field per dimension). */
function tensorRank(bytes: Uint8Array, start: number, end: number): number {
  let rank = 0;
  eachField(bytes, start, end, (field) => {
    if (field.number !== TENSOR_SHAPE) return;
    if (field.wireType === WIRE_VARINT) rank += 1;
    else if (field.wireType === WIRE_LENGTH) {
      for (let i = field.start; i < field.end; i++) if (((bytes[i] as number) & 0x80) === 0) rank += 1;
    }
  });
  return rank;
}

function entryKey(bytes: Uint8Array, start: number, end: number): string {
  let key = '';
  eachField(bytes, start, end, (field) => {
    if (field.number === ENTRY_KEY && field.wireType === WIRE_LENGTH) {
      // Enough of the key to name the field; a key can be as long as the body.
      key = new TextDecoder().decode(bytes.subarray(field.start, Math.min(field.end, field.start + 64)));
    }
  });
  return key;
}

/**
 * Counts the datums and chunks of a protobuf `ForwardBackwardRequest`, and refuses, before anything
 * is built: more datums or chunks than `limits` (413), a datum with more than `MAX_LOSS_FN_INPUTS`
 * loss inputs, more than `MAX_LOSS_FN_CONFIG_ENTRIES` config entries, or a loss input of rank above
 * 2 (400, naming the field). Each count stops where it crosses its limit. Bytes the walk cannot
 * follow are a 400 here too, so the decoder never reads past what was counted.
 */
export function checkRequestParts(bytes: Uint8Array, limits: PartLimits): RequestPartCounts {
  const counts: RequestPartCounts = { datums: 0, chunks: 0 };
  let configEntries = 0;
  let problem: Error | undefined;
  eachField(bytes, 0, bytes.length, (field) => {
    if (field.wireType !== WIRE_LENGTH) return;
    if (field.number === REQUEST_LOSS_FN_CONFIG) {
      configEntries += 1;
      if (configEntries > MAX_LOSS_FN_CONFIG_ENTRIES) {
        const refusal = tooManyEntries('loss_fn_config', configEntries, MAX_LOSS_FN_CONFIG_ENTRIES, true);
        throw refusal;
      }
    }
    if (field.number !== REQUEST_DATA) return;
    const datumIndex = counts.datums;
    counts.datums += 1;
    if (counts.datums > limits.maxDatums) {
      throw tooManyDatums('data', counts.datums, limits.maxDatums, true);
    }
    let lossInputs = 0;
    eachField(bytes, field.start, field.end, (member) => {
      if (member.wireType !== WIRE_LENGTH) return;
      if (member.number === DATUM_MODEL_INPUT) {
        counts.chunks += 1;
        if (counts.chunks > limits.maxChunks) {
          throw tooManyChunks('data', counts.chunks, limits.maxChunks, true);
        }
      }
      if (member.number !== DATUM_LOSS_FN_INPUTS || problem !== undefined) return;
      lossInputs += 1;
      const inputsField = `data.${datumIndex}.loss_fn_inputs`;
      if (lossInputs > MAX_LOSS_FN_INPUTS) {
        problem = tooManyEntries(inputsField, lossInputs, MAX_LOSS_FN_INPUTS, true);
        return;
      }
      const entryStart = member.start;
      const entryEnd = member.end;
      eachField(bytes, entryStart, entryEnd, (part) => {
        if (part.number !== ENTRY_VALUE || part.wireType !== WIRE_LENGTH) return;
        const rank = tensorRank(bytes, part.start, part.end);
        if (rank > MAX_LOSS_INPUT_RANK) {
          problem = rankTooHigh(`${inputsField}.${entryKey(bytes, entryStart, entryEnd)}.shape`, rank);
        }
      });
    });
  });
  if (problem !== undefined) throw problem;
  return counts;
}
