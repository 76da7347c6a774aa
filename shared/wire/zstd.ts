import { Decompress } from 'fzstd';
import { invalidField as invalid, TinkerError } from '../base/errors.js';
import { type ZstdFrame, zstdFrames } from './zstd-frames.js';

/**
 * The largest window this decoder allocates for a multi-segment frame: the 8 MiB RFC 8878
 * recommends every decoder support (level 19 uses it). fzstd allocates the whole window up front,
 * so a frame header alone could otherwise cost up to 2 GiB.
 */
export const MAX_ZSTD_WINDOW_BYTES = 8 * 1024 * 1024;

/**
 * Frames one body may hold, and the window bytes all of its frames may allocate together. The SDK
 * sends one frame; without these a 9-byte empty frame declaring an 8 MiB window costs an 8 MiB
 * allocation, so 20,000 of them (180 KB) cost 160 GB of zeroed memory. Both are checked on the
 * headers, before anything is inflated.
 */
export const MAX_ZSTD_FRAMES = 16;
export const MAX_ZSTD_WINDOW_TOTAL_BYTES = 2 * MAX_ZSTD_WINDOW_BYTES;

/** What one decompression did, for tests and the intake bench to count. */
export interface ZstdCounts {
  framesInflated: number;
}

function tooLarge(maxBytes: number) {
  return invalid('body', `decompressed body exceeds the limit of ${maxBytes} bytes`, 413);
}

/** One frame inflated block by block, `budget` bytes at most; the chunks fzstd produced, in order. */
function inflateFrame(frame: ZstdFrame, budget: number, maxBytes: number): Uint8Array[] {
  const chunks: Uint8Array[] = [];
  let produced = 0;
  const decompressor = new Decompress((chunk) => {
    produced += chunk.length;
    // Stop in the middle of the frame: the rest is never inflated.
    if (produced > budget) throw tooLarge(maxBytes);
    if (chunk.length > 0) chunks.push(chunk);
  });
  try {
    decompressor.push(frame.bytes, true);
  } catch (error) {
    if (error instanceof TinkerError) throw error;
    const reason = error instanceof Error ? error.message : String(error);
    throw invalid('body', `not a valid zstd frame (${reason})`, 400, error);
  }
  if (frame.contentSize !== undefined && produced !== frame.contentSize) {
    throw invalid(
      'body',
      `not a valid zstd frame (it declares ${frame.contentSize} bytes and holds ${produced})`,
    );
  }
  return chunks;
}

/**
 * Inflates a `Content-Encoding: zstd` body, never past `maxBytes` of output: a body that would grow
 * beyond it is a 413 as soon as it does, so a zstd bomb costs at most `maxBytes` plus one 128 KiB
 * block (and the window). At most `MAX_ZSTD_FRAMES` frames, whose windows total at most
 * `MAX_ZSTD_WINDOW_TOTAL_BYTES`, are inflated; more is a 413 before any is. Malformed or truncated
 * frames are a 400. The xxhash checksum, when present, is not verified (fzstd skips it); the protobuf
 * decoder still checks what the bytes say.
 */
export function decompressZstdBounded(bytes: Uint8Array, maxBytes: number, counts?: ZstdCounts): Uint8Array {
  const frames = zstdFrames(bytes, MAX_ZSTD_FRAMES);
  let declared = 0;
  let windows = 0;
  for (const frame of frames) {
    declared += frame.contentSize ?? 0;
    if (declared > maxBytes) throw tooLarge(maxBytes);
    windows += frame.windowSize;
    if (windows > MAX_ZSTD_WINDOW_TOTAL_BYTES) {
      throw invalid(
        'body',
        `the zstd frames' windows need more than the ${MAX_ZSTD_WINDOW_TOTAL_BYTES} bytes this server allocates for one body`,
        413,
      );
    }
    // A single-segment frame's window is its content size, bounded just above.
    if (!frame.singleSegment && frame.windowSize > MAX_ZSTD_WINDOW_BYTES) {
      throw invalid(
        'body',
        `zstd window of ${frame.windowSize} bytes exceeds the ${MAX_ZSTD_WINDOW_BYTES} this server supports`,
        413,
      );
    }
  }
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (const frame of frames) {
    if (counts) counts.framesInflated += 1;
    for (const chunk of inflateFrame(frame, maxBytes - total, maxBytes)) {
      chunks.push(chunk);
      total += chunk.length;
    }
  }
  if (chunks.length === 1) return chunks[0] as Uint8Array;
  const out = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.length;
  }
  return out;
}
