import { PrefixCorruptError } from '../errors.js';
import { DIGEST_BYTES, equalBytes, sha256, sha256WithTrailer } from './digest.js';
import { assertTokenIds, packedSizes, packTokens, smallestPacking, unpackTokens } from './token-packing.js';
import { ByteReader, ByteWriter, varintSize } from './varint.js';

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

/** Float32 is stored little-endian; on such a host (all that Node runs on) its bytes copy as they are. */
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function readString(input: ByteReader): string {
  return decoder.decode(input.bytes(input.varint()));
}

function writeFloats(out: ByteWriter, values: Float32Array): void {
  if (LITTLE_ENDIAN) {
    out.bytes(new Uint8Array(values.buffer, values.byteOffset, values.byteLength));
    return;
  }
  const target = out.claim(values.length * 4);
  const view = new DataView(target.buffer, target.byteOffset, target.byteLength);
  for (let i = 0; i < values.length; i++) view.setFloat32(i * 4, values[i] as number, true);
}

function readFloats(bytes: Uint8Array): Float32Array {
  const values = new Float32Array(bytes.length / 4);
  if (LITTLE_ENDIAN) {
    new Uint8Array(values.buffer).set(bytes);
    return values;
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let i = 0; i < values.length; i++) values[i] = view.getFloat32(i * 4, true);
  return values;
}

export function encodeRowItem(item: RowItem): Uint8Array {
  return encodeRowItemWithDigest(item).bytes;
}

/** The item's bytes and their sha256 (hex), the digest its commit record lists. */
export function encodeRowItemWithDigest(item: RowItem): {
  readonly bytes: Uint8Array;
  readonly digest: string;
} {
  if (item.tokens.length !== item.logprobs.length) {
    throw new RangeError(`tokens (${item.tokens.length}) and logprobs (${item.logprobs.length}) differ`);
  }
  assertTokenIds(item.tokens);
  const sizes = packedSizes(item.tokens);
  const mode = smallestPacking(sizes);
  const strings = [item.callId, item.attempt, item.contentId].map((value) => encoder.encode(value));
  const header = [
    item.cut,
    item.chunkIndex,
    item.chunkCount,
    item.prevLength,
    item.deltaLength,
    item.cumulativeLength,
    item.chunkStart,
    item.tokens.length,
    item.weightVersion,
  ];
  // The exact size, so the buffer is allocated once and returned without a copy.
  let size = 1 + sizes[mode] + item.logprobs.length * 4 + DIGEST_BYTES;
  for (const bytes of strings) size += varintSize(bytes.length) + bytes.length;
  for (const value of header) size += varintSize(value);
  const out = new ByteWriter(size);
  out.byte(PREFIX_SCHEMA_VERSION);
  for (const bytes of strings) {
    out.varint(bytes.length);
    out.bytes(bytes);
  }
  for (const value of header) out.varint(value);
  packTokens(item.tokens, out, mode);
  writeFloats(out, item.logprobs);
  const { trailer, wholeHex } = sha256WithTrailer(out.view());
  out.bytes(trailer);
  const whole = out.view();
  return { bytes: whole.byteLength === whole.buffer.byteLength ? whole : out.finish(), digest: wholeHex };
}

function corrupt(message: string, cause?: unknown): PrefixCorruptError {
  return new PrefixCorruptError(message, cause === undefined ? {} : { cause });
}

export interface DecodeOptions {
  /**
   * The caller has already matched the whole item's sha256 to a digest it trusts (a commit record's),
   * so the embedded digest of the body, which those bytes include, need not be hashed again.
   */
  readonly digestChecked?: boolean;
}

export function decodeRowItem(bytes: Uint8Array, options: DecodeOptions = {}): RowItem {
  if (bytes.length < DIGEST_BYTES + 1) throw corrupt('prefix item shorter than its digest');
  const body = bytes.subarray(0, bytes.length - DIGEST_BYTES);
  if (
    options.digestChecked !== true &&
    !equalBytes(sha256(body), bytes.subarray(bytes.length - DIGEST_BYTES))
  ) {
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
    const logprobs = readFloats(input.bytes(count * 4));
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
