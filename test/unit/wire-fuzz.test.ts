import { create, toBinary } from '@bufbuild/protobuf';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Datum } from '../../shared/backend/pass-input.js';
import { ValidationError } from '../../shared/base/errors.js';
import {
  decodeForwardBackwardRequest,
  encodeStoredPass,
  type ForwardBackwardMessage,
} from '../../shared/wire/forward-backward-request.js';
import { ForwardBackwardRequestSchema } from '../../shared/wire/gen/tinker_public_pb.js';
import { partLimits } from '../../shared/wire/request-parts.js';
import { decompressZstdBounded, MAX_ZSTD_FRAMES } from '../../shared/wire/zstd.js';
import { fixtureBytes } from '../support/wire/fixtures.js';
import {
  EMPTY_ZSTD_FRAME,
  emptyProtobufChunks,
  emptyProtobufDatums,
} from '../support/wire/hostile-bodies.js';
import { int64Tensor, pbDatum, pbForwardBackward } from '../support/wire/requests.js';

/** Malformed input may fail only as a client error: ValidationError 400 / 413 / 422, nothing else. */
function onlyClientErrors(run: () => unknown): void {
  try {
    run();
  } catch (error) {
    if (!(error instanceof ValidationError)) throw error;
    expect([400, 413, 422]).toContain(error.status);
    expect(typeof error.context.field).toBe('string');
    expect(error.message.startsWith(`${error.context.field}: `)).toBe(true);
  }
}

const REQUESTS = [
  'schema-example',
  'cross-entropy-4',
  'importance-sampling',
  'forward-only',
  'sparse-csr',
  'image-chunk',
].map(fixtureBytes);
const STORED = REQUESTS.slice(0, 5).map((bytes) => encodeStoredPass(decodeForwardBackwardRequest(bytes)));

/** SDK 0.26+ messages (W8): provenance spans on a datum and loss_fn_config_v2 numbers and text. */
const SEQUENCE = `${'c'.repeat(32)}:1`;
const NEWER_MESSAGE: ForwardBackwardMessage = {
  model_id: 'tenant:model',
  seq_id: 3,
  forward_only: false,
  input: {
    loss_fn: 'importance_sampling',
    loss_fn_config: { beta: 0.5, mode: 'strict' },
    data: [
      {
        model_input: { chunks: [{ type: 'encoded_text', tokens: new Int32Array([72, 105, 5]) }] },
        loss_fn_inputs: {
          target_tokens: { dtype: 'int64', data: new BigInt64Array([105n, 5n, 6n]), shape: [3] },
        },
        model_input_spans: [
          { type: 'prompt_tokens', sequence_id: SEQUENCE, offset: 0, length: 2 },
          { type: 'sampled_tokens', sequence_id: SEQUENCE, offset: 0, length: 1 },
        ],
        loss_fn_input_spans: [{ type: 'sampled_tokens', sequence_id: SEQUENCE, offset: 0, length: 3 }],
      },
    ],
  },
};
const NEWER = [encodeStoredPass(NEWER_MESSAGE)];
const ZSTD = ['cross-entropy-4.zst', 'bomb-streamed.zst', 'bomb-declared.zst'].map(fixtureBytes);

type Mutation =
  | { kind: 'flip'; at: number[]; bit: number[] }
  | { kind: 'truncate'; at: number }
  | { kind: 'insert'; at: number; bytes: Uint8Array }
  | { kind: 'delete'; at: number; length: number }
  | { kind: 'splice'; at: number; from: number; donor: number; length: number };

const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({
    kind: fc.constant('flip' as const),
    at: fc.array(fc.nat(), { minLength: 1, maxLength: 8 }),
    bit: fc.array(fc.nat(7), { minLength: 8, maxLength: 8 }),
  }),
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({
    kind: fc.constant('insert' as const),
    at: fc.nat(),
    bytes: fc.uint8Array({ minLength: 1, maxLength: 16 }),
  }),
  fc.record({ kind: fc.constant('delete' as const), at: fc.nat(), length: fc.integer({ min: 1, max: 32 }) }),
  fc.record({
    kind: fc.constant('splice' as const),
    at: fc.nat(),
    from: fc.nat(),
    donor: fc.nat(),
    length: fc.integer({ min: 1, max: 64 }),
  }),
);

