/**
 * Counter-based randomness: every value is a pure function of its key, never of how many values were
 * drawn before. That is what makes base weights reproducible in any process and a resumed sample continue
 * exactly as an uninterrupted one (P6). Integer mixing only (Math.imul), so results are bit-exact.
 */

/** A 32-bit avalanche mix (xor-shift-multiply finaliser). */
function mix32(value: number): number {
  let x = value >>> 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d);
  x ^= x >>> 15;
  x = Math.imul(x, 0x846ca68b);
  x ^= x >>> 16;
  return x >>> 0;
}

/** Folds 32-bit words into one hash, order-sensitive. */
export function hashWords(...words: readonly number[]): number {
  let h = 0x9e3779b9;
  for (const word of words) h = mix32(h ^ mix32((word >>> 0) + 0x632be5ab));
  return h;
}

/** FNV-1a over the UTF-8 bytes of a string, then mixed. */
export function hashString(text: string): number {
  let h = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(text)) h = Math.imul(h ^ byte, 0x01000193);
  return mix32(h);
}

/** Splits an integer seed (any sign, up to 64 bits) into two 32-bit words. */
export function seedWords(seed: number): [number, number] {
  const bits = BigInt.asUintN(64, BigInt(seed));
  return [Number(bits & 0xffffffffn), Number(bits >> 32n)];
}

/** A uniform double in [0, 1) with 53 random bits, keyed by the given words. */
export function uniformAt(...words: readonly number[]): number {
  const h = hashWords(...words);
  const high = mix32(h ^ 0x85ebca6b) >>> 5; // 27 bits
  const low = mix32(h ^ 0xc2b2ae35) >>> 6; // 26 bits
  return (high * 67108864 + low) / 9007199254740992;
}
