import { InfrastructureError } from '../../../base/errors.js';

/**
 * LEB128 varints and zigzag, on plain numbers (not bitwise ops, which stop at 32 bits), so values up
 * to 2^53 round-trip. Shared by the token packing and the row header.
 */

/** Growable byte buffer: the encoders append to it, then take one exact-length copy. */
export class ByteWriter {
  private buffer: Uint8Array;
  private length = 0;

  constructor(initialCapacity = 256) {
    this.buffer = new Uint8Array(initialCapacity);
  }

  get size(): number {
    return this.length;
  }

  private reserve(extra: number): void {
    if (this.length + extra <= this.buffer.length) return;
    let capacity = this.buffer.length * 2;
    while (capacity < this.length + extra) capacity *= 2;
    const next = new Uint8Array(capacity);
    next.set(this.buffer.subarray(0, this.length));
    this.buffer = next;
  }

  byte(value: number): void {
    this.reserve(1);
    this.buffer[this.length++] = value & 0xff;
  }

  bytes(values: Uint8Array): void {
    this.reserve(values.length);
    this.buffer.set(values, this.length);
    this.length += values.length;
  }

  varint(value: number): void {
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new RangeError(`varint needs a non-negative safe integer, got ${value}`);
    }
    this.reserve(8);
    let rest = value;
    while (rest >= 0x80) {
      this.buffer[this.length++] = (rest % 0x80) | 0x80;
      rest = Math.floor(rest / 0x80);
    }
    this.buffer[this.length++] = rest;
  }

  /**
   * Appends `count` bytes for the caller to fill in place and returns them (a view, valid until the
   * next write): lets hot loops write without a bounds check per byte.
   */
  claim(count: number): Uint8Array {
    this.reserve(count);
    const view = this.buffer.subarray(this.length, this.length + count);
    this.length += count;
    return view;
  }

  /** The bytes written so far, without copying (valid until the next write). */
  view(): Uint8Array {
    return this.buffer.subarray(0, this.length);
  }

  finish(): Uint8Array {
    return this.buffer.slice(0, this.length);
  }
}

/** Thrown when bytes end early or hold an impossible value; callers map it to "corrupt". */
export class TruncatedInputError extends InfrastructureError {
  override readonly name = 'TruncatedInputError';
}

export class ByteReader {
  private offset = 0;

  constructor(private readonly buffer: Uint8Array) {}

  get position(): number {
    return this.offset;
  }

  get remaining(): number {
    return this.buffer.length - this.offset;
  }

  byte(): number {
    const value = this.buffer[this.offset];
    if (value === undefined) throw new TruncatedInputError('input ended inside a byte field');
    this.offset += 1;
    return value;
  }

  bytes(count: number): Uint8Array {
    if (count < 0 || this.offset + count > this.buffer.length) {
      throw new TruncatedInputError(`input ended inside a ${count}-byte field`);
    }
    const out = this.buffer.subarray(this.offset, this.offset + count);
    this.offset += count;
    return out;
  }

  varint(): number {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 8; i++) {
      const byte = this.byte();
      value += (byte & 0x7f) * scale;
      if (byte < 0x80) {
        if (!Number.isSafeInteger(value)) throw new TruncatedInputError('varint exceeds 2^53');
        return value;
      }
      scale *= 0x80;
    }
    throw new TruncatedInputError('varint longer than 8 bytes');
  }
}

/** Maps signed to unsigned so small magnitudes of either sign stay short: 0,-1,1,-2 -> 0,1,2,3. */
export function zigzag(value: number): number {
  return value >= 0 ? value * 2 : -value * 2 - 1;
}

export function unzigzag(value: number): number {
  return value % 2 === 0 ? value / 2 : -(value + 1) / 2;
}

/** Bytes a varint of `value` takes (for size estimates without encoding). */
export function varintSize(value: number): number {
  let size = 1;
  let rest = value;
  while (rest >= 0x80) {
    rest = Math.floor(rest / 0x80);
    size += 1;
  }
  return size;
}
