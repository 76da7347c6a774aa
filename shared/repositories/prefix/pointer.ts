import type { EncodedCutRow } from './codec/cut-row.js';
import { rowItemKey } from './keys.js';
import type { CommittedCall } from './records.js';
import type { PrefixPointer, PrefixSegment } from './types.js';

/** A call's prefix after one more committed cut. */
export function pointerAfter(
  row: EncodedCutRow,
  previous: PrefixPointer | undefined,
  group: string,
): PrefixPointer {
  const segment: PrefixSegment = { group, attempt: row.attempt, cut: row.cut, chunks: row.items.length };
  return {
    callId: row.callId,
    contentId: row.contentId,
    length: row.length,
    chain: row.chain,
    weightVersion: row.weightVersion,
    segments: [...(previous?.segments ?? []), segment],
  };
}

/** What a commit record says about one call's cut (P4a: exact keys, digests, counts, chain). */
export function committedCallOf(row: EncodedCutRow): CommittedCall {
  return {
    call: row.callId,
    cut: row.cut,
    content: row.contentId,
    weight_version: row.weightVersion,
    prev_length: row.prevLength,
    length: row.length,
    prev_chain: row.prevChain,
    chain: row.chain,
    rows: row.items.map((item) => ({ key: item.key, digest: item.digest, tokens: item.tokens })),
  };
}

/** Row item keys of one segment, in chunk order. */
export function segmentRowKeys(callId: string, segment: PrefixSegment): string[] {
  return Array.from({ length: segment.chunks }, (_, chunk) =>
    rowItemKey(callId, segment.attempt, segment.cut, chunk),
  );
}

/** Every key a restore reads: each segment's commit record and rows, all known from the pointer. */
export function pointerKeys(pointer: PrefixPointer): string[] {
  return pointer.segments.flatMap((segment) => [segment.group, ...segmentRowKeys(pointer.callId, segment)]);
}
