import { describe, expect, it } from 'vitest';
import { encodeCutRow } from '../../shared/repositories/prefix/codec/cut-row.js';
import { encodeRowItem } from '../../shared/repositories/prefix/codec/row-item.js';
import { groupKey } from '../../shared/repositories/prefix/keys.js';
import { committedCallOf, pointerAfter } from '../../shared/repositories/prefix/pointer.js';
import type { StoredItem } from '../../shared/repositories/prefix/read-batcher.js';
import type { CommitRecord } from '../../shared/repositories/prefix/records.js';
import type { CutRow, PrefixPointer } from '../../shared/repositories/prefix/types.js';
import { type ReadResult, verifyPrefix } from '../../shared/repositories/prefix/verify.js';

const NOW = 1_000_000;
const TTL = NOW + 3600;

/** Writes a committed cut into an in-memory table, the way saveCut lays it out. */
function commitCut(
  table: Map<string, ReadResult>,
  row: CutRow,
  attempt: string,
  maxItemBytes?: number,
): PrefixPointer {
  const encoded = encodeCutRow(row, attempt, maxItemBytes === undefined ? {} : { maxItemBytes });
  const group = groupKey(
    attempt,
    encoded.items.map((item) => item.key),
  );
  for (const item of encoded.items)
    table.set(item.key, { pk: item.key, kind: 'row', group, ttl: TTL, data: item.bytes });
  const record: CommitRecord = {
    pk: group,
    kind: 'group',
    status: 'committed',
    writer: 'w',
    attempt,
    ttl: TTL,
    at: NOW,
    calls: [committedCallOf(encoded)],
  };
  table.set(group, { ...record });
  return pointerAfter(encoded, row.previous, group);
}

function twoCuts(): {
  table: Map<string, ReadResult>;
  pointer: PrefixPointer;
  tokens: number[];
  logprobs: number[];
} {
  const table = new Map<string, ReadResult>();
  const tokens = Array.from({ length: 700 }, (_, i) => (i * 31) % 50_000);
  const logprobs = tokens.map((t) => -t / 7);
  const base = { callId: 'call-1', contentId: 'c-ck', weightVersion: 3 };
  const first = commitCut(
    table,
    { ...base, tokens: tokens.slice(0, 300), logprobs: logprobs.slice(0, 300) },
    'a1',
    700,
  );
  const pointer = commitCut(
    table,
    { ...base, weightVersion: 4, previous: first, tokens: tokens.slice(300), logprobs: logprobs.slice(300) },
    'a2',
    900,
  );
  return { table, pointer, tokens, logprobs };
}

function item(table: Map<string, ReadResult>, key: string): Record<string, unknown> {
  return { ...(table.get(key) as StoredItem) };
}

describe('verifyPrefix (P4a)', () => {
  it('accepts a committed lineage of several cuts and chunks and reassembles it exactly', () => {
    const { table, pointer, tokens, logprobs } = twoCuts();
    expect(pointer.segments.map((s) => s.chunks).every((n) => n > 1)).toBe(true);
    const outcome = verifyPrefix(pointer, 'c-ck', table, NOW);
    expect(outcome.kind).toBe('restored');
    if (outcome.kind !== 'restored') return;
    expect(Array.from(outcome.tokens)).toEqual(tokens);
    expect(Array.from(outcome.logprobs)).toEqual(logprobs.map(Math.fround));
    expect(outcome.weightVersion).toBe(4);
  });

  const cases: [
    string,
    (table: Map<string, ReadResult>, pointer: PrefixPointer) => PrefixPointer | undefined,
    string,
  ][] = [
    ['a missing commit record', (t, p) => void t.delete(p.segments[1]?.group ?? ''), 'not-committed'],
    [
      'an aborted group',
      (t, p) => {
        const key = p.segments[0]?.group ?? '';
        t.set(key, {
          pk: key,
          kind: 'group',
          status: 'aborted',
          writer: 'w',
          attempt: 'a1',
          ttl: TTL,
          at: NOW,
        });
        return undefined;
      },
      'not-committed',
    ],
    [
      'a missing row',
      (t, p) => void t.delete(`row#call-1#a2#1#${(p.segments[1]?.chunks ?? 1) - 1}`),
      'missing',
    ],
    ['a row whose read failed', (t) => void t.set('row#call-1#a1#0#0', new Error('boom')), 'read-failed'],
    [
      'an expired row not yet deleted',
      (t) => void t.set('row#call-1#a1#0#1', { ...item(t, 'row#call-1#a1#0#1'), ttl: NOW }),
      'expired',
    ],
    [
      'an expired commit record',
      (t, p) =>
        void t.set(p.segments[1]?.group ?? '', { ...item(t, p.segments[1]?.group ?? ''), ttl: NOW - 1 }),
      'expired',
    ],
    [
      'a corrupted row byte',
      (t) => {
        const row = item(t, 'row#call-1#a2#1#0');
        const data = (row.data as Uint8Array).slice();
        data[10] = (data[10] as number) ^ 1;
        t.set('row#call-1#a2#1#0', { ...row, data });
        return undefined;
      },
      'corrupt',
    ],
    [
      'a well-formed row other than the committed one',
      (t) => {
        const row = item(t, 'row#call-1#a1#0#0');
        const data = encodeRowItem({
          callId: 'call-1',
          attempt: 'a1',
          contentId: 'c-ck',
          cut: 0,
          chunkIndex: 0,
          chunkCount: 2,
          prevLength: 0,
          deltaLength: 300,
          cumulativeLength: 300,
          chunkStart: 0,
          weightVersion: 3,
          tokens: new Uint32Array(150),
          logprobs: new Float32Array(150),
        });
        t.set('row#call-1#a1#0#0', { ...row, data });
        return undefined;
      },
      'corrupt',
    ],
    [
      'a pointer whose chain was not committed',
      (_, p) => ({ ...p, chain: p.segments[0]?.group ?? 'x' }),
      'mismatch',
    ],
    ['a pointer that drops the first cut', (_, p) => ({ ...p, segments: p.segments.slice(1) }), 'mismatch'],
    [
      'a pointer naming another attempt',
      (_, p) => ({ ...p, segments: p.segments.map((s) => ({ ...s, attempt: 'a9' })) }),
      'mismatch',
    ],
    [
      'a pointer with a wrong chunk count',
      (_, p) => ({ ...p, segments: p.segments.map((s) => ({ ...s, chunks: 1 })) }),
      'mismatch',
    ],
    [
      'a commit record that lists other token counts',
      (t, p) => {
        const key = p.segments[0]?.group ?? '';
        const record = item(t, key) as unknown as CommitRecord;
        const calls = record.calls.map((c) => ({
          ...c,
          rows: c.rows.map((r) => ({ ...r, tokens: r.tokens + 1 })),
        }));
        t.set(key, { ...record, calls });
        return undefined;
      },
      'mismatch',
    ],
  ];

  it.each(cases)('regenerates on %s', (_, tamper, reason) => {
    const { table, pointer } = twoCuts();
    const tampered = tamper(table, pointer) ?? pointer;
    const outcome = verifyPrefix(tampered, 'c-ck', table, NOW);
    expect(outcome).toMatchObject({ kind: 'regenerate', callId: 'call-1', reason });
  });

  it("regenerates when the sample's checkpoint differs", () => {
    const { table, pointer } = twoCuts();
    expect(verifyPrefix(pointer, 'c-other', table, NOW)).toMatchObject({
      kind: 'regenerate',
      reason: 'content-mismatch',
    });
  });
});
