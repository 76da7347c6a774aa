/**
 * Binary layout of reference states and checkpoints (little-endian, exact Float64, so a state round-trips
 * bit for bit):
 *
 *   0  'TKRF'   4  format version u8   5  blob type u8   6  flags u8 (1 moments, 2 grad)   7  zero
 *   8  DIM u16  10 VOCAB u16           12 rank u16       14 base model name length u16 (UTF-8 bytes)
 *   16 weights_version f64             24 adam_step f64
 *   32 name bytes, zero-padded to a multiple of 8; then params, [moment1, moment2], [grad] as f64 arrays
 */
import { InfrastructureError } from '../../base/errors.js';
import { adapterSize, DIM, VOCAB } from './model.js';
import { REFERENCE_STATE_KIND, type ReferenceState } from './state.js';

const MAGIC = [0x54, 0x4b, 0x52, 0x46]; // 'TKRF'
const FORMAT_VERSION = 1;
const HEADER_BYTES = 32;
const FLAG_MOMENTS = 1;
const FLAG_GRAD = 2;

export const BLOB_STATE = 1;
export const BLOB_TRAINING_WEIGHTS = 2;
export const BLOB_SAMPLER_WEIGHTS = 3;
export type BlobType = typeof BLOB_STATE | typeof BLOB_TRAINING_WEIGHTS | typeof BLOB_SAMPLER_WEIGHTS;

export interface DecodedBlob {
  readonly type: BlobType;
  readonly state: ReferenceState;
}

export function encodeBlob(type: BlobType, state: ReferenceState): Uint8Array {
  const withMoments = type !== BLOB_SAMPLER_WEIGHTS && state.moment1 !== null && state.moment2 !== null;
  const withGrad = type === BLOB_STATE && state.grad !== null;
  const name = new TextEncoder().encode(state.base_model);
  const namePadded = Math.ceil(name.length / 8) * 8;
  const arrays = [state.params];
  if (withMoments) arrays.push(state.moment1 as Float64Array, state.moment2 as Float64Array);
  if (withGrad) arrays.push(state.grad as Float64Array);
  const bytes = new Uint8Array(HEADER_BYTES + namePadded + arrays.length * state.params.length * 8);
  const view = new DataView(bytes.buffer);
  bytes.set(MAGIC, 0);
  view.setUint8(4, FORMAT_VERSION);
  view.setUint8(5, type);
  view.setUint8(6, (withMoments ? FLAG_MOMENTS : 0) | (withGrad ? FLAG_GRAD : 0));
  view.setUint16(8, DIM, true);
  view.setUint16(10, VOCAB, true);
  view.setUint16(12, state.rank, true);
  view.setUint16(14, name.length, true);
  view.setFloat64(16, state.weights_version, true);
  view.setFloat64(24, type === BLOB_SAMPLER_WEIGHTS ? 0 : state.adam_step, true);
  bytes.set(name, HEADER_BYTES);
  let offset = HEADER_BYTES + namePadded;
  for (const array of arrays) {
    for (let i = 0; i < array.length; i++, offset += 8) view.setFloat64(offset, array[i] as number, true);
  }
  return bytes;
}

function corrupt(reason: string): InfrastructureError {
  return new InfrastructureError(`not a valid reference model blob: ${reason}`);
}

export function decodeBlob(bytes: Uint8Array): DecodedBlob {
  if (bytes.length < HEADER_BYTES) throw corrupt('too short');
  if (MAGIC.some((byte, i) => bytes[i] !== byte)) throw corrupt('bad magic');
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const version = view.getUint8(4);
  if (version !== FORMAT_VERSION) throw corrupt(`unknown format version ${version}`);
  const type = view.getUint8(5);
  if (type !== BLOB_STATE && type !== BLOB_TRAINING_WEIGHTS && type !== BLOB_SAMPLER_WEIGHTS) {
    throw corrupt(`unknown blob type ${type}`);
  }
  const flags = view.getUint8(6);
  if (view.getUint16(8, true) !== DIM || view.getUint16(10, true) !== VOCAB) {
    throw corrupt('built for a different model layout (DIM/VOCAB)');
  }
  const rank = view.getUint16(12, true);
  const nameLength = view.getUint16(14, true);
  const namePadded = Math.ceil(nameLength / 8) * 8;
  const size = adapterSize(rank);
  const arrayCount = 1 + (flags & FLAG_MOMENTS ? 2 : 0) + (flags & FLAG_GRAD ? 1 : 0);
  if (bytes.length !== HEADER_BYTES + namePadded + arrayCount * size * 8) throw corrupt('wrong length');
  let offset = HEADER_BYTES + namePadded;
  const readArray = (): Float64Array => {
    const out = new Float64Array(size);
    for (let i = 0; i < size; i++, offset += 8) out[i] = view.getFloat64(offset, true);
    return out;
  };
  const params = readArray();
  const moment1 = flags & FLAG_MOMENTS ? readArray() : null;
  const moment2 = flags & FLAG_MOMENTS ? readArray() : null;
  const grad = flags & FLAG_GRAD ? readArray() : null;
  const state: ReferenceState = {
    kind: REFERENCE_STATE_KIND,
    base_model: new TextDecoder().decode(bytes.subarray(HEADER_BYTES, HEADER_BYTES + nameLength)),
    rank,
    weights_version: view.getFloat64(16, true),
    adam_step: view.getFloat64(24, true),
    params,
    moment1,
    moment2,
    grad,
  };
  return { type, state };
}
