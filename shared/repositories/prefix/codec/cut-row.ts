import { rowItemKey } from '../keys.js';
import type { CutRow } from '../types.js';
import { genesisChain, nextChain } from './digest.js';
import { encodeRowItemWithDigest } from './row-item.js';
import { assertTokenIds } from './token-packing.js';

/** DynamoDB's item limit is 400 KB (409,600 bytes) including names and keys: leave headroom. */
export const DEFAULT_MAX_ITEM_BYTES = 380_000;

export interface EncodedItem {
  readonly key: string;
  readonly chunk: number;
  readonly bytes: Uint8Array;
  /** sha256 (hex) of `bytes`; the commit record lists it. */
  readonly digest: string;
  readonly tokens: number;
}

/** One call's cut, encoded: one or more items, and the chain hash after it. */
export interface EncodedCutRow {
  readonly callId: string;
  readonly attempt: string;
  readonly contentId: string;
  readonly cut: number;
  readonly prevLength: number;
  readonly length: number;
  readonly weightVersion: number;
  readonly prevChain: string;
  readonly chain: string;
  readonly items: readonly EncodedItem[];
}

/** The checks that need no pass over the tokens: lengths, versions, the previous prefix. */
export function checkCutRow(row: CutRow): void {
  if (row.tokens.length !== row.logprobs.length) {
    throw new RangeError(
      `tokens (${row.tokens.length}) and logprobs (${row.logprobs.length}) differ in length`,
    );
  }
  if (!Number.isSafeInteger(row.weightVersion) || row.weightVersion < 0) {
    throw new RangeError(`weight version must be a non-negative integer, got ${row.weightVersion}`);
  }
  const previous = row.previous;
  if (previous === undefined) return;
  if (previous.callId !== row.callId || previous.contentId !== row.contentId) {
    throw new RangeError('previous prefix belongs to another call or checkpoint');
  }
  if (row.weightVersion < previous.weightVersion) {
    throw new RangeError('weight version went backwards since the previous cut');
  }
}

/**
 * Encodes a cut into items no larger than `maxItemBytes`. Chunks split the token range evenly (none empty); when a
 * chunk still comes out too large (token ids that pack worse than the estimate), there is one more chunk.
 */
export function encodeCutRow(
  row: CutRow,
  attempt: string,
  options: { readonly maxItemBytes?: number } = {},
): EncodedCutRow {
  checkCutRow(row);
  // Checked before the conversion below, which would wrap a negative or fractional id silently.
  assertTokenIds(row.tokens);
  const maxItemBytes = options.maxItemBytes ?? DEFAULT_MAX_ITEM_BYTES;
  // Typed arrays are used as they are: the row is read synchronously, here, and never kept.
  const tokens = row.tokens instanceof Uint32Array ? row.tokens : new Uint32Array(row.tokens);
  const logprobs = row.logprobs instanceof Float32Array ? row.logprobs : new Float32Array(row.logprobs);
  const previous = row.previous;
  const cut = previous?.segments.length ?? 0;
  const prevLength = previous?.length ?? 0;
  const prevChain = previous?.chain ?? genesisChain(row.callId, row.contentId);

  const encodeWith = (chunkCount: number): EncodedItem[] => {
    return Array.from({ length: chunkCount }, (_, chunk) => {
      const start = Math.floor((chunk * tokens.length) / chunkCount);
      const end = Math.floor(((chunk + 1) * tokens.length) / chunkCount);
      const { bytes, digest } = encodeRowItemWithDigest({
        callId: row.callId,
        attempt,
        contentId: row.contentId,
        cut,
        chunkIndex: chunk,
        chunkCount,
        prevLength,
        deltaLength: tokens.length,
        cumulativeLength: prevLength + tokens.length,
        chunkStart: start,
        weightVersion: row.weightVersion,
        tokens: tokens.subarray(start, end),
        logprobs: logprobs.subarray(start, end),
      });
      return {
        key: rowItemKey(row.callId, attempt, cut, chunk),
        chunk,
        bytes,
        digest,
        tokens: end - start,
      };
    });
  };

  // First guess from a generous per-token size (varint ids <= 5 bytes, float32 logprobs).
  let chunkCount = Math.max(1, Math.ceil((tokens.length * 6) / maxItemBytes));
  for (;;) {
    const items = encodeWith(chunkCount);
    const largest = Math.max(...items.map((item) => item.bytes.length));
    if (largest <= maxItemBytes) {
      return {
        callId: row.callId,
        attempt,
        contentId: row.contentId,
        cut,
        prevLength,
        length: prevLength + tokens.length,
        weightVersion: row.weightVersion,
        prevChain,
        chain: nextChain(
          prevChain,
          cut,
          items.map((item) => item.digest),
        ),
        items,
      };
    }
    if (chunkCount >= Math.max(1, tokens.length)) {
      throw new RangeError(`a prefix item cannot fit in ${maxItemBytes} bytes`);
    }
    chunkCount = Math.min(
      Math.max(1, tokens.length),
      Math.max(chunkCount + 1, Math.ceil((chunkCount * largest) / maxItemBytes)),
    );
  }
}
