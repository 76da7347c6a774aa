import { create, type MessageInitShape, toBinary } from '@bufbuild/protobuf';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Datum, ForwardBackwardInput } from '../../shared/backend/pass-input.js';
import type { Tensor } from '../../shared/backend/tensor.js';
import type { ValidationError } from '../../shared/base/errors.js';
import {
  decodeForwardBackwardRequest,
  encodeStoredPass,
  type ForwardBackwardMessage,
} from '../../shared/wire/forward-backward-request.js';
import { DType, ForwardBackwardRequestSchema } from '../../shared/wire/gen/tinker_public_pb.js';
import { validationErrorOf } from '../support/validation.js';
import { fixtureBytes, fixtureJson, type PlainRequest, plainRequest } from '../support/wire/fixtures.js';

type RequestInit = MessageInitShape<typeof ForwardBackwardRequestSchema>;
type TensorInit = NonNullable<NonNullable<NonNullable<RequestInit['data']>[number]['lossFnInputs']>[string]>;

function wire(init: RequestInit): Uint8Array {
  return toBinary(ForwardBackwardRequestSchema, create(ForwardBackwardRequestSchema, init));
}

function le(type: 'i32' | 'f32' | 'i64' | 'u16', values: readonly number[]): Uint8Array {
  const size = { i32: 4, f32: 4, i64: 8, u16: 2 }[type];
  const view = new DataView(new ArrayBuffer(values.length * size));
  values.forEach((value, i) => {
    if (type === 'i32') view.setInt32(i * 4, value, true);
    else if (type === 'f32') view.setFloat32(i * 4, value, true);
    else if (type === 'i64') view.setBigInt64(i * 8, BigInt(value), true);
    else view.setUint16(i * 2, value, true);
  });
  return new Uint8Array(view.buffer);
}

/** One datum with tokens [1, 2, 3] and one loss input `x`. */
function withTensor(tensor: TensorInit, chunks?: NonNullable<RequestInit['data']>[number]['modelInput']) {
  return wire({
    modelId: 'm',
    seqId: 1,
    lossFn: 'cross_entropy',
    data: [
      {
        modelInput: chunks ?? [{ chunk: { case: 'encodedText', value: { tokens: le('i32', [1, 2, 3]) } } }],
        lossFnInputs: { x: tensor },
      },
    ],
  });
}

function rejection(bytes: Uint8Array): ValidationError {
  return validationErrorOf(() => decodeForwardBackwardRequest(bytes));
}

function expectRejected(bytes: Uint8Array, status: number, field: string, message?: RegExp): void {
  const error = rejection(bytes);
  expect({ status: error.status, field: error.context.field }).toEqual({ status, field });
  expect(error.message.startsWith(`${field}: `)).toBe(true);
  if (message) expect(error.message).toMatch(message);
}

describe('decodeForwardBackwardRequest on bytes the SDK 0.25.0 produced', () => {
  for (const name of [
    'schema-example',
    'cross-entropy-4',
    'importance-sampling',
    'forward-only',
    'sparse-csr',
  ]) {
    it(`${name}: gives exactly the values the SDK encoded`, () => {
      const decoded = decodeForwardBackwardRequest(fixtureBytes(name));
      expect(plainRequest(decoded)).toEqual(fixtureJson<PlainRequest>(`${name}.expected.json`));
    });
  }

  it('the schema example is the 167 bytes of tinker-wire-schema.txt, typed as the backend takes it', () => {
    const bytes = fixtureBytes('schema-example');
    expect(bytes.length).toBe(167);
    const decoded = decodeForwardBackwardRequest(bytes);
    const datum = decoded.input.data[0] as Datum;
    expect(datum.model_input.chunks[0]?.tokens).toEqual(new Int32Array([1, 2, 3, 4]));
    expect(datum.loss_fn_inputs.target_tokens).toEqual({
      dtype: 'int64',
      data: new BigInt64Array([2n, 3n, 4n, 5n]),
      shape: [4],
    });
    expect(datum.loss_fn_inputs.weights).toEqual({
      dtype: 'float32',
      data: new Float32Array(4).fill(1),
      shape: [4],
    });
    expect(decoded.input.loss_fn_config).toEqual({ clip_low: 0.8 });
    expect(decoded.forward_only).toBe(true);
  });

  it('the stored form of an SDK dense request is the same message, map entries sorted', () => {
    // Byte for byte only for the schema example: upb may write the SDK's map entries in any order.
    const example = fixtureBytes('schema-example');
    expect(Buffer.from(encodeStoredPass(decodeForwardBackwardRequest(example))).equals(example)).toBe(true);
    for (const name of ['cross-entropy-4', 'importance-sampling', 'forward-only']) {
      const sent = fixtureBytes(name);
      const stored = encodeStoredPass(decodeForwardBackwardRequest(sent));
      expect(stored.length).toBe(sent.length);
      expect(decodeForwardBackwardRequest(stored)).toEqual(decodeForwardBackwardRequest(sent));
    }
  });

  it('a sparse CSR request is stored dense, and reads back the same', () => {
    const decoded = decodeForwardBackwardRequest(fixtureBytes('sparse-csr'));
    expect(decodeForwardBackwardRequest(encodeStoredPass(decoded))).toEqual(decoded);
  });

  it('an image chunk is a 422 naming the chunk', () => {
    expectRejected(
      fixtureBytes('image-chunk'),
      422,
      'data.0.model_input.chunks.1',
      /only encoded_text chunks/,
    );
  });
});

