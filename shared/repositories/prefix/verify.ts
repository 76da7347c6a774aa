import { InfrastructureError } from '../../base/errors.js';
import { genesisChain, nextChain, sha256Hex } from './codec/digest.js';
import { decodeRowItem, type RowItem } from './codec/row-item.js';
import { PrefixCorruptError } from './errors.js';
import { GroupRecordCache } from './group-cache.js';
import { segmentRowKeys } from './pointer.js';
import type { ReadResult, StoredItem } from './read-batcher.js';
import { parseRowItem } from './records.js';
import type { PrefixPointer, RegenerateReason, RestoreOutcome } from './types.js';

export type { ReadResult } from './read-batcher.js';

/**
 * What a reader accepts (P4a), as a pure function of the pointer and the items read. The prefix is
 * used only if every segment's commit record says committed and lists exactly the rows the pointer
 * names, with the digests and token counts of the bytes read; the rows chain from the call's genesis
 * to the pointer's chain hash without a gap; nothing has expired; and the checkpoint is the sample's.
 * Anything else is a `regenerate` outcome, never an exception.
 */

class Reject extends InfrastructureError {
  constructor(
    readonly reason: RegenerateReason,
    message: string,
  ) {
    super(message, { context: { reason } });
  }
}

function fetched(items: ReadonlyMap<string, ReadResult>, key: string, what: string): StoredItem {
  const item = items.get(key);
  if (item instanceof Error) throw new Reject('read-failed', `${what} ${key}: ${item.message}`);
  if (item === undefined || item === null) {
    throw new Reject(what === 'commit record' ? 'not-committed' : 'missing', `${what} ${key} is absent`);
  }
  return item;
}

function checkTtl(ttl: number, nowSeconds: number, key: string): void {
  // DynamoDB deletes expired items lazily (DynamoDB Local maybe never): expiry is checked here.
  if (!(ttl > nowSeconds)) throw new Reject('expired', `${key} expired at ${ttl}`);
}

function same(condition: boolean, message: string): void {
  if (!condition) throw new Reject('mismatch', message);
}

/**
 * `groups` parses each group record once for all the restores that share it (pass one cache per
 * read batch); by default the records are parsed for this call alone.
 */
export function verifyPrefix(
  pointer: PrefixPointer,
  contentId: string,
  items: ReadonlyMap<string, ReadResult>,
  nowSeconds: number,
  groups: GroupRecordCache = new GroupRecordCache(),
): RestoreOutcome {
  try {
    if (pointer.contentId !== contentId) {
      throw new Reject('content-mismatch', 'the prefix was generated with another checkpoint');
    }
    same(pointer.segments.length > 0, 'the pointer names no segment');
    let chain = genesisChain(pointer.callId, contentId);
    let length = 0;
    let weightVersion = 0;
    const decoded: RowItem[] = [];

    pointer.segments.forEach((segment, index) => {
      const parsed = groups.get(fetched(items, segment.group, 'commit record'));
      if (parsed === undefined) throw new Reject('corrupt', `commit record ${segment.group} is malformed`);
      const record = parsed.record;
      if (record.status !== 'committed')
        throw new Reject('not-committed', `group ${segment.group} was aborted`);
      checkTtl(record.ttl, nowSeconds, segment.group);
      const entry = parsed.entry(pointer.callId, segment.cut);
      if (entry === undefined)
        throw new Reject('not-committed', `group ${segment.group} does not vouch for the call`);
      same(segment.cut === index, `segment ${index} is cut ${segment.cut}`);
      same(record.attempt === segment.attempt, 'commit record is of another attempt');
      same(entry.content === contentId, 'commit record names another checkpoint');
      same(
        entry.prev_length === length && entry.prev_chain === chain,
        `cut ${segment.cut} does not continue the prefix`,
      );
      same(entry.weight_version >= weightVersion, `weight version went backwards at cut ${segment.cut}`);
      const keys = segmentRowKeys(pointer.callId, segment);
      same(
        entry.rows.length === keys.length && entry.rows.every((row, chunk) => row.key === keys[chunk]),
        `commit record lists other rows for cut ${segment.cut}`,
      );

      let offset = 0;
      entry.rows.forEach((listed, chunk) => {
        const row = parseRowItem(fetched(items, listed.key, 'row'));
        if (row === undefined) throw new Reject('corrupt', `row ${listed.key} is malformed`);
        checkTtl(row.ttl, nowSeconds, listed.key);
        if (sha256Hex(row.data) !== listed.digest)
          throw new Reject('corrupt', `row ${listed.key} digest mismatch`);
        // The whole item matched the digest its commit record lists: its embedded digest needs no rehash.
        const item = decodeRowItem(row.data, { digestChecked: true });
        same(
          item.callId === pointer.callId &&
            item.attempt === segment.attempt &&
            item.contentId === contentId &&
            item.cut === segment.cut &&
            item.chunkIndex === chunk &&
            item.chunkCount === segment.chunks &&
            item.prevLength === entry.prev_length &&
            item.cumulativeLength === entry.length &&
            item.weightVersion === entry.weight_version &&
            item.chunkStart === offset &&
            item.tokens.length === listed.tokens,
          `row ${listed.key} does not match its commit record`,
        );
        offset += item.tokens.length;
        decoded.push(item);
      });
      same(entry.prev_length + offset === entry.length, `cut ${segment.cut} token count differs`);
      const recomputed = nextChain(
        chain,
        segment.cut,
        entry.rows.map((row) => row.digest),
      );
      same(recomputed === entry.chain, `cut ${segment.cut} chain hash differs`);
      chain = entry.chain;
      length = entry.length;
      weightVersion = entry.weight_version;
    });

    same(
      chain === pointer.chain && length === pointer.length,
      'the prefix does not end where the pointer says',
    );
    same(weightVersion === pointer.weightVersion, 'the prefix weight version differs from the pointer');
    const only = decoded.length === 1 ? decoded[0] : undefined;
    if (only !== undefined) {
      // One item holds the whole prefix (the common case): its freshly decoded arrays are the answer.
      const { tokens, logprobs } = only;
      return { kind: 'restored', callId: pointer.callId, pointer, tokens, logprobs, weightVersion };
    }
    const tokens = new Uint32Array(length);
    const logprobs = new Float32Array(length);
    let at = 0;
    for (const item of decoded) {
      tokens.set(item.tokens, at);
      logprobs.set(item.logprobs, at);
      at += item.tokens.length;
    }
    return { kind: 'restored', callId: pointer.callId, pointer, tokens, logprobs, weightVersion };
  } catch (error) {
    if (error instanceof Reject) {
      return { kind: 'regenerate', callId: pointer.callId, reason: error.reason, detail: error.message };
    }
    if (error instanceof PrefixCorruptError) {
      return { kind: 'regenerate', callId: pointer.callId, reason: 'corrupt', detail: error.message };
    }
    // A malformed pointer or item shape: still the caller's cue to regenerate, never a client error.
    return { kind: 'regenerate', callId: pointer.callId, reason: 'mismatch', detail: String(error) };
  }
}
