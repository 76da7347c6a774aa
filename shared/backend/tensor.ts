import { invalidField as invalid } from '../base/errors.js';

/**
 * Tensors as the worker and the backend hold them: dense, row-major, in typed arrays (W4;
 * docs/architecture.md#the-request-path). Both wires end here: protobuf `Tensor` bytes are viewed or
 * copied into these arrays, and JSON `TensorData` is converted once, at intake. Sparse CSR input is
 * made dense when it is decoded, so nothing after the edge sees it.
 */

export interface Float32Tensor {
  readonly dtype: 'float32';
  readonly data: Float32Array;
  readonly shape: readonly number[];
}

export interface Int64Tensor {
  readonly dtype: 'int64';
  readonly data: BigInt64Array;
  readonly shape: readonly number[];
}

export type Tensor = Float32Tensor | Int64Tensor;
export type TensorDtype = Tensor['dtype'];

/** The SDK's JSON `TensorData` (dense), as results are stored and answered to JSON clients. */
export interface TensorJson {
  readonly data: number[];
  readonly dtype: TensorDtype;
  readonly shape: number[];
}

/** Elements a shape holds; an empty shape is a scalar (1). */
export function shapeSize(shape: readonly number[]): number {
  let size = 1;
  for (const dimension of shape) size *= dimension;
  return size;
}

export function float32Tensor(values: ArrayLike<number>, shape?: readonly number[]): Float32Tensor {
  const data = values instanceof Float32Array ? values : Float32Array.from(values);
  return { dtype: 'float32', data, shape: shape ?? [data.length] };
}

export function int64Tensor(values: ArrayLike<number | bigint>, shape?: readonly number[]): Int64Tensor {
  const data =
    values instanceof BigInt64Array
      ? values
      : BigInt64Array.from(Array.from(values, (value) => BigInt(value)));
  return { dtype: 'int64', data, shape: shape ?? [data.length] };
}

/** JSON numbers for a JSON client or a stored result (int64 values beyond 2^53 lose precision). */
export function tensorToJson(tensor: Tensor): TensorJson {
  const data: number[] = new Array(tensor.data.length);
  if (tensor.dtype === 'float32') {
    for (let i = 0; i < tensor.data.length; i++) data[i] = tensor.data[i] as number;
  } else {
    for (let i = 0; i < tensor.data.length; i++) data[i] = Number(tensor.data[i] as bigint);
  }
  return { data, dtype: tensor.dtype, shape: [...tensor.shape] };
}

/** Checks a shape: non-negative integer dimensions whose product is `elements`. */
export function checkShape(shape: readonly number[], elements: number, field: string): void {
  for (const [index, dimension] of shape.entries()) {
    if (!Number.isSafeInteger(dimension) || dimension < 0) {
      throw invalid(`${field}.shape`, `dimension ${index} is ${dimension}, not a non-negative integer`);
    }
  }
  const size = shapeSize(shape);
  if (size !== elements) {
    throw invalid(`${field}.shape`, `shape [${shape.join(', ')}] holds ${size} values, data has ${elements}`);
  }
}

/**
 * A 2-D CSR tensor made dense: `crow` has rows + 1 non-decreasing offsets from 0 to nnz, `col` one
 * column per value, each below the shape's column count. `values` are in the tensor's dtype.
 * Every inconsistency is a 400 naming the field.
 */
export function denseFromCsr<T extends Float32Array | BigInt64Array>(
  values: T,
  crow: ArrayLike<number | bigint>,
  col: ArrayLike<number | bigint>,
  shape: readonly number[],
  field: string,
): T {
  if (shape.length !== 2) {
    throw invalid(`${field}.shape`, `a sparse CSR tensor needs a 2-D shape, got [${shape.join(', ')}]`);
  }
  checkShape(shape, shapeSize(shape), field);
  const rows = shape[0] as number;
  const cols = shape[1] as number;
  if (crow.length !== rows + 1) {
    throw invalid(
      `${field}.sparse_crow_indices`,
      `has ${crow.length} entries; ${rows} rows need ${rows + 1}`,
    );
  }
  if (col.length !== values.length) {
    throw invalid(
      `${field}.sparse_col_indices`,
      `has ${col.length} entries for ${values.length} values (one column per value)`,
    );
  }
  const dense = (values instanceof Float32Array
    ? new Float32Array(rows * cols)
    : new BigInt64Array(rows * cols)) as unknown as T;
  let previous = 0;
  for (let row = 0; row <= rows; row++) {
    const offset = Number(crow[row]);
    const first = row === 0;
    if (
      !Number.isSafeInteger(offset) ||
      offset < previous ||
      offset > values.length ||
      (first && offset !== 0)
    ) {
      throw invalid(
        `${field}.sparse_crow_indices`,
        `entry ${row} is ${offset}; offsets must rise from 0 to the ${values.length} values`,
      );
    }
    if (row > 0) {
      for (let k = previous; k < offset; k++) {
        const column = Number(col[k]);
        if (!Number.isSafeInteger(column) || column < 0 || column >= cols) {
          throw invalid(`${field}.sparse_col_indices`, `entry ${k} is ${column}, outside [0, ${cols})`);
        }
        (dense as Float32Array | BigInt64Array)[(row - 1) * cols + column] = values[k] as never;
      }
    }
    previous = offset;
  }
  if (previous !== values.length) {
    throw invalid(
      `${field}.sparse_crow_indices`,
      `the last offset is ${previous}, not the number of values (${values.length})`,
    );
  }
  return dense;
}
