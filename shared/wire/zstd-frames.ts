import { invalidField as invalid } from '../base/errors.js';

/**
 * A walk over the frame and block headers of a zstd body (RFC 8878), before anything is inflated:
 * it finds truncation (fzstd can return short output for a cut stream instead of failing), frames
 * that need dictionaries, and what each frame will cost in memory. Only headers are read; block
 * contents are fzstd's.
 */

const ZSTD_MAGIC = 0xfd2fb528;
const BLOCK_MAX = 128 * 1024;

/** One zstd frame's bytes and what its header declares. */
export interface ZstdFrame {
  readonly bytes: Uint8Array;
  /** Frame_Content_Size, when the header carries it. */
  readonly contentSize: number | undefined;
  /** Bytes fzstd allocates for the window up front (the content size for a single-segment frame). */
  readonly windowSize: number;
  readonly singleSegment: boolean;
}

function notZstd(problem: string, cause?: unknown) {
  return invalid('body', `not a valid zstd frame (${problem})`, 400, cause);
}

function readLittleEndian(bytes: Uint8Array, at: number, length: number): number {
  let value = 0;
  for (let i = length - 1; i >= 0; i--) value = value * 256 + (bytes[at + i] as number);
  return value;
}

function need(bytes: Uint8Array, end: number, what: string): void {
  if (end > bytes.length) throw notZstd(`truncated in the ${what} at byte ${bytes.length}`);
}

function readFrame(bytes: Uint8Array, start: number): { frame: ZstdFrame; end: number } {
  need(bytes, start + 5, 'frame header');
  const descriptor = bytes[start + 4] as number;
  const sizeFlag = descriptor >> 6;
  const singleSegment = (descriptor >> 5) & 1;
  const hasChecksum = (descriptor >> 2) & 1;
  const dictionaryFlag = descriptor & 3;
  if (descriptor & 8) throw notZstd('reserved bit set in the frame header');
  let at = start + 5;
  let windowSize = 0;
  if (!singleSegment) {
    need(bytes, at + 1, 'frame header');
    const window = bytes[at] as number;
    const base = 2 ** (10 + (window >> 3));
    windowSize = base + (base / 8) * (window & 7);
    at += 1;
  }
  const dictionaryBytes = [0, 1, 2, 4][dictionaryFlag] as number;
  need(bytes, at + dictionaryBytes, 'frame header');
  if (readLittleEndian(bytes, at, dictionaryBytes) !== 0)
    throw notZstd('zstd dictionaries are not supported');
  at += dictionaryBytes;
  const sizeBytes = sizeFlag === 0 ? singleSegment : 2 ** sizeFlag;
  need(bytes, at + sizeBytes, 'frame header');
  let contentSize: number | undefined;
  if (sizeBytes > 0) contentSize = readLittleEndian(bytes, at, sizeBytes) + (sizeBytes === 2 ? 256 : 0);
  at += sizeBytes;
  if (singleSegment) windowSize = contentSize ?? 0;
  for (let last = 0; !last; ) {
    need(bytes, at + 3, 'block header');
    const header = readLittleEndian(bytes, at, 3);
    last = header & 1;
    const type = (header >> 1) & 3;
    const size = header >>> 3;
    if (type === 3) throw notZstd(`reserved block type at byte ${at}`);
    if (size > BLOCK_MAX) throw notZstd(`block of ${size} bytes at byte ${at}, over the 128 KiB maximum`);
    at += 3 + (type === 1 ? 1 : size);
    need(bytes, at, 'block');
  }
  if (hasChecksum) {
    at += 4;
    need(bytes, at, 'checksum');
  }
  return {
    frame: { bytes: bytes.subarray(start, at), contentSize, windowSize, singleSegment: singleSegment === 1 },
    end: at,
  };
}

/**
 * The zstd frames of a body, skippable frames dropped; any malformed or cut header is a 400. The walk
 * stops at the first frame past `maxFrames`, a 413: its cost never grows with the frames a body holds.
 */
export function zstdFrames(bytes: Uint8Array, maxFrames = Number.POSITIVE_INFINITY): ZstdFrame[] {
  const frames: ZstdFrame[] = [];
  let at = 0;
  while (at < bytes.length) {
    need(bytes, at + 4, 'magic number');
    const magic = readLittleEndian(bytes, at, 4);
    if (magic === ZSTD_MAGIC) {
      if (frames.length === maxFrames) {
        throw invalid(
          'body',
          `the zstd body holds more than the ${maxFrames} frames this server inflates`,
          413,
        );
      }
      const { frame, end } = readFrame(bytes, at);
      frames.push(frame);
      at = end;
    } else if (magic >>> 4 === 0x184d2a5) {
      need(bytes, at + 8, 'skippable frame header');
      at += 8 + readLittleEndian(bytes, at + 4, 4);
      need(bytes, at, 'skippable frame');
    } else {
      throw notZstd(`no zstd magic number at byte ${at}`);
    }
  }
  if (frames.length === 0) throw notZstd('the body holds no zstd frame');
  return frames;
}
