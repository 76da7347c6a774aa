import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DEFAULT_MAX_ITEM_BYTES, encodeCutRow } from '../../shared/repositories/prefix/codec/cut-row.js';
import { genesisChain, nextChain, sha256Hex } from '../../shared/repositories/prefix/codec/digest.js';
import {
  decodeRowItem,
  encodeRowItem,
  type RowItem,
} from '../../shared/repositories/prefix/codec/row-item.js';
import {
  packedSizes,
  packTokens,
  TokenPacking,
  type TokenPackingMode,
  unpackTokens,
} from '../../shared/repositories/prefix/codec/token-packing.js';
import { ByteReader, ByteWriter, unzigzag, zigzag } from '../../shared/repositories/prefix/codec/varint.js';
import { PrefixCorruptError } from '../../shared/repositories/prefix/errors.js';
import type { CutRow } from '../../shared/repositories/prefix/types.js';

const tokenIds = fc.array(fc.integer({ min: 0, max: 0xffff_ffff }), { maxLength: 300 });
const smallVocabIds = fc.array(fc.integer({ min: 0, max: 150_000 }), { maxLength: 300 });
const MODES: TokenPackingMode[] = [TokenPacking.delta, TokenPacking.plain, TokenPacking.bitpacked];

function packWith(ids: readonly number[], mode?: TokenPackingMode): Uint8Array {
  const out = new ByteWriter();
  packTokens(ids, out, mode);
  return out.finish();
}

describe('varint and zigzag', () => {
  it('round-trip every safe non-negative integer', () => {
    fc.assert(
      fc.property(fc.array(fc.maxSafeNat()), (values) => {
        const out = new ByteWriter(1);
        for (const value of values) out.varint(value);
        const input = new ByteReader(out.finish());
        expect(values.map(() => input.varint())).toEqual(values);
        expect(input.remaining).toBe(0);
      }),
    );
  });

  it('zigzag maps small magnitudes of both signs to small values and back', () => {
    expect([0, -1, 1, -2, 2].map(zigzag)).toEqual([0, 1, 2, 3, 4]);
    fc.assert(
      fc.property(fc.integer({ min: -(2 ** 40), max: 2 ** 40 }), (value) => {
        expect(unzigzag(zigzag(value))).toBe(value);
      }),
    );
  });
});

describe('token packing', () => {
  it.each(MODES)('mode %s round-trips any uint32 ids', (mode) => {
    fc.assert(
      fc.property(tokenIds, (ids) => {
        const bytes = packWith(ids, mode);
        expect(Array.from(unpackTokens(new ByteReader(bytes), ids.length))).toEqual(ids);
        expect(bytes.length).toBe(packedSizes(ids)[mode]);
      }),
    );
  });

  it('chooses the smallest mode', () => {
    fc.assert(
      fc.property(smallVocabIds, (ids) => {
        expect(packWith(ids).length).toBe(Math.min(...Object.values(packedSizes(ids))));
      }),
    );
  });
});

function rowItem(tokens: number[], logprobs: number[], overrides: Partial<RowItem> = {}): RowItem {
  return {
    callId: 'call#1/é',
    attempt: 'w@3',
    contentId: 'c-req-1',
    cut: 2,
    chunkIndex: 0,
    chunkCount: 1,
    prevLength: 17,
    deltaLength: tokens.length,
    cumulativeLength: 17 + tokens.length,
    chunkStart: 0,
    weightVersion: 4,
    tokens: Uint32Array.from(tokens),
    logprobs: Float32Array.from(logprobs),
    ...overrides,
  };
}

const tokensWithLogprobs = fc
  .array(fc.tuple(fc.integer({ min: 0, max: 0xffff_ffff }), fc.double({ noNaN: false })), { maxLength: 200 })
  .map((pairs) => ({ tokens: pairs.map(([t]) => t), logprobs: pairs.map(([, l]) => l) }));

describe('row item codec', () => {
  it('round-trips ids, lengths, versions, and logprobs exactly as float32', () => {
    fc.assert(
      fc.property(tokensWithLogprobs, ({ tokens, logprobs }) => {
        const decoded = decodeRowItem(encodeRowItem(rowItem(tokens, logprobs)));
        expect(Array.from(decoded.tokens)).toEqual(tokens);
        // Bit-exact float32 (NaN and -0 included): compare the raw bytes.
        expect(new Uint8Array(decoded.logprobs.buffer)).toEqual(
          new Uint8Array(Float32Array.from(logprobs).buffer),
        );
        expect(decoded).toMatchObject({
          callId: 'call#1/é',
          attempt: 'w@3',
          cut: 2,
          prevLength: 17,
          weightVersion: 4,
        });
      }),
    );
  });

  it('detects any corrupted byte', () => {
    const bytes = encodeRowItem(rowItem([5, 9, 150_000, 3], [-0.5, -1.25, -3, 0]));
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: bytes.length - 1 }),
        fc.integer({ min: 1, max: 255 }),
        (at, flip) => {
          const corrupted = bytes.slice();
          corrupted[at] = (corrupted[at] as number) ^ flip;
          expect(() => decodeRowItem(corrupted)).toThrow(PrefixCorruptError);
          expect(sha256Hex(corrupted)).not.toBe(sha256Hex(bytes));
        },
      ),
    );
    expect(() => decodeRowItem(bytes.subarray(0, bytes.length - 1))).toThrow(PrefixCorruptError);
  });

  it('rejects inconsistent lengths even under a valid digest', () => {
    const bad = encodeRowItem(rowItem([1, 2], [0, 0], { cumulativeLength: 99 }));
    expect(() => decodeRowItem(bad)).toThrow(/lengths are inconsistent/);
  });
});

