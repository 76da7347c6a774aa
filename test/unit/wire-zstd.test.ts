import { describe, expect, it } from 'vitest';
import { decodeForwardBackwardRequest } from '../../shared/wire/forward-backward-request.js';
import { decompressZstdBounded, MAX_ZSTD_WINDOW_BYTES } from '../../shared/wire/zstd.js';
import { validationErrorOf } from '../support/validation.js';
import { fixtureBytes } from '../support/wire/fixtures.js';

const MAGIC = [0x28, 0xb5, 0x2f, 0xfd];

/** A zstd frame of raw / RLE blocks, built by hand to reach each header case. */
function frame(
  blocks: readonly { rle?: number; raw?: readonly number[]; size?: number }[],
  options: {
    contentSize?: number;
    singleSegment?: boolean;
    checksum?: boolean;
    window?: number;
    dictionary?: number;
  } = {},
): Uint8Array {
  const out: number[] = [...MAGIC];
  const sizeFlag = options.contentSize === undefined ? 0 : 3; // 8-byte content size
  const dictionaryFlag = options.dictionary === undefined ? 0 : 1;
  out.push(
    (sizeFlag << 6) |
      ((options.singleSegment ? 1 : 0) << 5) |
      ((options.checksum ? 1 : 0) << 2) |
      dictionaryFlag,
  );
  if (!options.singleSegment) out.push(options.window ?? 0x58); // 2 MiB
  if (options.dictionary !== undefined) out.push(options.dictionary);
  if (options.contentSize !== undefined) {
    let size = options.contentSize;
    for (let i = 0; i < 8; i++) {
      out.push(size % 256);
      size = Math.floor(size / 256);
    }
  }
  blocks.forEach((block, index) => {
    const last = index === blocks.length - 1 ? 1 : 0;
    const type = block.rle === undefined ? 0 : 1;
    const size = block.size ?? block.raw?.length ?? 0;
    const header = (size << 3) | (type << 1) | last;
    out.push(header & 0xff, (header >> 8) & 0xff, (header >> 16) & 0xff);
    if (block.rle !== undefined) out.push(block.rle);
    else out.push(...(block.raw ?? []));
  });
  if (options.checksum) out.push(1, 2, 3, 4); // not verified (fzstd skips it)
  return new Uint8Array(out);
}

function concat(...parts: Uint8Array[]): Uint8Array {
  return new Uint8Array(parts.flatMap((part) => [...part]));
}

const rejection = validationErrorOf;

const BLOCK = 128 * 1024;

