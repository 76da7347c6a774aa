import { checkShape, denseFromCsr, shapeSize, type Tensor } from '../backend/tensor.js';
import { invalidField as invalid } from '../base/errors.js';
import {
  arrayBytes,
  readBfloat16AsFloat32,
  readFloat32,
  readInt32AsInt64,
  readInt64,
} from './array-bytes.js';
import { DType, type Tensor as TensorMessage } from './gen/tinker_public_pb.js';

/** Bytes per element of each dtype the SDK can read or write. */
const ITEM_SIZE: Partial<Record<number, number>> = {
  [DType.DTYPE_FLOAT32]: 4,
  [DType.DTYPE_INT64]: 8,
  [DType.DTYPE_INT32]: 4,
  [DType.DTYPE_BFLOAT16]: 2,
};

/**
 * How many values sparse tensors of one request may expand to. A CSR shape costs nothing on the wire
 * (`[1, 10^9]` with no values is a few bytes), so without a cap a tiny body could allocate gigabytes.
 */
export interface CsrBudget {
  remaining: number;
  readonly limit: number;
}

function itemSize(dtype: number, field: string): number {
  if (dtype === DType.DTYPE_UNSPECIFIED)
    throw invalid(`${field}.dtype`, 'DTYPE_UNSPECIFIED is not a tensor dtype');
  const size = ITEM_SIZE[dtype];
  if (size === undefined) throw invalid(`${field}.dtype`, `unknown dtype ${dtype}`);
  return size;
}

/** Values in the wire dtype, widened as the SDK widens them (INT32 -> int64, BFLOAT16 -> float32). */
function readValues(bytes: Uint8Array, dtype: number, field: string): Float32Array | BigInt64Array {
  const size = itemSize(dtype, field);
  if (bytes.length % size !== 0) {
    throw invalid(
      field,
      `byte length ${bytes.length} is not a multiple of ${size} (${DType[dtype]?.replace('DTYPE_', '')})`,
    );
  }
  switch (dtype) {
    case DType.DTYPE_FLOAT32:
      return readFloat32(bytes);
    case DType.DTYPE_INT64:
      return readInt64(bytes);
    case DType.DTYPE_INT32:
      return readInt32AsInt64(bytes);
    default:
      return readBfloat16AsFloat32(bytes);
  }
}

function readIndices(bytes: Uint8Array, field: string): BigInt64Array {
  if (bytes.length % 8 !== 0)
    throw invalid(field, `byte length ${bytes.length} is not a multiple of 8 (int64)`);
  return readInt64(bytes);
}

function typed(values: Float32Array | BigInt64Array, shape: number[]): Tensor {
  return values instanceof Float32Array
    ? { dtype: 'float32', data: values, shape }
    : { dtype: 'int64', data: values, shape };
}

/** A wire `Tensor` as a dense typed tensor; `field` names it in errors (`data.0.loss_fn_inputs.weights`). */
export function tensorFromMessage(message: TensorMessage, field: string, budget: CsrBudget): Tensor {
  itemSize(message.dtype, field);
  // proto3 cannot tell an absent shape from an empty one; the SDK always writes it, and absent means 1-D.
  const declared = message.shape.length === 0 ? undefined : message.shape.map(Number);
  const encoding = message.encoding;
  if (encoding.case === 'dense') {
    const values = readValues(encoding.value, message.dtype, `${field}.dense`);
    const shape = declared ?? [values.length];
    checkShape(shape, values.length, field);
    return typed(values, shape);
  }
  if (encoding.case === 'sparseCsr') {
    const csr = encoding.value;
    if (declared === undefined) throw invalid(`${field}.shape`, 'a sparse CSR tensor needs its 2-D shape');
    const values = readValues(csr.values, message.dtype, `${field}.sparse_csr.values`);
    const crow = readIndices(csr.crowIndices, `${field}.sparse_csr.crow_indices`);
    const col = readIndices(csr.colIndices, `${field}.sparse_csr.col_indices`);
    checkShape(declared, shapeSize(declared), field);
    const expanded = shapeSize(declared);
    if (declared.length === 2 && expanded > budget.remaining) {
      throw invalid(
        `${field}.shape`,
        `sparse tensors of this request expand to more than ${budget.limit} values`,
        413,
      );
    }
    const dense = denseFromCsr(values, crow, col, declared, field);
    budget.remaining -= expanded;
    return typed(dense, declared);
  }
  throw invalid(field, 'a tensor needs dense or sparse_csr data');
}

/** The stored (canonical) wire form of a typed tensor: dense, FLOAT32 or INT64, shape always written. */
export function tensorToMessage(tensor: Tensor): {
  encoding: { case: 'dense'; value: Uint8Array };
  dtype: DType;
  shape: bigint[];
} {
  return {
    encoding: { case: 'dense', value: arrayBytes(tensor.data) },
    dtype: tensor.dtype === 'float32' ? DType.DTYPE_FLOAT32 : DType.DTYPE_INT64,
    shape: tensor.shape.map((dimension) => BigInt(dimension)),
  };
}