function cutRow(tokens: number[], overrides: Partial<CutRow> = {}): CutRow {
  return {
    callId: 'call-7',
    contentId: 'c-ckpt',
    weightVersion: 1,
    tokens,
    logprobs: tokens.map((t) => -t / 1000),
    ...overrides,
  };
}

describe('cut rows', () => {
  it('chunks rows over the item budget, every chunk within it, and reassembles exactly', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 200_000 }), { minLength: 1, maxLength: 3000 }),
        fc.integer({ min: 400, max: 6000 }),
        (tokens, maxItemBytes) => {
          const row = encodeCutRow(cutRow(tokens), 'a1', { maxItemBytes });
          expect(row.items.every((item) => item.bytes.length <= maxItemBytes)).toBe(true);
          expect(row.items.every((item) => item.tokens > 0)).toBe(true);
          const decoded = row.items.map((item) => decodeRowItem(item.bytes));
          expect(decoded.flatMap((item) => Array.from(item.tokens))).toEqual(tokens);
          expect(decoded.map((item) => item.chunkIndex)).toEqual(row.items.map((_, i) => i));
          expect(row.items.map((item) => item.digest)).toEqual(
            row.items.map((item) => sha256Hex(item.bytes)),
          );
        },
      ),
      { numRuns: 60 },
    );
  });

  it('keeps a realistic 100k-token row under the DynamoDB item limit', () => {
    const tokens = Array.from({ length: 100_000 }, (_, i) => (i * 7919) % 150_000);
    const row = encodeCutRow(cutRow(tokens), 'a1');
    expect(row.items.length).toBeGreaterThan(1);
    expect(Math.max(...row.items.map((item) => item.bytes.length))).toBeLessThanOrEqual(
      DEFAULT_MAX_ITEM_BYTES,
    );
  });

  it('continues the chain of the previous cut and keys rows by call, attempt, cut and chunk', () => {
    const first = encodeCutRow(cutRow([1, 2, 3]), 'a1');
    expect(first.prevChain).toBe(genesisChain('call-7', 'c-ckpt'));
    expect(first.chain).toBe(nextChain(first.prevChain, 0, [first.items[0]?.digest ?? '']));
    const previous = {
      callId: 'call-7',
      contentId: 'c-ckpt',
      length: 3,
      chain: first.chain,
      weightVersion: 1,
      segments: [{ group: 'g', attempt: 'a1', cut: 0, chunks: 1 }],
    };
    const second = encodeCutRow(cutRow([4, 5], { previous, weightVersion: 2 }), 'a2');
    expect(second).toMatchObject({ cut: 1, prevLength: 3, length: 5, prevChain: first.chain });
    expect(second.items[0]?.key).toBe('row#call-7#a2#1#0');
    expect(() => encodeCutRow(cutRow([4], { previous, weightVersion: 0 }), 'a2')).toThrow(/backwards/);
    expect(() => encodeCutRow(cutRow([4], { previous, callId: 'other' }), 'a2')).toThrow(/another call/);
  });
});

describe('the packed format is stable', () => {
  // Bytes the first release wrote, so every reader and writer agrees on them: delta, plain and
  // bit-packed, with widths on both sides of the 24-bit integer fast path and the full 32 bits.
  const written: [number[], TokenPackingMode, string][] = [
    [[5, 9, 150_000, 3, 0], TokenPacking.delta, '000a08cea712d9a71205'],
    [[5, 9, 150_000, 3, 0], TokenPacking.plain, '010509f093090300'],
    [[5, 9, 150_000, 3, 0], TokenPacking.bitpacked, '021205002400009fe40000000000'],
    [[16_777_215, 1, 0, 12_345], TokenPacking.bitpacked, '0218ffffff010000000000393000'],
    [[16_777_216, 1, 0, 33_554_431], TokenPacking.bitpacked, '0219000000030000000000f8ffff0f'],
    [[4_294_967_295, 0, 7], TokenPacking.delta, '00feffffff1ffdffffff1f0e'],
    [[4_294_967_295, 0, 7], TokenPacking.bitpacked, '0220ffffffff0000000007000000'],
  ];

  it.each(written)('%j in mode %i', (ids, mode, hex) => {
    expect(Buffer.from(packWith(ids, mode)).toString('hex')).toBe(hex);
    expect(Array.from(unpackTokens(new ByteReader(Buffer.from(hex, 'hex')), ids.length))).toEqual(ids);
  });

  it('bit-packs every width from 0 to 32 exactly', () => {
    for (let width = 0; width <= 32; width++) {
      const max = width === 0 ? 0 : 2 ** width - 1;
      const ids = [max, 0, Math.floor(max / 3), max, 1 % (max + 1), Math.floor(max / 2)];
      const bytes = packWith(ids, TokenPacking.bitpacked);
      expect(bytes.length).toBe(2 + Math.ceil((ids.length * width) / 8));
      expect(Array.from(unpackTokens(new ByteReader(bytes), ids.length))).toEqual(ids);
    }
  });
});

