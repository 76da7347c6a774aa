import { describe, expect, it } from 'vitest';
import { encodeCutRow } from '../../shared/repositories/prefix/codec/cut-row.js';
import { GroupRecordCache } from '../../shared/repositories/prefix/group-cache.js';
import { groupKey } from '../../shared/repositories/prefix/keys.js';
import { committedCallOf, pointerAfter } from '../../shared/repositories/prefix/pointer.js';
import type { StoredItem } from '../../shared/repositories/prefix/read-batcher.js';
import {
  type CommitRecord,
  type GroupRecord,
  parseGroupRecord,
} from '../../shared/repositories/prefix/records.js';
import type { PrefixPointer } from '../../shared/repositories/prefix/types.js';
import { type ReadResult, verifyPrefix } from '../../shared/repositories/prefix/verify.js';

const NOW = 1_000_000;
const TTL = NOW + 3600;

/** One group of `calls` committed cuts in an in-memory table, laid out as saveCut writes them. */
function committedGroup(calls: number): { table: Map<string, ReadResult>; pointers: PrefixPointer[] } {
  const table = new Map<string, ReadResult>();
  const rows = Array.from({ length: calls }, (_, i) =>
    encodeCutRow(
      {
        callId: `call-${i}`,
        contentId: 'c-ck',
        weightVersion: 1,
        tokens: [i, i + 1, i + 2],
        logprobs: [-1, -2, -3],
      },
      'a1',
    ),
  );
  const group = groupKey(
    'a1',
    rows.map((row) => row.items[0]?.key ?? ''),
  );
  const record: CommitRecord = {
    pk: group,
    kind: 'group',
    status: 'committed',
    writer: 'w',
    attempt: 'a1',
    ttl: TTL,
    at: NOW,
    calls: rows.map(committedCallOf),
  };
  table.set(group, { ...record });
  for (const row of rows) {
    for (const item of row.items) {
      table.set(item.key, { pk: item.key, kind: 'row', group, ttl: TTL, data: item.bytes });
    }
  }
  return { table, pointers: rows.map((row) => pointerAfter(row, undefined, group)) };
}

function countingParser(): { parse: (item: unknown) => GroupRecord | undefined; count: () => number } {
  let parses = 0;
  return {
    parse: (item) => {
      parses += 1;
      return parseGroupRecord(item);
    },
    count: () => parses,
  };
}

describe('group records parsed once per read', () => {
  it('parses a record shared by every restore of a batch once, and each restore still verifies', () => {
    const { table, pointers } = committedGroup(300);
    const parser = countingParser();
    const cache = new GroupRecordCache(parser.parse);
    const outcomes = pointers.map((pointer) => verifyPrefix(pointer, 'c-ck', table, NOW, cache));
    expect(outcomes.map((outcome) => outcome.kind)).toEqual(pointers.map(() => 'restored'));
    outcomes.forEach((outcome, i) => {
      expect(outcome.kind === 'restored' && Array.from(outcome.tokens)).toEqual([i, i + 1, i + 2]);
    });
    expect(parser.count()).toBe(1);
  });

  it('parses the same record again when a later read returns it (a new item object)', () => {
    const { table, pointers } = committedGroup(2);
    const group = pointers[0]?.segments[0]?.group ?? '';
    const parser = countingParser();
    const cache = new GroupRecordCache(parser.parse);
    const firstRead = table.get(group) as StoredItem;
    expect(cache.get(firstRead)).toBe(cache.get(firstRead));
    const laterRead: StoredItem = { ...firstRead, status: 'aborted' };
    expect(cache.get(laterRead)?.record.status).toBe('aborted');
    expect(parser.count()).toBe(2);
  });

  it('finds a call by call id and cut, and nothing in an aborted or malformed record', () => {
    const { table, pointers } = committedGroup(3);
    const group = pointers[0]?.segments[0]?.group ?? '';
    const cache = new GroupRecordCache();
    const parsed = cache.get(table.get(group) as StoredItem);
    expect(parsed?.entry('call-2', 0)?.call).toBe('call-2');
    expect(parsed?.entry('call-2', 1)).toBeUndefined();
    expect(parsed?.entry('call-9', 0)).toBeUndefined();
    const aborted = {
      pk: group,
      kind: 'group',
      status: 'aborted',
      writer: 'w',
      attempt: 'a1',
      ttl: TTL,
      at: NOW,
    };
    expect(cache.get(aborted)?.entry('call-2', 0)).toBeUndefined();
    expect(cache.get({ pk: group, kind: 'group' })).toBeUndefined();
  });
});
