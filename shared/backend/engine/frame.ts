import { endianness } from 'node:os';
import { InfrastructureError } from '../../base/errors.js';
import type { Tensor } from '../tensor.js';

/**
 * The engine protocol's framing (docs/engine-protocol.md#framing): a u32 little-endian header length,
 * a UTF-8 JSON header, then the buffers the header lists, back to back. Tensors and byte strings ride
 * in the buffers, referenced from the header as `{ "$tensor": i, "dtype", "shape" }` and
 * `{ "$bytes": i }`; they never become JSON numbers (G2). Pure: frames in, frames out.
 */

/** Element types a tensor may have on the wire. */
export type WireDtype = 'float32' | 'int32' | 'int64';

/** A tensor read off the wire: the project's `Tensor` types, plus int32 (token ids). */
export type WireTensor =
  | Tensor
  | { readonly dtype: 'int32'; readonly data: Int32Array; readonly shape: readonly number[] };

export interface Frame {
  readonly header: Readonly<Record<string, unknown>>;
  readonly buffers: readonly Uint8Array[];
}

/** A malformed frame or reference: the engine and the worker no longer agree, so the process restarts. */
export class EngineProtocolError extends InfrastructureError {}

/** Headers above this are refused: a corrupt length would otherwise make the reader wait forever. */
export const MAX_HEADER_BYTES = 64 * 1024 * 1024;

const BYTES_PER_ELEMENT: Readonly<Record<WireDtype, number>> = { float32: 4, int32: 4, int64: 8 };

// Typed arrays are host-endian and the wire is little-endian: copying element by element on a
// big-endian host is possible but no supported host is one.
if (endianness() !== 'LE') throw new Error('the engine protocol needs a little-endian host');

/**
 * Collects the buffers of one outgoing frame while its header is built: each `tensor` or `bytes`
 * call returns the header's reference and keeps a view of the data (no copy).
 */
export class FrameBuilder {
  readonly buffers: Uint8Array[] = [];

  tensor(tensor: WireTensor): { $tensor: number; dtype: WireDtype; shape: number[] } {
    return { $tensor: this.#add(viewBytes(tensor.data)), dtype: tensor.dtype, shape: [...tensor.shape] };
  }

  /** A 1-D int32 tensor of token ids. */
  tokens(tokens: Int32Array): { $tensor: number; dtype: WireDtype; shape: number[] } {
    return this.tensor({ dtype: 'int32', data: tokens, shape: [tokens.length] });
  }

  bytes(bytes: Uint8Array): { $bytes: number } {
    return { $bytes: this.#add(bytes) };
  }

  #add(bytes: Uint8Array): number {
    this.buffers.push(bytes);
    return this.buffers.length - 1;
  }
}

function viewBytes(data: Float32Array | Int32Array | BigInt64Array): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** One frame as the chunks to write, in order: length, header, buffers (views, not copies). */
export function encodeFrame(
  header: Record<string, unknown>,
  buffers: readonly Uint8Array[] = [],
): Uint8Array[] {
  const json = new TextEncoder().encode(
    JSON.stringify({ ...header, buffers: buffers.map((buffer) => buffer.byteLength) }),
  );
  const length = new Uint8Array(4);
  new DataView(length.buffer).setUint32(0, json.byteLength, true);
  return [length, json, ...buffers];
}

/**
 * Reads frames from a byte stream in whatever chunks it arrives. `push` returns the frames completed
 * by the chunk; a malformed header throws `EngineProtocolError` (the stream cannot be resynchronised).
 */
export class FrameReader {
  #chunks: Uint8Array[] = [];
  #buffered = 0;
  #pending:
    | {
        readonly header: Record<string, unknown>;
        readonly lengths: readonly number[];
        readonly total: number;
      }
    | undefined;
  #headerLength: number | undefined;

