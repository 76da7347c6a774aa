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

/** 2^0 .. 2^40: every shift the bit-packing loops use (carried bits < 8, width <= 32). */
const POWERS_OF_TWO = Float64Array.from({ length: 41 }, (_, exponent) => 2 ** exponent);

function bitWidth(max: number): number {
  let width = 0;
  let rest = max;
  while (rest > 0) {
    width += 1;
    rest = Math.floor(rest / 2);
  }
  return width;
}

/** Encoded size of each mode, computed without encoding (mode byte included). */
export function packedSizes(ids: ArrayLike<number>): Record<TokenPackingMode, number> {
  let delta = 1;
  let plain = 1;
  let previous = 0;
  let max = 0;
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i] as number;
    delta += varintSize(zigzag(id - previous));
    plain += varintSize(id);
    previous = id;
    if (id > max) max = id;
  }
  const bitpacked = 2 + Math.ceil((ids.length * bitWidth(max)) / 8);
  return { [TokenPacking.delta]: delta, [TokenPacking.plain]: plain, [TokenPacking.bitpacked]: bitpacked };
}

export function chooseTokenPacking(ids: ArrayLike<number>): TokenPackingMode {
  const sizes = packedSizes(ids);
  let best: TokenPackingMode = TokenPacking.delta;
  for (const mode of [TokenPacking.plain, TokenPacking.bitpacked] as const) {
    if (sizes[mode] < sizes[best]) best = mode;
  }
  return best;
}

/** Appends the packed ids to `out`; the count is stored by the caller (the row header). */
export function packTokens(
  ids: ArrayLike<number>,
  out: ByteWriter,
  mode: TokenPackingMode = chooseTokenPacking(ids),
): void {
  out.byte(mode);
  if (mode === TokenPacking.delta) {
    let previous = 0;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i] as number;
      out.varint(zigzag(id - previous));
      previous = id;
    }
    return;
  }
  if (mode === TokenPacking.plain) {
    for (let i = 0; i < ids.length; i++) out.varint(ids[i] as number);
    return;
  }
  let max = 0;
  for (let i = 0; i < ids.length; i++) max = Math.max(max, ids[i] as number);
  const width = bitWidth(max);
  out.byte(width);
  // Bits accumulate little-endian in a float-safe integer: width <= 32 and fewer than 8 bits are
  // carried between ids, so the accumulator stays below 2^40. Powers come from a table and the
  // remainder from floor-and-subtract: `2 ** n` and `%` on doubles are library calls, and this
  // loop runs once per token.
  let accumulator = 0;
  let bits = 0;
  for (let i = 0; i < ids.length; i++) {
    accumulator += (ids[i] as number) * (POWERS_OF_TWO[bits] as number);
    bits += width;
    while (bits >= 8) {
      const high = Math.floor(accumulator / 256);
      out.byte(accumulator - high * 256);
      accumulator = high;
      bits -= 8;
    }
  }
  if (bits > 0) out.byte(accumulator);
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
    let accumulator = 0;
    let bits = 0;
    const modulus = POWERS_OF_TWO[width] as number;
    for (let i = 0; i < count; i++) {
      while (bits < width) {
        accumulator += input.byte() * (POWERS_OF_TWO[bits] as number);
        bits += 8;
      }
      const high = Math.floor(accumulator / modulus);
      ids[i] = accumulator - high * modulus;
      accumulator = high;
      bits -= width;
    }
    return ids;
  }
  throw new TruncatedInputError(`unknown token packing mode ${mode}`);
}