function mutate(base: Uint8Array, mutations: readonly Mutation[], donors: readonly Uint8Array[]): Uint8Array {
  let bytes = Uint8Array.from(base);
  for (const m of mutations) {
    const at = bytes.length === 0 ? 0 : (m.kind === 'flip' ? 0 : m.at) % (bytes.length + 1);
    if (m.kind === 'flip') {
      if (bytes.length === 0) continue;
      m.at.forEach((index, i) => {
        const target = index % bytes.length;
        bytes[target] = (bytes[target] as number) ^ (1 << (m.bit[i] as number));
      });
    } else if (m.kind === 'truncate') {
      bytes = bytes.slice(0, at);
    } else if (m.kind === 'insert') {
      bytes = Uint8Array.from([...bytes.subarray(0, at), ...m.bytes, ...bytes.subarray(at)]);
    } else if (m.kind === 'delete') {
      bytes = Uint8Array.from([...bytes.subarray(0, at), ...bytes.subarray(at + m.length)]);
    } else {
      const donor = donors[m.donor % donors.length] as Uint8Array;
      const from = m.from % (donor.length + 1);
      bytes = Uint8Array.from([
        ...bytes.subarray(0, at),
        ...donor.subarray(from, from + m.length),
        ...bytes.subarray(at),
      ]);
    }
  }
  return bytes;
}

describe('decodeForwardBackwardRequest under fuzzing', () => {
  it('random bytes fail only with ValidationError', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 512 }), (bytes) =>
        onlyClientErrors(() => decodeForwardBackwardRequest(bytes)),
      ),
      { numRuns: 2000 },
    );
  });

  it('mutated SDK and stored messages (bit flips, truncation, splices) fail only with ValidationError', () => {
    const bases = [...REQUESTS, ...STORED, ...NEWER];
    fc.assert(
      fc.property(fc.nat(), fc.array(mutationArb, { minLength: 1, maxLength: 4 }), (base, mutations) => {
        const bytes = mutate(bases[base % bases.length] as Uint8Array, mutations, bases);
        onlyClientErrors(() => decodeForwardBackwardRequest(bytes));
        // Counting the parts first (issue 25) changes nothing a body within the limits decodes to.
        onlyClientErrors(() =>
          expect(decodeForwardBackwardRequest(bytes, { limits: partLimits(1024) })).toEqual(
            decodeForwardBackwardRequest(bytes),
          ),
        );
      }),
      { numRuns: 3000 },
    );
  });
});

describe('decompressZstdBounded under fuzzing', () => {
  const inflate = (bytes: Uint8Array) =>
    onlyClientErrors(() => {
      const body = decompressZstdBounded(bytes, 1 << 20);
      // Whatever inflates goes on to the decoder, as in the handler.
      onlyClientErrors(() => decodeForwardBackwardRequest(body));
    });

  it('random bytes, with and without a zstd magic number, fail only with ValidationError', () => {
    fc.assert(
      fc.property(fc.boolean(), fc.uint8Array({ maxLength: 256 }), (magic, tail) => {
        inflate(magic ? Uint8Array.from([0x28, 0xb5, 0x2f, 0xfd, ...tail]) : tail);
      }),
      { numRuns: 2000 },
    );
  });

  it('mutated real frames and bombs fail only with ValidationError, in bounded time', () => {
    fc.assert(
      fc.property(fc.nat(), fc.array(mutationArb, { minLength: 1, maxLength: 3 }), (base, mutations) => {
        const bytes = mutate(ZSTD[base % ZSTD.length] as Uint8Array, mutations, ZSTD);
        const start = performance.now();
        inflate(bytes);
        // 1 MiB of output at most: a mutation that made the decoder spin would show here.
        expect(performance.now() - start).toBeLessThan(2000);
      }),
      { numRuns: 600 },
    );
  });
});

