import {
  type ByteReader,
  type ByteWriter,
  TruncatedInputError,
  unzigzag,
  varintSize,
  zigzag,
} from './varint.js';

/**
 * Packs token ids compactly. Three encodings; each row uses whichever is smallest for it, named by
 * one leading byte:
 * - delta: zigzag of the difference to the previous id, LEB128 varint (wins on runs of near ids);
 * - plain: each id as a LEB128 varint (wins when frequent tokens have small ids, as BPE vocabularies do);
 * - bitpacked: every id in the same number of bits, the width of the largest id (bounds the worst
 *   case: uniformly random ids below 150,000 take 18 bits, 2.25 bytes, where varints take 3).
 */
export const TokenPacking = { delta: 0, plain: 1, bitpacked: 2 } as const;
export type TokenPackingMode = (typeof TokenPacking)[keyof typeof TokenPacking];

export const MAX_TOKEN_ID = 0xffff_ffff;

export function assertTokenIds(ids: ArrayLike<number>): void {
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i] as number;
    if (!Number.isInteger(id) || id < 0 || id > MAX_TOKEN_ID) {
      throw new RangeError(`token id at ${i} is not an integer in [0, 2^32): ${id}`);
    }
  }
}

/** 2^0 .. 2^40: every shift the wide bit-packing loops use (carried bits < 8, width <= 32). */
const POWERS_OF_TWO = Float64Array.from({ length: 41 }, (_, exponent) => 2 ** exponent);

/**
 * Widths up to this pack with 32-bit integer operations: fewer than 8 bits are carried between ids,
 * so the accumulator stays below 2^31. Wider ids (never a real vocabulary) take the float path.
 */
const NARROW_WIDTH = 24;

function bitWidth(max: number): number {
  if (max <= 0xffff_ffff) return max === 0 ? 0 : 32 - Math.clz32(max);
  let width = 0;
  let rest = max;
  while (rest > 0) {
    width += 1;
    rest = Math.floor(rest / 2);
  }
  return width;
}

/** `varintSize` without a loop for the values token ids and their deltas take (below 2^28). */
function varintBytes(value: number): number {
  if (value < 0x80) return 1;
  if (value < 0x4000) return 2;
  if (value < 0x20_0000) return 3;
  if (value < 0x1000_0000) return 4;
  return varintSize(value);
}

/** Encoded size of each mode, computed without encoding (mode byte included). */
export function packedSizes(ids: ArrayLike<number>): Record<TokenPackingMode, number> {
  let delta = 1;
  let plain = 1;
  let previous = 0;
  let max = 0;
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i] as number;
    delta += varintBytes(zigzag(id - previous));
    plain += varintBytes(id);
    previous = id;
    if (id > max) max = id;
  }
  const bitpacked = 2 + Math.ceil((ids.length * bitWidth(max)) / 8);
  return { [TokenPacking.delta]: delta, [TokenPacking.plain]: plain, [TokenPacking.bitpacked]: bitpacked };
}

export function smallestPacking(sizes: Record<TokenPackingMode, number>): TokenPackingMode {
  let best: TokenPackingMode = TokenPacking.delta;
  for (const mode of [TokenPacking.plain, TokenPacking.bitpacked] as const) {
    if (sizes[mode] < sizes[best]) best = mode;
  }
  return best;
}

export function chooseTokenPacking(ids: ArrayLike<number>): TokenPackingMode {
  return smallestPacking(packedSizes(ids));
}

/** Writes each id (or its zigzag delta to the previous id) as a varint, sized first, then in place. */
function writeVarints(ids: ArrayLike<number>, out: ByteWriter, delta: boolean): void {
  let size = 0;
  let previous = 0;
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i] as number;
    size += varintBytes(delta ? zigzag(id - previous) : id);
    previous = id;
  }
  const target = out.claim(size);
  let at = 0;
  previous = 0;
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i] as number;
    let value = delta ? zigzag(id - previous) : id;
    previous = id;
    // Above 2^32 the bit operators would truncate: divide instead (only deltas of huge ids get here).
    while (value > 0xffff_ffff) {
      target[at++] = (value % 0x80) | 0x80;
      value = Math.floor(value / 0x80);
    }
    while (value >= 0x80) {
      target[at++] = (value & 0x7f) | 0x80;
      value >>>= 7;
    }
    target[at++] = value;
  }
}

