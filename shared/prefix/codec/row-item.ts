import { PrefixCorruptError } from '../errors.js';
import { DIGEST_BYTES, equalBytes, sha256 } from './digest.js';
import { assertTokenIds, packTokens, unpackTokens } from './token-packing.js';
import { ByteReader, ByteWriter } from './varint.js';

/**
 * Binary layout of one stored prefix item: one chunk of one call's delta at one cut. Everything a
 * reader checks is inside the bytes (ids, lengths, versions), and the bytes end with their own
 * sha256, so corruption is caught even before the commit record's digest is compared.
 *
 *   u8 schema | str callId | str attempt | str contentId | varint cut, chunkIndex, chunkCount,
 *   prevLength, deltaLength, cumulativeLength, chunkStart, chunkTokens, weightVersion |
 *   packed token ids | chunkTokens x float32 LE logprobs | sha256 of all the preceding bytes
 */
export const PREFIX_SCHEMA_VERSION = 1;

export interface RowItemHeader {
  readonly callId: string;
  readonly attempt: string;
  readonly contentId: string;
  readonly cut: number;
  readonly chunkIndex: number;
  readonly chunkCount: number;
  /** Tokens of the call before this cut. */
  readonly prevLength: number;
  /** Tokens this cut adds (all chunks). */
  readonly deltaLength: number;
  /** prevLength + deltaLength. */
  readonly cumulativeLength: number;
  /** Offset of this chunk's first token within the cut's delta. */
  readonly chunkStart: number;
  readonly weightVersion: number;
}

export interface RowItem extends RowItemHeader {
  readonly tokens: Uint32Array;
  readonly logprobs: Float32Array;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

function writeString(out: ByteWriter, value: string): void {
  const bytes = encoder.encode(value);
  out.varint(bytes.length);
  out.bytes(bytes);
}

function readString(input: ByteReader): string {
  return decoder.decode(input.bytes(input.varint()));
}

export function encodeRowItem(item: RowItem): Uint8Array {
  if (item.tokens.length !== item.logprobs.length) {
    throw new RangeError(`tokens (${item.tokens.length}) and logprobs (${item.logprobs.length}) differ`);
  }
  assertTokenIds(item.tokens);
  const out = new ByteWriter(64 + item.tokens.length * 7);
  out.byte(PREFIX_SCHEMA_VERSION);
  writeString(out, item.callId);
  writeString(out, item.attempt);
  writeString(out, item.contentId);
  for (const value of [
    item.cut,
    item.chunkIndex,
    item.chunkCount,
    item.prevLength,
    item.deltaLength,
    item.cumulativeLength,
    item.chunkStart,
    item.tokens.length,
    item.weightVersion,
  ]) {
    out.varint(value);
  }
  packTokens(item.tokens, out);
  // Float32 little-endian whatever the host's byte order, so stored bytes are the same everywhere.
  const floats = new DataView(new ArrayBuffer(item.logprobs.length * 4));
  for (let i = 0; i < item.logprobs.length; i++) floats.setFloat32(i * 4, item.logprobs[i] as number, true);
  out.bytes(new Uint8Array(floats.buffer));
  const body = out.finish();
  const whole = new Uint8Array(body.length + DIGEST_BYTES);
  whole.set(body);
  whole.set(sha256(body), body.length);
  return whole;
}

function corrupt(message: string, cause?: unknown): PrefixCorruptError {
  return new PrefixCorruptError(message, cause === undefined ? {} : { cause });
}

export function decodeRowItem(bytes: Uint8Array): RowItem {
  if (bytes.length < DIGEST_BYTES + 1) throw corrupt('prefix item shorter than its digest');
  const body = bytes.subarray(0, bytes.length - DIGEST_BYTES);
  if (!equalBytes(sha256(body), bytes.subarray(bytes.length - DIGEST_BYTES))) {
    throw corrupt('prefix item digest mismatch');
  }
  try {
    const input = new ByteReader(body);
    const schema = input.byte();
    if (schema !== PREFIX_SCHEMA_VERSION) throw corrupt(`unknown prefix schema version ${schema}`);
    const callId = readString(input);
    const attempt = readString(input);
    const contentId = readString(input);
    const [
      cut,
      chunkIndex,
      chunkCount,
      prevLength,
      deltaLength,
      cumulativeLength,
      chunkStart,
      count,
      weight,
    ] = Array.from({ length: 9 }, () => input.varint()) as [
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
      number,
    ];
    if (cumulativeLength !== prevLength + deltaLength || chunkStart + count > deltaLength) {
      throw corrupt('prefix item lengths are inconsistent');
    }
    if (chunkIndex >= chunkCount) throw corrupt('prefix item chunk index out of range');
    const tokens = unpackTokens(input, count);
    const floatBytes = input.bytes(count * 4);
    const view = new DataView(floatBytes.buffer, floatBytes.byteOffset, floatBytes.byteLength);
    const logprobs = new Float32Array(count);
    for (let i = 0; i < count; i++) logprobs[i] = view.getFloat32(i * 4, true);
    if (input.remaining !== 0) throw corrupt('prefix item has trailing bytes');
    return {
      callId,
      attempt,
      contentId,
      cut,
      chunkIndex,
      chunkCount,
      prevLength,
      deltaLength,
      cumulativeLength,
      chunkStart,
      weightVersion: weight,
      tokens,
      logprobs,
    };
  } catch (error) {
    if (error instanceof PrefixCorruptError) throw error;
    throw corrupt('prefix item is malformed', error);
  }
}
