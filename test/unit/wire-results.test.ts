import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InfrastructureError } from '../../shared/base/errors.js';
import {
  encodeForwardBackwardOutput,
  encodeSampleResponse,
  type StoredForwardBackwardResult,
  type StoredSampleResult,
  type StoredTensor,
} from '../../shared/wire/results.js';
import { decodeForwardBackwardOutput, decodeSampleResponse } from '../support/wire/decode-results.js';
import { fixtureJson } from '../support/wire/fixtures.js';
import { FORWARD_BACKWARD_CASES, SAMPLE_CASES } from '../support/wire/response-cases.js';

const ours = fixtureJson<Record<string, { type: string; hex: string }>>('responses.ours.json');
const sdk = fixtureJson<Record<string, unknown>>('responses.sdk.json');
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex');

/** What the SDK must make of a stored tensor: float32 rounding, the shape it rebuilds. */
function asSdkTensor(tensor: StoredTensor) {
  return {
    dtype: tensor.dtype,
    shape: [...(tensor.shape ?? [tensor.data.length])],
    data: tensor.dtype === 'float32' ? tensor.data.map(Math.fround) : [...tensor.data],
  };
}

function asSdkOutput(result: StoredForwardBackwardResult) {
  return {
    loss_fn_output_type:
      result.loss_fn_outputs.length === 0
        ? result.loss_fn_output_type || 'ArrayRecord'
        : (result.loss_fn_output_type.split(':').at(-1) as string),
    metrics: { ...result.metrics },
    loss_fn_outputs: result.loss_fn_outputs.map((datum) =>
      Object.fromEntries(Object.entries(datum).map(([name, tensor]) => [name, asSdkTensor(tensor)])),
    ),
  };
}

/** Top-k rows as read back: float32 logprobs, an empty row null. */
const asSdkRows = (rows: NonNullable<StoredSampleResult['topk_prompt_logprobs']>) =>
  rows.map((row) => (row?.length ? row.map(([token, logprob]) => [token, Math.fround(logprob)]) : null));

function asSdkSample(result: StoredSampleResult) {
  const rows = result.topk_prompt_logprobs;
  const k = Math.max(0, ...(rows ?? []).map((row) => row?.length ?? 0));
  const alt = result.prompt_alt_tokens;
  const targets = result.target_prompt_logprobs;
  return {
    sequences: result.sequences.map((sequence) => ({
      stop_reason: sequence.stop_reason,
      tokens: [...sequence.tokens],
      logprobs: sequence.logprobs?.length ? sequence.logprobs.map(Math.fround) : null,
      // SDK 0.26+ (W8): present only when the result has it.
      ...(sequence.topk_logprobs == null ? {} : { topk_logprobs: asSdkRows(sequence.topk_logprobs) }),
    })),
    prompt_logprobs: result.prompt_logprobs?.length
      ? result.prompt_logprobs.map((value) => (value === null ? null : Math.fround(value)))
      : null,
    topk_prompt_logprobs:
      rows == null || rows.length === 0 || k === 0
        ? null
        : rows.map((row) =>
            row?.length ? row.map(([token, logprob]) => [token, Math.fround(logprob)]) : null,
          ),
    prompt_cache_hit_tokens: result.prompt_cache_hit_tokens ?? 0,
    ...(alt == null
      ? {}
      : {
          prompt_alt_tokens: {
            tokens: alt.tokens.map((row) => [...row]),
            logprobs: alt.logprobs.map((row) => row.map(Math.fround)),
          },
        }),
    ...(targets == null
      ? {}
      : {
          target_prompt_logprobs: targets.map((row) =>
            row.map((value) => (value === null ? null : Math.fround(value))),
          ),
        }),
  };
}

describe('our result bytes, as the SDK 0.25.0 decodes them', () => {
  for (const [name, result] of Object.entries(FORWARD_BACKWARD_CASES)) {
    it(`ForwardBackwardOutput ${name}`, () => {
      const bytes = encodeForwardBackwardOutput(result);
      // The bytes the SDK decoded when the fixture was made (rerun make_fixtures.py after a change).
      expect(hex(bytes)).toBe(ours[`fb:${name}`]?.hex);
      if (name === 'field-sets-change') {
        // response_conv.py assumes every record has the same fields; records split by field set break it.
        expect(sdk[`fb:${name}`]).toEqual({ error: 'IndexError: list index out of range' });
      } else {
        expect(sdk[`fb:${name}`]).toEqual(asSdkOutput(result));
      }
    });
  }

  for (const [name, result] of Object.entries(SAMPLE_CASES)) {
    it(`SampleResponse ${name}`, () => {
      const bytes = encodeSampleResponse(result);
      expect(hex(bytes)).toBe(ours[`sample:${name}`]?.hex);
      expect(sdk[`sample:${name}`]).toEqual(asSdkSample(result));
    });
  }
});