/** int64 values a span may carry on the wire: mostly small, and the edges, negatives, beyond 2^53. */
const int64Arb = fc.oneof(
  { arbitrary: fc.bigInt({ min: 0n, max: 64n }), weight: 8 },
  { arbitrary: fc.constantFrom(-1n, 2n ** 53n - 1n, 2n ** 53n, 2n ** 63n - 1n, -(2n ** 63n)), weight: 1 },
  { arbitrary: fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), weight: 1 },
);
const spanArb = fc.record({
  arm: fc.oneof(
    { arbitrary: fc.constantFrom('promptTokens' as const, 'sampledTokens' as const), weight: 12 },
    { arbitrary: fc.constant(undefined), weight: 1 },
  ),
  sequenceId: fc.oneof(
    { arbitrary: fc.constant(SEQUENCE), weight: 12 },
    { arbitrary: fc.string({ maxLength: 140 }), weight: 1 },
    { arbitrary: fc.string({ unit: 'binary', maxLength: 8 }), weight: 1 },
  ),
  offset: int64Arb,
  length: int64Arb,
});
/** Config numbers: mostly finite, sometimes NaN or infinite. */
const numberArb = fc.oneof(
  { arbitrary: fc.double({ noNaN: true, noDefaultInfinity: true }), weight: 8 },
  { arbitrary: fc.double(), weight: 1 },
);
const configValueArb = fc.oneof(
  { arbitrary: numberArb.map((value) => ({ value: { case: 'number' as const, value } })), weight: 6 },
  {
    arbitrary: fc.string({ maxLength: 20 }).map((value) => ({ value: { case: 'text' as const, value } })),
    weight: 6,
  },
  { arbitrary: fc.constant({}), weight: 1 },
);

describe('the SDK 0.26+ fields under fuzzing (W8)', () => {
  it('random provenance spans and loss_fn_config_v2 entries: accepted only in range, else a ValidationError naming them', () => {
    const tally = { accepted: 0, refused: 0 };
    fc.assert(
      fc.property(
        fc.array(spanArb, { maxLength: 3 }),
        fc.array(spanArb, { maxLength: 3 }),
        fc.dictionary(fc.string({ maxLength: 12 }), configValueArb, { maxKeys: 2 }),
        fc.dictionary(fc.string({ maxLength: 12 }), numberArb, { maxKeys: 2 }),
        (inputSpans, lossSpans, v2, v1) => {
          const span = ({ arm, sequenceId, offset, length }: (typeof inputSpans)[number]) =>
            arm === undefined ? {} : { span: { case: arm, value: { sequenceId, offset, length } } };
          const bytes = toBinary(
            ForwardBackwardRequestSchema,
            create(ForwardBackwardRequestSchema, {
              modelId: 'm',
              seqId: 1,
              lossFn: 'ppo',
              lossFnConfig: v1,
              lossFnConfigV2: v2,
              data: [{ modelInputSpans: inputSpans.map(span), lossFnInputSpans: lossSpans.map(span) }],
            }),
          );
          let decoded: ForwardBackwardMessage;
          try {
            decoded = decodeForwardBackwardRequest(bytes);
          } catch (error) {
            expect(error).toBeInstanceOf(ValidationError);
            const { status, context } = error as ValidationError;
            expect(status).toBe(400);
            tally.refused += 1;
            expect(String(context.field)).toMatch(
              /^(data\.0\.(model_input|loss_fn_input)_spans\.\d|loss_fn_config)/,
            );
            return;
          }
          tally.accepted += 1;
          const datum = decoded.input.data[0] as Datum;
          for (const spans of [datum.model_input_spans ?? [], datum.loss_fn_input_spans ?? []]) {
            for (const one of spans) {
              expect(one.sequence_id.length).toBeGreaterThan(0);
              expect(one.sequence_id.length).toBeLessThanOrEqual(128);
              expect(Number.isSafeInteger(one.offset) && one.offset >= 0).toBe(true);
              expect(Number.isSafeInteger(one.length) && one.length >= 1).toBe(true);
            }
          }
          expect((datum.model_input_spans ?? []).length).toBe(inputSpans.length);
          for (const value of Object.values(decoded.input.loss_fn_config)) {
            expect(typeof value === 'string' || Number.isFinite(value)).toBe(true);
          }
          // What is accepted is stored in the canonical form and reads back the same.
          expect(decodeForwardBackwardRequest(encodeStoredPass(decoded))).toEqual(decoded);
        },
      ),
      { numRuns: 1500 },
    );
    console.info(`newer-field fuzz: ${JSON.stringify(tally)}`);
    // Not vacuous either way.
    expect(tally.accepted).toBeGreaterThan(100);
    expect(tally.refused).toBeGreaterThan(100);
  });
});