  push(chunk: Uint8Array): Frame[] {
    if (chunk.byteLength > 0) {
      this.#chunks.push(chunk);
      this.#buffered += chunk.byteLength;
    }
    const frames: Frame[] = [];
    for (;;) {
      if (this.#headerLength === undefined) {
        if (this.#buffered < 4) break;
        const prefix = this.#take(4);
        const length = new DataView(prefix.buffer, prefix.byteOffset, 4).getUint32(0, true);
        if (length > MAX_HEADER_BYTES) {
          throw new EngineProtocolError(`frame header of ${length} bytes exceeds ${MAX_HEADER_BYTES}`);
        }
        this.#headerLength = length;
      }
      if (this.#pending === undefined) {
        if (this.#buffered < this.#headerLength) break;
        const header = parseHeader(this.#take(this.#headerLength));
        const lengths = bufferLengths(header);
        this.#pending = { header, lengths, total: lengths.reduce((sum, n) => sum + n, 0) };
      }
      if (this.#buffered < this.#pending.total) break;
      const buffers = this.#pending.lengths.map((length) => this.#take(length));
      frames.push({ header: this.#pending.header, buffers });
      this.#pending = undefined;
      this.#headerLength = undefined;
    }
    return frames;
  }

  /** Bytes received but not yet part of a complete frame. */
  get buffered(): number {
    return this.#buffered;
  }

  /** The next `length` bytes as one array (a view when they sit in one chunk). */
  #take(length: number): Uint8Array {
    const first = this.#chunks[0];
    if (first !== undefined && first.byteLength >= length) {
      const out = first.subarray(0, length);
      if (first.byteLength === length) this.#chunks.shift();
      else this.#chunks[0] = first.subarray(length);
      this.#buffered -= length;
      return out;
    }
    const out = new Uint8Array(length);
    let filled = 0;
    while (filled < length) {
      const chunk = this.#chunks[0] as Uint8Array;
      const part = Math.min(chunk.byteLength, length - filled);
      out.set(chunk.subarray(0, part), filled);
      filled += part;
      if (part === chunk.byteLength) this.#chunks.shift();
      else this.#chunks[0] = chunk.subarray(part);
    }
    this.#buffered -= length;
    return out;
  }
}

function parseHeader(bytes: Uint8Array): Record<string, unknown> {
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (error) {
    throw new EngineProtocolError('frame header is not UTF-8 JSON', { cause: error });
  }
  if (header === null || typeof header !== 'object' || Array.isArray(header)) {
    throw new EngineProtocolError('frame header is not a JSON object');
  }
  return header as Record<string, unknown>;
}

function bufferLengths(header: Record<string, unknown>): number[] {
  const lengths = header.buffers ?? [];
  if (!Array.isArray(lengths) || !lengths.every((n) => Number.isSafeInteger(n) && n >= 0)) {
    throw new EngineProtocolError('frame header.buffers is not a list of byte lengths');
  }
  return lengths as number[];
}

/**
 * A header value with every `$tensor` and `$bytes` reference replaced by its buffer: a `WireTensor`
 * (copied when the buffer is not aligned for its element type) or a `Uint8Array`. Each buffer must be
 * referenced exactly once, and a tensor's shape must hold exactly its buffer's elements.
 */
export function resolveBuffers(value: unknown, buffers: readonly Uint8Array[]): unknown {
  const used = new Set<number>();
  const take = (index: unknown, what: string): Uint8Array => {
    if (!Number.isSafeInteger(index) || (index as number) < 0 || (index as number) >= buffers.length) {
      throw new EngineProtocolError(`${what} names buffer ${String(index)}; the frame has ${buffers.length}`);
    }
    if (used.has(index as number))
      throw new EngineProtocolError(`buffer ${String(index)} is referenced twice`);
    used.add(index as number);
    return buffers[index as number] as Uint8Array;
  };
  const walk = (item: unknown): unknown => {
    if (Array.isArray(item)) return item.map(walk);
    if (item === null || typeof item !== 'object') return item;
    const record = item as Record<string, unknown>;
    if ('$tensor' in record) return readTensor(record, take(record.$tensor, '$tensor'));
    if ('$bytes' in record) return take(record.$bytes, '$bytes');
    return Object.fromEntries(Object.entries(record).map(([key, inner]) => [key, walk(inner)]));
  };
  const resolved = walk(value);
  if (used.size !== buffers.length) {
    throw new EngineProtocolError(`${buffers.length - used.size} of the frame's buffers are not referenced`);
  }
  return resolved;
}

function readTensor(reference: Record<string, unknown>, bytes: Uint8Array): WireTensor {
  const { dtype, shape } = reference;
  if (dtype !== 'float32' && dtype !== 'int32' && dtype !== 'int64') {
    throw new EngineProtocolError(`tensor dtype ${String(dtype)} is not float32, int32 or int64`);
  }
  if (!Array.isArray(shape) || !shape.every((n) => Number.isSafeInteger(n) && n >= 0)) {
    throw new EngineProtocolError('tensor shape is not a list of non-negative integers');
  }
  const size = BYTES_PER_ELEMENT[dtype];
  const elements = (shape as number[]).reduce((product, n) => product * n, 1);
  if (bytes.byteLength !== elements * size) {
    throw new EngineProtocolError(
      `tensor of shape [${shape.join(', ')}] ${dtype} needs ${elements * size} bytes, its buffer has ${bytes.byteLength}`,
    );
  }
  // Typed arrays need their element alignment; a buffer inside a frame has none guaranteed.
  // `new Uint8Array(view)` copies (a Buffer's own slice() would not).
  const aligned = bytes.byteOffset % size === 0 ? bytes : new Uint8Array(bytes);
  const { buffer, byteOffset } = aligned;
  const dims = [...(shape as number[])];
  if (dtype === 'float32')
    return { dtype, data: new Float32Array(buffer, byteOffset, elements), shape: dims };
  if (dtype === 'int32') return { dtype, data: new Int32Array(buffer, byteOffset, elements), shape: dims };
  return { dtype, data: new BigInt64Array(buffer, byteOffset, elements), shape: dims };
}
