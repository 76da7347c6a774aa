import { describe, expect, it } from 'vitest';
import {
  EngineProtocolError,
  encodeFrame,
  FrameBuilder,
  FrameReader,
  MAX_HEADER_BYTES,
  resolveBuffers,
} from '../../shared/backend/engine/frame.js';

function concat(chunks: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.byteLength, 0));
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}

describe('engine frames (docs/engine-protocol.md#framing)', () => {
  it('lays a frame out as u32 LE header length, JSON header with buffer lengths, raw buffers', () => {
    const frame = new FrameBuilder();
    const args = {
      tokens: frame.tokens(Int32Array.from([1, 258])),
      blob: frame.bytes(Uint8Array.from([9, 8])),
    };
    const bytes = concat(encodeFrame({ id: 7, op: 'x', args }, frame.buffers));
    const length = new DataView(bytes.buffer).getUint32(0, true);
    const header = JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + length)));
    expect(header).toEqual({
      id: 7,
      op: 'x',
      args: { tokens: { $tensor: 0, dtype: 'int32', shape: [2] }, blob: { $bytes: 1 } },
      buffers: [8, 2],
    });
    // Token ids are little-endian int32s in the buffer, never JSON numbers.
    expect([...bytes.subarray(4 + length)]).toEqual([1, 0, 0, 0, 2, 1, 0, 0, 9, 8]);
    expect(new TextDecoder().decode(bytes.subarray(4, 4 + length))).not.toContain('258');
  });

  it('round-trips float32, int32 and int64 tensors and bytes, in any chunking, bit for bit', () => {
    const frame = new FrameBuilder();
    const floats = Float32Array.from([1.5, -0, Number.NaN, 3.4028234663852886e38, 1e-45]);
    const longs = BigInt64Array.from([-(2n ** 63n), 2n ** 53n + 1n, 0n]);
    const ints = Int32Array.from([-1, 2 ** 31 - 1]);
    const header = {
      id: 1,
      ok: true,
      result: {
        a: frame.tensor({ dtype: 'float32', data: floats, shape: [5] }),
        nested: [{ b: frame.tensor({ dtype: 'int64', data: longs, shape: [3, 1] }) }],
        c: frame.tokens(ints),
        d: frame.bytes(Uint8Array.from([1, 2, 3])),
        n: 0.1,
      },
    };
    const bytes = concat(encodeFrame(header, frame.buffers));
    for (const step of [1, 3, 7, bytes.length]) {
      const reader = new FrameReader();
      const frames = [];
      for (let i = 0; i < bytes.length; i += step) frames.push(...reader.push(bytes.subarray(i, i + step)));
      expect(frames).toHaveLength(1);
      expect(reader.buffered).toBe(0);
      const got = frames[0];
      if (got === undefined) throw new Error('no frame');
      const result = resolveBuffers(got.header.result, got.buffers) as Record<string, unknown>;
      const a = result.a as { data: Float32Array; shape: number[] };
      expect(new Uint8Array(a.data.buffer, a.data.byteOffset, a.data.byteLength)).toEqual(
        new Uint8Array(floats.buffer),
      );
      expect(result.nested).toEqual([{ b: { dtype: 'int64', data: longs, shape: [3, 1] } }]);
      expect(result.c).toEqual({ dtype: 'int32', data: ints, shape: [2] });
      expect(result.d).toEqual(Uint8Array.from([1, 2, 3]));
      expect(result.n).toBe(0.1);
    }
  });

  it('reads several frames from one chunk and keeps a partial one for the next', () => {
    const one = concat(encodeFrame({ id: 1 }));
    const two = concat(encodeFrame({ id: 2 }, [Uint8Array.from([5])]));
    const reader = new FrameReader();
    const joined = concat([one, two]);
    expect(reader.push(joined.subarray(0, joined.length - 1)).map((f) => f.header.id)).toEqual([1]);
    expect(reader.push(joined.subarray(joined.length - 1)).map((f) => f.header.id)).toEqual([2]);
  });

  it('copies a tensor whose buffer is not aligned for its element type', () => {
    const frame = new FrameBuilder();
    const odd = frame.bytes(Uint8Array.from([1]));
    const tensor = frame.tensor({ dtype: 'float32', data: Float32Array.from([2.5]), shape: [1] });
    const [got] = new FrameReader().push(concat(encodeFrame({ odd, tensor }, frame.buffers)));
    if (got === undefined) throw new Error('no frame');
    const resolved = resolveBuffers({ odd: got.header.odd, tensor: got.header.tensor }, got.buffers) as {
      tensor: { data: Float32Array };
    };
    expect([...resolved.tensor.data]).toEqual([2.5]);
  });

  it('refuses malformed frames and references with a protocol error', () => {
    const bad = (header: string) => {
      const json = new TextEncoder().encode(header);
      const length = new Uint8Array(4);
      new DataView(length.buffer).setUint32(0, json.length, true);
      return () => new FrameReader().push(concat([length, json]));
    };
    expect(bad('{not json')).toThrow(EngineProtocolError);
    expect(bad('[1]')).toThrow(/not a JSON object/);
    expect(bad('{"buffers":[-1]}')).toThrow(/buffers/);
    const huge = new Uint8Array(4);
    new DataView(huge.buffer).setUint32(0, MAX_HEADER_BYTES + 1, true);
    expect(() => new FrameReader().push(huge)).toThrow(/exceeds/);

    const four = [new Uint8Array(4)];
    expect(() => resolveBuffers({ $tensor: 1, dtype: 'float32', shape: [1] }, four)).toThrow(
      /names buffer 1/,
    );
    expect(() => resolveBuffers({ $tensor: 0, dtype: 'float64', shape: [1] }, four)).toThrow(/dtype/);
    expect(() => resolveBuffers({ $tensor: 0, dtype: 'float32', shape: [2] }, four)).toThrow(/needs 8 bytes/);
    expect(() => resolveBuffers([{ $bytes: 0 }, { $bytes: 0 }], four)).toThrow(/twice/);
    expect(() => resolveBuffers({}, four)).toThrow(/not referenced/);
  });
});
