/**
 * Typed arrays to and from the little-endian bytes the Tinker wire carries (numpy `.tobytes()`).
 * Decoded arrays are always fresh copies: protobuf bytes fields are subarrays of the request at
 * arbitrary offsets, so a view could be misaligned and would pin the whole body in memory.
 */

// Lambda (x86_64, arm64) is little-endian, where a copy is all it takes; the DataView paths keep the
// codec correct anywhere else.
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** A fresh, aligned copy. Not `bytes.slice()`: on a Node Buffer that is a view, not a copy. */
function copyBuffer(bytes: Uint8Array): ArrayBuffer {
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  return copy.buffer;
}

function view(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** `bytes.length` must be a multiple of 4 (callers check, to name the field). */
export function readInt32(bytes: Uint8Array): Int32Array {
  if (LITTLE_ENDIAN) return new Int32Array(copyBuffer(bytes));
  const out = new Int32Array(bytes.length / 4);
  const data = view(bytes);
  for (let i = 0; i < out.length; i++) out[i] = data.getInt32(i * 4, true);
  return out;
}

export function readFloat32(bytes: Uint8Array): Float32Array {
  if (LITTLE_ENDIAN) return new Float32Array(copyBuffer(bytes));
  const out = new Float32Array(bytes.length / 4);
  const data = view(bytes);
  for (let i = 0; i < out.length; i++) out[i] = data.getFloat32(i * 4, true);
  return out;
}

export function readInt64(bytes: Uint8Array): BigInt64Array {
  if (LITTLE_ENDIAN) return new BigInt64Array(copyBuffer(bytes));
  const out = new BigInt64Array(bytes.length / 8);
  const data = view(bytes);
  for (let i = 0; i < out.length; i++) out[i] = data.getBigInt64(i * 8, true);
  return out;
}

/** int32 values widened to int64, as the SDK widens DTYPE_INT32. */
export function readInt32AsInt64(bytes: Uint8Array): BigInt64Array {
  const narrow = readInt32(bytes);
  const out = new BigInt64Array(narrow.length);
  for (let i = 0; i < narrow.length; i++) out[i] = BigInt(narrow[i] as number);
  return out;
}

/** bfloat16 is the upper half of a float32: shift each uint16 into place. */
export function readBfloat16AsFloat32(bytes: Uint8Array): Float32Array {
  const count = bytes.length / 2;
  const bits = new Uint32Array(count);
  for (let i = 0; i < count; i++) {
    bits[i] = ((bytes[2 * i] as number) | ((bytes[2 * i + 1] as number) << 8)) << 16;
  }
  return new Float32Array(bits.buffer);
}

/** The little-endian bytes of a typed array (a fresh copy, never a view of the caller's memory). */
export function arrayBytes(values: Int32Array | Float32Array | BigInt64Array): Uint8Array {
  if (LITTLE_ENDIAN) return new Uint8Array(values.buffer, values.byteOffset, values.byteLength).slice();
  const out = new Uint8Array(values.byteLength);
  const data = new DataView(out.buffer);
  if (values instanceof BigInt64Array) {
    for (let i = 0; i < values.length; i++) data.setBigInt64(i * 8, values[i] as bigint, true);
  } else if (values instanceof Int32Array) {
    for (let i = 0; i < values.length; i++) data.setInt32(i * 4, values[i] as number, true);
  } else {
    for (let i = 0; i < values.length; i++) data.setFloat32(i * 4, values[i] as number, true);
  }
  return out;
}
