import { Decompress } from 'fzstd';
import { invalidField as invalid, TinkerError } from '../errors.js';
import { type ZstdFrame, zstdFrames } from './zstd-frames.js';

/**
 * The largest window this decoder allocates for a multi-segment frame: the 8 MiB RFC 8878
 * recommends every decoder support (level 19 uses it). fzstd allocates the whole window up front,
 * so a frame header alone could otherwise cost up to 2 GiB.
 */
export const MAX_ZSTD_WINDOW_BYTES = 8 * 1024 * 1024;

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
 * block (and the window). Malformed or truncated frames are a 400. The xxhash checksum, when present,
 * is not verified (fzstd skips it); the protobuf decoder still checks what the bytes say.
 */
export function decompressZstdBounded(bytes: Uint8Array, maxBytes: number): Uint8Array {
  const frames = zstdFrames(bytes);
  let declared = 0;
  for (const frame of frames) {
    declared += frame.contentSize ?? 0;
    if (declared > maxBytes) throw tooLarge(maxBytes);
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
