/**
 * A safetensors writer (the format Hugging Face's `safetensors` reads; docs/design.md#c2):
 *
 *   8 bytes     N, the header's length, unsigned little-endian
 *   N bytes     a UTF-8 JSON object: per tensor {"dtype", "shape", "data_offsets": [begin, end]}, offsets
 *               into the data that follows, plus an optional "__metadata__" of string values; padded
 *               with spaces so that N is a multiple of 8, which keeps the data 8-byte aligned
 *   the data    every tensor's elements, row-major and little-endian, back to back with no gaps
 *
 * Tensors are laid out in byte order of their names, so the same tensors always give the same bytes.
 */
import { InfrastructureError } from '../../base/errors.js';

export type SafetensorsTensor =
  | { readonly dtype: 'F64'; readonly shape: readonly number[]; readonly data: Float64Array }
  | { readonly dtype: 'F32'; readonly shape: readonly number[]; readonly data: Float32Array };

export type SafetensorsDtype = SafetensorsTensor['dtype'];

export const DTYPE_BYTES: Readonly<Record<SafetensorsDtype, number>> = { F64: 8, F32: 4 };

const METADATA_KEY = '__metadata__';
const LENGTH_BYTES = 8;
const ALIGNMENT = 8;

function invalid(name: string, reason: string): InfrastructureError {
  return new InfrastructureError(`safetensors tensor ${JSON.stringify(name)}: ${reason}`);
}

function checkTensor(name: string, tensor: SafetensorsTensor): void {
  if (name.length === 0 || name === METADATA_KEY) throw invalid(name, 'reserved or empty name');
  if (!tensor.shape.every((size) => Number.isSafeInteger(size) && size >= 0)) {
    throw invalid(name, `shape [${tensor.shape.join(', ')}] is not a list of sizes`);
  }
  const elements = tensor.shape.reduce((product, size) => product * size, 1);
  if (elements !== tensor.data.length) {
    throw invalid(
      name,
      `shape [${tensor.shape.join(', ')}] holds ${elements} values, data has ${tensor.data.length}`,
    );
  }
}

function writeElements(view: DataView, offset: number, tensor: SafetensorsTensor): void {
  const { data } = tensor;
  if (tensor.dtype === 'F64') {
    for (let i = 0; i < data.length; i++) view.setFloat64(offset + i * 8, data[i] as number, true);
  } else {
    for (let i = 0; i < data.length; i++) view.setFloat32(offset + i * 4, data[i] as number, true);
  }
}

/** The file holding `tensors` (and `metadata` as `__metadata__` when given). */
export function writeSafetensors(
  tensors: Readonly<Record<string, SafetensorsTensor>>,
  metadata?: Readonly<Record<string, string>>,
): Uint8Array {
  const names = Object.keys(tensors).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const header: Record<string, unknown> = {};
  if (metadata !== undefined) header[METADATA_KEY] = { ...metadata };
  const layout: { readonly tensor: SafetensorsTensor; readonly begin: number }[] = [];
  let dataBytes = 0;
  for (const name of names) {
    const tensor = tensors[name] as SafetensorsTensor;
    checkTensor(name, tensor);
    const end = dataBytes + tensor.data.length * DTYPE_BYTES[tensor.dtype];
    header[name] = { dtype: tensor.dtype, shape: [...tensor.shape], data_offsets: [dataBytes, end] };
    layout.push({ tensor, begin: dataBytes });
    dataBytes = end;
  }
  const json = new TextEncoder().encode(JSON.stringify(header));
  const headerBytes = Math.ceil(json.length / ALIGNMENT) * ALIGNMENT;
  const out = new Uint8Array(LENGTH_BYTES + headerBytes + dataBytes);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(headerBytes), true);
  out.set(json, LENGTH_BYTES);
  out.fill(0x20, LENGTH_BYTES + json.length, LENGTH_BYTES + headerBytes);
  const start = LENGTH_BYTES + headerBytes;
  for (const { tensor, begin } of layout) writeElements(view, start + begin, tensor);
  return out;
}