describe('decompressZstdBounded', () => {
  it('inflates the body the SDK compressed (zstandard, as resources/training.py does) to the exact bytes', () => {
    const body = decompressZstdBounded(fixtureBytes('cross-entropy-4.zst'), 1 << 20);
    expect(Buffer.from(body).equals(Buffer.from(fixtureBytes('cross-entropy-4')))).toBe(true);
    expect(decodeForwardBackwardRequest(body).input.data).toHaveLength(4);
  });

  it('inflates raw and RLE blocks, several frames, skippable frames and checksums', () => {
    const skippable = new Uint8Array([0x50, 0x2a, 0x4d, 0x18, 2, 0, 0, 0, 9, 9]);
    const body = concat(
      frame([{ raw: [1, 2, 3] }, { rle: 7, size: 2 }], { checksum: true }),
      skippable,
      frame([{ raw: [4] }], { contentSize: 1, singleSegment: true }),
    );
    expect([...decompressZstdBounded(body, 100)]).toEqual([1, 2, 3, 7, 7, 4]);
  });

  it('allows exactly maxBytes and refuses one more with 413', () => {
    const body = frame([{ rle: 1, size: 1000 }]);
    expect(decompressZstdBounded(body, 1000)).toHaveLength(1000);
    const error = rejection(() => decompressZstdBounded(body, 999));
    expect(error.status).toBe(413);
    expect(error.message).toBe('body: decompressed body exceeds the limit of 999 bytes');
    expect(error.context.field).toBe('body');
  });

  it('refuses a declared content size over the limit before inflating anything', () => {
    // 2 GiB declared, single segment: fzstd would allocate all of it for the window.
    const body = frame([{ rle: 0, size: BLOCK }], { contentSize: 2 ** 31 - 1, singleSegment: true });
    expect(rejection(() => decompressZstdBounded(body, 1 << 20)).status).toBe(413);
  });

  it('refuses a window over 8 MiB with 413 (fzstd allocates it whole)', () => {
    const window = 0x78; // 2^(10+15) = 32 MiB
    const error = rejection(() => decompressZstdBounded(frame([{ raw: [1] }], { window }), 1 << 30));
    expect(error.status).toBe(413);
    expect(error.message).toMatch(/window/);
    expect(decompressZstdBounded(frame([{ raw: [1] }], { window: 0x68 }), 10)).toHaveLength(1); // 8 MiB
    expect(MAX_ZSTD_WINDOW_BYTES).toBe(8 * 1024 * 1024);
  });

  it('refuses a frame whose content differs from its declared size', () => {
    const body = frame([{ rle: 5, size: 20 }], { contentSize: 10 });
    expect(rejection(() => decompressZstdBounded(body, 1000)).message).toMatch(
      /declares 10 bytes and holds 20/,
    );
  });

  it.each([
    ['an empty body', new Uint8Array()],
    ['no magic number', new Uint8Array([1, 2, 3, 4, 5, 6])],
    ['a dictionary frame', frame([{ raw: [1] }], { dictionary: 7 })],
    ['a reserved block type', concat(frame([]).subarray(0, 6), new Uint8Array([0b111, 0, 0]))],
    ['a block over 128 KiB', frame([{ rle: 1, size: BLOCK + 1 }])],
    ['a missing checksum', frame([{ raw: [1, 2] }], { checksum: true }).subarray(0, 11)],
    ['a cut skippable frame', new Uint8Array([0x50, 0x2a, 0x4d, 0x18, 9, 0, 0, 0, 1])],
  ])('%s -> 400', (_name, body) => {
    const error = rejection(() => decompressZstdBounded(body, 1000));
    expect(error.status).toBe(400);
    expect(error.message).toMatch(/^body: not a valid zstd frame/);
  });

  it('refuses every truncation of a real body with 400 (fzstd alone may return short output)', () => {
    const whole = fixtureBytes('cross-entropy-4.zst');
    const multiBlock = frame([{ raw: [1, 2, 3] }, { rle: 4, size: 9 }, { raw: [5] }], { checksum: true });
    for (const body of [whole, multiBlock]) {
      for (let length = 0; length < body.length; length++) {
        expect(rejection(() => decompressZstdBounded(body.subarray(0, length), 1 << 20)).status).toBe(400);
      }
    }
  });

  it('refuses 100 MB zstd bombs with 413, quickly and in little memory', () => {
    for (const name of ['bomb-declared.zst', 'bomb-streamed.zst']) {
      const bomb = fixtureBytes(name);
      expect(bomb.length).toBeLessThan(4096);
      const peakBefore = process.resourceUsage().maxRSS;
      const external = process.memoryUsage().arrayBuffers;
      const start = performance.now();
      const error = rejection(() => decompressZstdBounded(bomb, 4 * 1024 * 1024));
      const took = performance.now() - start;
      const grewKiB = process.resourceUsage().maxRSS - peakBefore;
      const retained = (process.memoryUsage().arrayBuffers - external) / 2 ** 20;
      console.log(
        `${name}: 413 in ${took.toFixed(1)} ms, peak RSS +${(grewKiB / 1024).toFixed(1)} MiB, buffers +${retained.toFixed(1)} MiB`,
      );
      expect(error.status).toBe(413);
      // Inflating 100 MB would take far longer and raise the peak by ~100 MiB.
      expect(grewKiB).toBeLessThan(32 * 1024);
      expect(retained).toBeLessThan(32);
      expect(took).toBeLessThan(1000);
    }
  });
});