describe('decodeForwardBackwardRequest, every Tensor form', () => {
  const x = (tensor: Tensor | undefined) => tensor;
  const decodeX = (tensor: TensorInit) =>
    x((decodeForwardBackwardRequest(withTensor(tensor)).input.data[0] as Datum).loss_fn_inputs.x);

  it('INT32 widens to int64 and BFLOAT16 to float32, as the SDK reads them', () => {
    expect(
      decodeX({ dtype: DType.DTYPE_INT32, encoding: { case: 'dense', value: le('i32', [-5, 7]) } }),
    ).toEqual({ dtype: 'int64', data: new BigInt64Array([-5n, 7n]), shape: [2] });
    // 0x3fc0 = 1.5, 0xc000 = -2.0, 0x7f80 = +inf
    expect(
      decodeX({
        dtype: DType.DTYPE_BFLOAT16,
        encoding: { case: 'dense', value: le('u16', [0x3fc0, 0xc000, 0x7f80]) },
      }),
    ).toEqual({ dtype: 'float32', data: new Float32Array([1.5, -2, Number.POSITIVE_INFINITY]), shape: [3] });
  });

  it('a missing shape is 1-D; a given one is kept', () => {
    const dense = { case: 'dense' as const, value: le('f32', [1, 2, 3, 4, 5, 6]) };
    expect(decodeX({ dtype: DType.DTYPE_FLOAT32, encoding: dense })?.shape).toEqual([6]);
    expect(decodeX({ dtype: DType.DTYPE_FLOAT32, encoding: dense, shape: [2n, 3n] })?.shape).toEqual([2, 3]);
  });

  it('CSR values may be in any wire dtype and come out dense', () => {
    const csr = (dtype: DType, values: Uint8Array) =>
      decodeX({
        dtype,
        shape: [2n, 3n],
        encoding: {
          case: 'sparseCsr',
          value: { values, crowIndices: le('i64', [0, 1, 2]), colIndices: le('i64', [2, 0]) },
        },
      });
    expect(csr(DType.DTYPE_INT32, le('i32', [9, 4]))).toEqual({
      dtype: 'int64',
      data: new BigInt64Array([0n, 0n, 9n, 4n, 0n, 0n]),
      shape: [2, 3],
    });
    expect(csr(DType.DTYPE_FLOAT32, le('f32', [0.5, 2]))?.data).toEqual(
      new Float32Array([0, 0, 0.5, 2, 0, 0]),
    );
  });

  it('decoded arrays are fresh copies, not views of the body', () => {
    const body = withTensor({
      dtype: DType.DTYPE_FLOAT32,
      encoding: { case: 'dense', value: le('f32', [1, 2]) },
    });
    // An odd offset inside a larger buffer, as a bytes field usually sits.
    const shifted = new Uint8Array(body.length + 1);
    shifted.set(body, 1);
    const decoded = decodeForwardBackwardRequest(shifted.subarray(1));
    const tensor = (decoded.input.data[0] as Datum).loss_fn_inputs.x as Tensor;
    shifted.fill(0);
    expect(tensor.data).toEqual(new Float32Array([1, 2]));
    expect((decoded.input.data[0] as Datum).model_input.chunks[0]?.tokens).toEqual(new Int32Array([1, 2, 3]));
  });
});

