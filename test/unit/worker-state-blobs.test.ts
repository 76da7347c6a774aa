import { describe, expect, it } from 'vitest';
import { bytesSource } from '../../shared/aws/s3-streams.js';
import { planSource } from '../../shared/services/worker/state-blobs.js';

/**
 * An archive plan read in parts (shared/services/worker/state-blobs.ts): whatever the part boundaries,
 * the parts join into the plan's segments with each range read from the blob.
 */
describe('planSource', () => {
  const blob = Uint8Array.from({ length: 1000 }, (_, i) => i % 251);
  const plan = {
    size: 3 + 400 + 2 + 10,
    segments: [
      Uint8Array.of(1, 2, 3),
      { offset: 100, length: 400 },
      Uint8Array.of(9, 9),
      { offset: 990, length: 10 },
    ],
  };
  const whole = new Uint8Array(
    Buffer.concat([Uint8Array.of(1, 2, 3), blob.subarray(100, 500), Uint8Array.of(9, 9), blob.subarray(990)]),
  );

  it('answers the plan’s bytes for parts of any size, reading only the ranges it covers', async () => {
    for (const part of [1, 7, 64, 415]) {
      let read = 0;
      const source = planSource(plan, {
        size: blob.length,
        read: (offset, length) => {
          read += length;
          return bytesSource(blob).read(offset, length);
        },
      });
      expect(source.size).toBe(whole.length);
      const parts: Uint8Array[] = [];
      for (let offset = 0; offset < source.size; offset += part) {
        parts.push(await source.read(offset, Math.min(part, source.size - offset)));
      }
      expect(new Uint8Array(Buffer.concat(parts))).toEqual(whole);
      expect(read).toBe(410);
    }
  });

  it('refuses a plan whose segments do not add up to its size', () => {
    expect(() => planSource({ ...plan, size: 1 }, bytesSource(blob))).toThrow(/plan of 1 bytes/);
  });
});