/**
 * Issue 25: bodies built from its repros' parts, in any number and order, mutated: whatever they
 * declare, no more than the limits' worth is ever built (datums) or inflated (frames).
 */
describe('bounded work under fuzzing (issue 25)', () => {
  const MAX_DATUMS = 8;
  const PARTS = [
    emptyProtobufDatums(1),
    emptyProtobufChunks(3),
    pbForwardBackward({ data: [pbDatum([1, 2])] }),
    pbForwardBackward({ data: [pbDatum([1, 2], { target_tokens: int64Tensor([2, 3], [2, 1, 1]) })] }),
    pbForwardBackward({ lossFnConfig: { clip: 0.2 } }),
  ];
  const repeated = (part: Uint8Array, times: number) => {
    const out = new Uint8Array(part.length * times);
    for (let i = 0; i < times; i++) out.set(part, i * part.length);
    return out;
  };
  const concatenated = (pieces: readonly Uint8Array[]) => {
    const out = new Uint8Array(pieces.reduce((sum, piece) => sum + piece.length, 0));
    let at = 0;
    for (const piece of pieces) {
      out.set(piece, at);
      at += piece.length;
    }
    return out;
  };

  it('protobuf: never more than MAX_DATUMS datums built, and only client errors', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.nat(PARTS.length - 1), fc.integer({ min: 1, max: 1_500 })), { maxLength: 4 }),
        fc.array(mutationArb, { maxLength: 2 }),
        (pieces, mutations) => {
          const body = mutate(
            concatenated(pieces.map(([part, times]) => repeated(PARTS[part] as Uint8Array, times))),
            mutations,
            PARTS,
          );
          const counts = { datumsDecoded: 0 };
          onlyClientErrors(() =>
            decodeForwardBackwardRequest(body, { limits: partLimits(MAX_DATUMS), counts }),
          );
          expect(counts.datumsDecoded).toBeLessThanOrEqual(MAX_DATUMS);
        },
      ),
      { numRuns: 120 },
    );
  });

  it(`zstd: never more than ${MAX_ZSTD_FRAMES} frames inflated, and only client errors`, () => {
    const smallWindow = Uint8Array.from(EMPTY_ZSTD_FRAME);
    smallWindow[5] = 0x00;
    // The fixtures (a real frame and two bombs) repeat up to 20 times; the empty frames up to 5,000.
    const frames = [EMPTY_ZSTD_FRAME, smallWindow, ...ZSTD];
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.nat(frames.length - 1), fc.integer({ min: 1, max: 5_000 })), {
          minLength: 1,
          maxLength: 4,
        }),
        (pieces) => {
          const body = concatenated(
            pieces.map(([frame, times]) => repeated(frames[frame] as Uint8Array, times)),
          );
          const counts = { framesInflated: 0 };
          onlyClientErrors(() => decompressZstdBounded(body, 1 << 20, counts));
          expect(counts.framesInflated).toBeLessThanOrEqual(MAX_ZSTD_FRAMES);
        },
      ),
      { numRuns: 100 },
    );
  });
});