describe('decodeForwardBackwardRequest refuses, naming the field', () => {
  const dense = (dtype: number, value: Uint8Array, shape?: bigint[]) =>
    withTensor({ dtype, encoding: { case: 'dense', value }, shape: shape ?? [] });
  const F = 'data.0.loss_fn_inputs.x';
  const text = (tokens: Uint8Array) => ({ chunk: { case: 'encodedText' as const, value: { tokens } } });

  it.each([
    ['undecodable bytes', new Uint8Array([0xff, 0xff, 0xff]), 'body'],
    ['a truncated message', fixtureBytes('cross-entropy-4').subarray(0, 100), 'body'],
    ['DTYPE_UNSPECIFIED', dense(DType.DTYPE_UNSPECIFIED, le('f32', [1])), `${F}.dtype`],
    ['an unknown dtype', dense(9, le('f32', [1])), `${F}.dtype`],
    ['float32 bytes not a multiple of 4', dense(DType.DTYPE_FLOAT32, new Uint8Array(6)), `${F}.dense`],
    ['int64 bytes not a multiple of 8', dense(DType.DTYPE_INT64, new Uint8Array(12)), `${F}.dense`],
    ['bfloat16 bytes not a multiple of 2', dense(DType.DTYPE_BFLOAT16, new Uint8Array(3)), `${F}.dense`],
    [
      'a shape that does not hold the data',
      dense(DType.DTYPE_FLOAT32, le('f32', [1, 2, 3]), [2n, 2n]),
      `${F}.shape`,
    ],
    ['a negative dimension', dense(DType.DTYPE_FLOAT32, le('f32', []), [-1n]), `${F}.shape`],
    ['a tensor with no data', withTensor({ dtype: DType.DTYPE_FLOAT32 }), F],
    [
      'tokens not a multiple of 4 bytes',
      withTensor({ dtype: DType.DTYPE_FLOAT32, encoding: { case: 'dense', value: le('f32', []) } }, [
        text(le('i32', [1])),
        text(new Uint8Array(5)),
      ]),
      'data.0.model_input.chunks.1.tokens',
    ],
    [
      'a negative token id',
      withTensor({ dtype: DType.DTYPE_FLOAT32, encoding: { case: 'dense', value: le('f32', []) } }, [
        text(le('i32', [1])),
        text(le('i32', [4, -1])),
      ]),
      'data.0.model_input.chunks.1.tokens',
    ],
    [
      'an empty chunk',
      withTensor({ dtype: DType.DTYPE_FLOAT32, encoding: { case: 'dense', value: le('f32', []) } }, [{}]),
      'data.0.model_input.chunks.0',
    ],
    [
      'a sparse tensor without shape',
      withTensor({
        dtype: DType.DTYPE_FLOAT32,
        encoding: {
          case: 'sparseCsr',
          value: { values: le('f32', [1]), crowIndices: le('i64', [0, 1]), colIndices: le('i64', [0]) },
        },
      }),
      `${F}.shape`,
    ],
    [
      'CSR indices that leave the shape',
      withTensor({
        dtype: DType.DTYPE_FLOAT32,
        shape: [1n, 2n],
        encoding: {
          case: 'sparseCsr',
          value: { values: le('f32', [1]), crowIndices: le('i64', [0, 1]), colIndices: le('i64', [5]) },
        },
      }),
      `${F}.sparse_col_indices`,
    ],
    [
      'CSR indices not a multiple of 8 bytes',
      withTensor({
        dtype: DType.DTYPE_FLOAT32,
        shape: [1n, 2n],
        encoding: {
          case: 'sparseCsr',
          value: { values: le('f32', [1]), crowIndices: new Uint8Array(9), colIndices: le('i64', [0]) },
        },
      }),
      `${F}.sparse_csr.crow_indices`,
    ],
  ])('%s -> 400', (_name, bytes, field) => {
    expectRejected(bytes, 400, field);
  });

  it('a dmel chunk -> 422', () => {
    const bytes = withTensor(
      { dtype: DType.DTYPE_FLOAT32, encoding: { case: 'dense', value: le('f32', []) } },
      [{ chunk: { case: 'dmel', value: { dmel: new Uint8Array([1]) } } }],
    );
    expectRejected(bytes, 422, 'data.0.model_input.chunks.0', /only encoded_text chunks are supported/);
  });

  it('non-finite loss_fn_config values -> 400', () => {
    for (const value of [Number.NaN, Number.POSITIVE_INFINITY]) {
      expectRejected(
        wire({ lossFn: 'ppo', lossFnConfig: { clip_low: 0.8, clip_high: value } }),
        400,
        'loss_fn_config.clip_high',
      );
    }
  });

  it('a CSR shape too large to expand -> 413, before anything is allocated', () => {
    const bytes = withTensor({
      dtype: DType.DTYPE_FLOAT32,
      shape: [1n, 1_000_000_000n],
      encoding: {
        case: 'sparseCsr',
        value: { values: new Uint8Array(), crowIndices: le('i64', [0, 0]), colIndices: new Uint8Array() },
      },
    });
    expectRejected(bytes, 413, `${F}.shape`, /expand to more than/);
  });
});

// --- the stored form -------------------------------------------------------------------------

