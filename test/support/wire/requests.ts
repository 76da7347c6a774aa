import { create, type MessageInitShape, toBinary } from '@bufbuild/protobuf';
import {
  type Chunk,
  type ChunkSchema,
  type Datum,
  type DatumSchema,
  DType,
  type ForwardBackwardRequest,
  ForwardBackwardRequestSchema,
  type Tensor,
  type TensorSchema,
} from '../../../shared/wire/gen/tinker_public_pb.js';

/**
 * `ForwardBackwardRequest` bodies built in tests, byte for byte what the SDK 0.25 would send for the
 * same values (little-endian arrays, dtype and shape written), with any field overridden or broken.
 */

/** The plain-object init of a message (not a message itself), so inits spread and combine. */
export type TensorInit = Exclude<MessageInitShape<typeof TensorSchema>, Tensor>;
export type ChunkInit = Exclude<MessageInitShape<typeof ChunkSchema>, Chunk>;
export type DatumInit = Exclude<MessageInitShape<typeof DatumSchema>, Datum>;
export type RequestInit = Exclude<
  MessageInitShape<typeof ForwardBackwardRequestSchema>,
  ForwardBackwardRequest
>;

export const int32Bytes = (values: readonly number[]): Uint8Array =>
  new Uint8Array(Int32Array.from(values).buffer);
export const int64Bytes = (values: readonly number[]): Uint8Array =>
  new Uint8Array(BigInt64Array.from(values.map(BigInt)).buffer);
export const float32Bytes = (values: readonly number[]): Uint8Array =>
  new Uint8Array(Float32Array.from(values).buffer);

export const int64Tensor = (values: readonly number[], shape = [values.length]): TensorInit => ({
  encoding: { case: 'dense', value: int64Bytes(values) },
  dtype: DType.DTYPE_INT64,
  shape: shape.map(BigInt),
});
export const float32Tensor = (values: readonly number[], shape = [values.length]): TensorInit => ({
  encoding: { case: 'dense', value: float32Bytes(values) },
  dtype: DType.DTYPE_FLOAT32,
  shape: shape.map(BigInt),
});

export const textChunk = (tokens: readonly number[]): ChunkInit => ({
  chunk: { case: 'encodedText', value: { tokens: int32Bytes(tokens) } },
});

/** A cross_entropy datum: `tokens` in, each token + 1 as its target, optional extra (or replaced) inputs. */
export function pbDatum(
  tokens: readonly number[] = [1, 2, 3],
  inputs: Record<string, TensorInit | undefined> = {},
): DatumInit {
  const all: Record<string, TensorInit | undefined> = {
    target_tokens: int64Tensor(tokens.map((token) => token + 1)),
    ...inputs,
  };
  return {
    modelInput: [textChunk(tokens)],
    lossFnInputs: Object.fromEntries(
      Object.entries(all).filter((entry): entry is [string, TensorInit] => entry[1] !== undefined),
    ),
  };
}

/** The bytes of a forward_backward request: one cross_entropy datum unless `init` says otherwise. */
export function pbForwardBackward(init: RequestInit): Uint8Array {
  return toBinary(
    ForwardBackwardRequestSchema,
    create(ForwardBackwardRequestSchema, { data: [pbDatum()], lossFn: 'cross_entropy', ...init }),
  );
}