describe('encodeForwardBackwardOutput', () => {
  it('groups datums into as few records as order, field sets and trailing shapes allow', () => {
    const records = (name: string) =>
      decodeForwardBackwardOutput(
        encodeForwardBackwardOutput(FORWARD_BACKWARD_CASES[name] as StoredForwardBackwardResult),
      ).records;
    expect(records('cross-entropy')).toEqual([{ numDatums: 3, fields: ['elementwise_loss', 'logprobs'] }]);
    expect(records('ragged-trailing-shapes')).toEqual([
      { numDatums: 2, fields: ['ids', 'topk'] },
      { numDatums: 1, fields: ['ids', 'topk'] },
    ]);
    expect(records('field-sets-change')).toEqual([
      { numDatums: 1, fields: ['a'] },
      { numDatums: 2, fields: ['a', 'b'] },
      { numDatums: 1, fields: ['a'] },
    ]);
    expect(records('datums-without-fields')).toEqual([{ numDatums: 2, fields: [] }]);
  });

  it('refuses stored tensors that contradict themselves (our data, so InfrastructureError)', () => {
    const bad = (tensor: StoredTensor) => () =>
      encodeForwardBackwardOutput({ loss_fn_output_type: '', loss_fn_outputs: [{ x: tensor }], metrics: {} });
    expect(bad({ dtype: 'float32', data: [1, 2, 3], shape: [2, 2] })).toThrow(InfrastructureError);
    expect(bad({ dtype: 'int64', data: [1.5] })).toThrow(InfrastructureError);
  });

  const tensorArb = (trailing: number[], dtype: 'float32' | 'int64') =>
    fc.nat(4).chain((leading) => {
      const size = leading * trailing.reduce((a, b) => a * b, 1);
      const value = dtype === 'float32' ? fc.float({ noNaN: true }) : fc.maxSafeInteger();
      return fc
        .array(value, { minLength: size, maxLength: size })
        .map((data): StoredTensor => ({ dtype, data, shape: [leading, ...trailing] }));
    });
  const datumArb = fc
    .dictionary(
      fc.constantFrom('logprobs', 'elementwise_loss', 'ids', 'k'),
      fc.tuple(
        fc.array(fc.integer({ min: 1, max: 3 }), { maxLength: 2 }),
        fc.constantFrom('float32' as const, 'int64' as const),
      ),
      { maxKeys: 3 },
    )
    .chain((spec) =>
      fc.record(
        Object.fromEntries(
          Object.entries(spec).map(([name, [trailing, dtype]]) => [name, tensorArb(trailing, dtype)]),
        ),
      ),
    );

  it('every datum reads back with its values and shape (property)', () => {
    fc.assert(
      fc.property(
        fc.array(datumArb, { maxLength: 6 }),
        fc.dictionary(fc.string({ maxLength: 8 }), fc.double({ noNaN: true })),
        (datums, metrics) => {
          const result = { loss_fn_output_type: 'ArrayRecord', loss_fn_outputs: datums, metrics };
          const decoded = decodeForwardBackwardOutput(encodeForwardBackwardOutput(result));
          expect(decoded.loss_fn_outputs).toEqual(asSdkOutput(result).loss_fn_outputs);
          expect(decoded.metrics).toEqual(metrics);
          expect(decoded.records.reduce((sum, record) => sum + record.numDatums, 0)).toBe(datums.length);
        },
      ),
    );
  });
});

describe('encodeSampleResponse', () => {
  it('reads back as the SDK would make it (property)', () => {
    const logprob = fc.float({ noNaN: true, noDefaultInfinity: true, min: -1000, max: 0 });
    const topkRows = fc.array(
      fc.option(fc.array(fc.tuple(fc.integer({ min: 1, max: 1000 }), logprob), { maxLength: 4 })),
      { maxLength: 6 },
    );
    /** [rows, width] matrices: every row as wide as the first (as the sampler writes them). */
    const matrix = <T>(cell: fc.Arbitrary<T>) =>
      fc.tuple(fc.nat(4), fc.integer({ min: 1, max: 3 })).chain(([rows, width]) =>
        fc.array(fc.array(cell, { minLength: width, maxLength: width }), {
          minLength: rows,
          maxLength: rows,
        }),
      );
    const sampleArb: fc.Arbitrary<StoredSampleResult> = fc.record({
      sequences: fc.array(
        fc.record({
          stop_reason: fc.constantFrom('stop' as const, 'length' as const),
          tokens: fc.array(fc.integer({ min: 0, max: 2 ** 31 - 1 }), { maxLength: 8 }),
          logprobs: fc.option(fc.array(logprob, { maxLength: 8 })),
          topk_logprobs: fc.option(topkRows),
        }),
        { maxLength: 3 },
      ),
      prompt_alt_tokens: fc.option(
        fc.nat(4).chain((rows) =>
          fc.record({
            tokens: fc.array(
              fc.array(fc.integer({ min: 0, max: 2 ** 31 - 1 }), { minLength: 2, maxLength: 2 }),
              {
                minLength: rows,
                maxLength: rows,
              },
            ),
            logprobs: fc.array(fc.array(logprob, { minLength: 2, maxLength: 2 }), {
              minLength: rows,
              maxLength: rows,
            }),
          }),
        ),
      ),
      target_prompt_logprobs: fc.option(matrix(fc.option(logprob))),
      prompt_logprobs: fc.option(fc.array(fc.option(logprob), { maxLength: 6 })),
      topk_prompt_logprobs: fc.option(
        fc.array(
          fc.option(fc.array(fc.tuple(fc.integer({ min: 1, max: 1000 }), logprob), { maxLength: 4 })),
          {
            maxLength: 6,
          },
        ),
      ),
      prompt_cache_hit_tokens: fc.nat(1000),
    });
    fc.assert(
      fc.property(sampleArb, (result) => {
        expect(decodeSampleResponse(encodeSampleResponse(result))).toEqual(asSdkSample(result));
      }),
    );
  });
});