const tensorArb: fc.Arbitrary<Tensor> = fc
  .tuple(fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 1, maxLength: 3 }), fc.boolean())
  .chain(([shape, float]) => {
    const size = shape.reduce((a, b) => a * b, 1);
    return float
      ? fc
          .array(fc.float({ noDefaultInfinity: false }), { minLength: size, maxLength: size })
          .map((values): Tensor => ({ dtype: 'float32', data: Float32Array.from(values), shape }))
      : fc
          .array(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), { minLength: size, maxLength: size })
          .map((values): Tensor => ({ dtype: 'int64', data: BigInt64Array.from(values), shape }));
  });

const datumArb: fc.Arbitrary<Datum> = fc.record({
  model_input: fc.record({
    chunks: fc.array(
      fc
        .array(fc.integer({ min: 0, max: 2 ** 31 - 1 }), { maxLength: 20 })
        .map((tokens) => ({ type: 'encoded_text' as const, tokens: Int32Array.from(tokens) })),
      { maxLength: 3 },
    ),
  }),
  loss_fn_inputs: fc.dictionary(fc.string({ minLength: 1, maxLength: 12 }), tensorArb, { maxKeys: 4 }),
});

const messageArb: fc.Arbitrary<ForwardBackwardMessage> = fc.record({
  model_id: fc.string({ maxLength: 30 }),
  seq_id: fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
  forward_only: fc.boolean(),
  input: fc.record({
    data: fc.array(datumArb, { maxLength: 4 }),
    loss_fn: fc.constantFrom('cross_entropy', 'importance_sampling', 'ppo', 'cispo', 'dro', ''),
    loss_fn_config: fc.dictionary(
      fc.string({ maxLength: 10 }),
      fc.double({ noNaN: true, noDefaultInfinity: true }),
      {
        maxKeys: 3,
      },
    ),
  }) satisfies fc.Arbitrary<ForwardBackwardInput>,
});

describe('encodeStoredPass', () => {
  it('round-trips: decode(encode(x)) equals x and encode(decode(encode(x))) is byte-identical', () => {
    fc.assert(
      fc.property(messageArb, (message) => {
        const stored = encodeStoredPass(message);
        const decoded = decodeForwardBackwardRequest(stored);
        expect(decoded).toEqual(message);
        expect(Buffer.from(encodeStoredPass(decoded)).equals(Buffer.from(stored))).toBe(true);
      }),
    );
  });

  it('does not depend on the order maps were built in', () => {
    fc.assert(
      fc.property(messageArb, (message) => {
        const reversed = <T>(record: Readonly<Record<string, T>>) =>
          Object.fromEntries(Object.entries(record).reverse());
        const shuffled: ForwardBackwardMessage = {
          ...message,
          input: {
            ...message.input,
            loss_fn_config: reversed(message.input.loss_fn_config),
            data: message.input.data.map((datum) => ({
              ...datum,
              loss_fn_inputs: reversed(datum.loss_fn_inputs),
            })),
          },
        };
        expect(Buffer.from(encodeStoredPass(shuffled)).equals(Buffer.from(encodeStoredPass(message)))).toBe(
          true,
        );
      }),
    );
  });
});

describe('speed', () => {
  it('decodes a 4 x 512-token forward_backward in well under 1 ms', () => {
    const datum = (seed: number): Datum => ({
      model_input: {
        chunks: [
          { type: 'encoded_text', tokens: Int32Array.from({ length: 512 }, (_, i) => (i * seed) % 150_000) },
        ],
      },
      loss_fn_inputs: {
        target_tokens: {
          dtype: 'int64',
          data: BigInt64Array.from({ length: 512 }, (_, i) => BigInt(i)),
          shape: [512],
        },
        weights: { dtype: 'float32', data: new Float32Array(512).fill(1), shape: [512] },
      },
    });
    const message: ForwardBackwardMessage = {
      model_id: 'tenant:model',
      seq_id: 9,
      forward_only: false,
      input: { data: [1, 2, 3, 4].map(datum), loss_fn: 'cross_entropy', loss_fn_config: {} },
    };
    const bytes = encodeStoredPass(message);
    const time = (run: () => void) => {
      for (let i = 0; i < 200; i++) run();
      const samples: number[] = [];
      for (let i = 0; i < 400; i++) {
        const start = performance.now();
        run();
        samples.push(performance.now() - start);
      }
      return samples.sort((a, b) => a - b)[samples.length >> 1] as number;
    };
    const decode = time(() => decodeForwardBackwardRequest(bytes));
    const encode = time(() => encodeStoredPass(message));
    console.log(
      `4 x 512 tokens (${bytes.length} bytes): decode median ${decode.toFixed(3)} ms, encode ${encode.toFixed(3)} ms`,
    );
    expect(decode).toBeLessThan(0.5);
  });
});