/** Bits accumulate little-endian; each full byte goes out as soon as it is complete. */
function packBits(ids: ArrayLike<number>, width: number, target: Uint8Array): void {
  let at = 0;
  let bits = 0;
  if (width <= NARROW_WIDTH) {
    let accumulator = 0;
    for (let i = 0; i < ids.length; i++) {
      accumulator |= (ids[i] as number) << bits;
      bits += width;
      while (bits >= 8) {
        target[at++] = accumulator & 0xff;
        accumulator >>>= 8;
        bits -= 8;
      }
    }
    if (bits > 0) target[at] = accumulator;
    return;
  }
  // Width up to 32: a float-safe integer accumulator (below 2^40); powers from a table and the
  // remainder by floor-and-subtract, since `2 ** n` and `%` on doubles are library calls.
  let accumulator = 0;
  for (let i = 0; i < ids.length; i++) {
    accumulator += (ids[i] as number) * (POWERS_OF_TWO[bits] as number);
    bits += width;
    while (bits >= 8) {
      const high = Math.floor(accumulator / 256);
      target[at++] = accumulator - high * 256;
      accumulator = high;
      bits -= 8;
    }
  }
  if (bits > 0) target[at] = accumulator;
}

/** Appends the packed ids to `out`; the count is stored by the caller (the row header). */
export function packTokens(
  ids: ArrayLike<number>,
  out: ByteWriter,
  mode: TokenPackingMode = chooseTokenPacking(ids),
): void {
  out.byte(mode);
  if (mode === TokenPacking.delta || mode === TokenPacking.plain) {
    writeVarints(ids, out, mode === TokenPacking.delta);
    return;
  }
  let max = 0;
  for (let i = 0; i < ids.length; i++) max = Math.max(max, ids[i] as number);
  const width = bitWidth(max);
  out.byte(width);
  packBits(ids, width, out.claim(Math.ceil((ids.length * width) / 8)));
}

function unpackBits(source: Uint8Array, width: number, ids: Uint32Array): void {
  let at = 0;
  let bits = 0;
  if (width <= NARROW_WIDTH) {
    const mask = width === 0 ? 0 : (1 << width) - 1;
    let accumulator = 0;
    for (let i = 0; i < ids.length; i++) {
      while (bits < width) {
        accumulator |= (source[at++] as number) << bits;
        bits += 8;
      }
      ids[i] = accumulator & mask;
      accumulator >>>= width;
      bits -= width;
    }
    return;
  }
  let accumulator = 0;
  const modulus = POWERS_OF_TWO[width] as number;
  for (let i = 0; i < ids.length; i++) {
    while (bits < width) {
      accumulator += (source[at++] as number) * (POWERS_OF_TWO[bits] as number);
      bits += 8;
    }
    const high = Math.floor(accumulator / modulus);
    ids[i] = accumulator - high * modulus;
    accumulator = high;
    bits -= width;
  }
}

export function unpackTokens(input: ByteReader, count: number): Uint32Array {
  const ids = new Uint32Array(count);
  const mode = input.byte();
  if (mode === TokenPacking.delta) {
    let previous = 0;
    for (let i = 0; i < count; i++) {
      const id = previous + unzigzag(input.varint());
      if (id < 0 || id > MAX_TOKEN_ID) throw new TruncatedInputError(`decoded token id out of range: ${id}`);
      ids[i] = id;
      previous = id;
    }
    return ids;
  }
  if (mode === TokenPacking.plain) {
    for (let i = 0; i < count; i++) {
      const id = input.varint();
      if (id > MAX_TOKEN_ID) throw new TruncatedInputError(`decoded token id out of range: ${id}`);
      ids[i] = id;
    }
    return ids;
  }
  if (mode === TokenPacking.bitpacked) {
    const width = input.byte();
    if (width > 32) throw new TruncatedInputError(`bit width ${width} exceeds 32`);
    // Exactly the bytes the packer wrote: ceil(count * width / 8).
    unpackBits(input.bytes(Math.ceil((count * width) / 8)), width, ids);
    return ids;
  }
  throw new TruncatedInputError(`unknown token packing mode ${mode}`);
}