describe('decoding after a trusted digest check', () => {
  it('skips only the embedded digest: the structure is still checked', () => {
    const bytes = encodeRowItem(rowItem([5, 9, 150_000, 3], [-0.5, -1.25, -3, 0]));
    const trailerBroken = bytes.slice();
    trailerBroken[bytes.length - 1] = (trailerBroken[bytes.length - 1] as number) ^ 1;
    expect(() => decodeRowItem(trailerBroken)).toThrow(/digest mismatch/);
    // A caller that matched the whole item to its commit record's digest has ruled this out already.
    expect(Array.from(decodeRowItem(trailerBroken, { digestChecked: true }).tokens)).toEqual([
      5, 9, 150_000, 3,
    ]);
    const truncated = bytes.subarray(0, 40);
    expect(() => decodeRowItem(truncated, { digestChecked: true })).toThrow(PrefixCorruptError);
  });
});

describe('token ids a cut row may hold', () => {
  it.each([[-1], [1.5], [2 ** 32], [Number.NaN]])('rejects %s instead of wrapping it into range', (bad) => {
    expect(() => encodeCutRow(cutRow([3, bad, 4]), 'a1')).toThrow(/token id/);
  });

  it('encodes typed arrays and plain arrays of the same ids to the same bytes', () => {
    const ids = Array.from({ length: 500 }, (_, i) => (i * 7919) % 150_000);
    const plain = encodeCutRow(cutRow(ids), 'a1');
    const typed = encodeCutRow(
      cutRow([], { tokens: Uint32Array.from(ids), logprobs: Float32Array.from(ids, (t) => -t / 1000) }),
      'a1',
    );
    expect(typed.items.map((item) => item.digest)).toEqual(plain.items.map((item) => item.digest));
  });
});

/** Deterministic PRNG, so the measured figures are reproducible. */
function mulberry32(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const VOCAB = 150_000;

/** Zipf(s) over ranks 0..VOCAB-1, sampled by inverting the CDF. */
function zipfSampler(s: number, random: () => number): () => number {
  const cdf = new Float64Array(VOCAB);
  let total = 0;
  for (let rank = 0; rank < VOCAB; rank++) {
    total += 1 / (rank + 1) ** s;
    cdf[rank] = total;
  }
  return () => {
    const target = random() * total;
    let low = 0;
    let high = VOCAB - 1;
    while (low < high) {
      const middle = (low + high) >> 1;
      if ((cdf[middle] as number) < target) low = middle + 1;
      else high = middle;
    }
    return low;
  };
}

function bytesPerToken(stream: number[], rowLength: number, mode?: TokenPackingMode): number {
  let bytes = 0;
  for (let start = 0; start < stream.length; start += rowLength) {
    bytes += packWith(stream.slice(start, start + rowLength), mode).length;
  }
  return bytes / stream.length;
}

describe('bytes per token on realistic streams (P5 goal: under 3)', () => {
  const random = mulberry32(42);
  const count = 65_536;
  const zipf = zipfSampler(1.1, random);
  const permutation = Array.from({ length: VOCAB }, (_, i) => i);
  for (let i = VOCAB - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [permutation[i], permutation[j]] = [permutation[j] as number, permutation[i] as number];
  }
  const streams: Record<string, number[]> = {
    'uniform random ids in [0, 150000)': Array.from({ length: count }, () => Math.floor(random() * VOCAB)),
    'Zipf(1.1), frequent tokens have small ids (BPE-like)': Array.from({ length: count }, zipf),
    'Zipf(1.1), ids randomly permuted': Array.from({ length: count }, () => permutation[zipf()] as number),
  };

  it.each(Object.keys(streams))('%s', (name) => {
    const stream = streams[name] as number[];
    const figures = {
      chosen2048: bytesPerToken(stream, 2048),
      chosen64: bytesPerToken(stream, 64),
      delta2048: bytesPerToken(stream, 2048, TokenPacking.delta),
      plain2048: bytesPerToken(stream, 2048, TokenPacking.plain),
      bitpacked2048: bytesPerToken(stream, 2048, TokenPacking.bitpacked),
    };
    console.info(
      `bytes/token, ${name}: ${Object.entries(figures)
        .map(([key, value]) => `${key}=${value.toFixed(3)}`)
        .join(' ')}`,
    );
    expect(figures.chosen2048).toBeLessThan(3);
    expect(figures.chosen64).toBeLessThan(3);
    expect(figures.chosen2048).toBeLessThanOrEqual(
      Math.min(figures.delta2048, figures.plain2048, figures.bitpacked2048) + 1e-9,
    );
  });
});
