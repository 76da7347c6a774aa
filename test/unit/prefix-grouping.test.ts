import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BATCH_WRITE_MAX_REQUESTS, batchesOf, groupRows } from '../../shared/repositories/prefix/grouping.js';
import { groupKey, rowItemKey } from '../../shared/repositories/prefix/keys.js';

interface Row {
  readonly id: number;
  readonly tokens: number;
}

const rowsArb = fc
  .array(fc.integer({ min: 0, max: 5_000 }), { maxLength: 400 })
  .map((tokens) => tokens.map((t, id): Row => ({ id, tokens: t })));
const limitsArb = fc.record({
  maxRows: fc.integer({ min: 1, max: 300 }),
  maxTokens: fc.integer({ min: 1, max: 20_000 }),
});

describe('groupRows (P1)', () => {
  it('keeps every row once, in order, within both limits unless a row is oversized and alone', () => {
    fc.assert(
      fc.property(rowsArb, limitsArb, (rows, limits) => {
        const groups = groupRows(rows, (row) => row.tokens, limits);
        expect(groups.flat()).toEqual(rows);
        for (const group of groups) {
          expect(group.length).toBeGreaterThan(0);
          const tokens = group.reduce((sum, row) => sum + row.tokens, 0);
          if (group.some((row) => row.tokens > limits.maxTokens)) {
            expect(group).toHaveLength(1);
          } else {
            expect(group.length).toBeLessThanOrEqual(limits.maxRows);
            expect(tokens).toBeLessThanOrEqual(limits.maxTokens);
          }
        }
      }),
    );
  });

  it('closes a group only when the next row would break a limit (greedy, no needless groups)', () => {
    fc.assert(
      fc.property(rowsArb, limitsArb, (rows, limits) => {
        const groups = groupRows(rows, (row) => row.tokens, limits);
        groups.forEach((group, index) => {
          const next = groups[index + 1]?.[0];
          if (next === undefined || group.some((row) => row.tokens > limits.maxTokens)) return;
          const tokens = group.reduce((sum, row) => sum + row.tokens, 0);
          const fits = group.length < limits.maxRows && tokens + next.tokens <= limits.maxTokens;
          expect(fits).toBe(false);
        });
      }),
    );
  });

  it('uses the contract defaults: 256 rows, 4,194,304 tokens', () => {
    const rows = Array.from({ length: 600 }, (_, id): Row => ({ id, tokens: 10 }));
    expect(
      groupRows(rows, (r) => r.tokens, { maxRows: 256, maxTokens: 4_194_304 }).map((g) => g.length),
    ).toEqual([256, 256, 88]);
    const heavy = [
      { id: 0, tokens: 3_000_000 },
      { id: 1, tokens: 3_000_000 },
      { id: 2, tokens: 5_000_000 },
      { id: 3, tokens: 1 },
    ];
    expect(
      groupRows(heavy, (r) => r.tokens, { maxRows: 256, maxTokens: 4_194_304 }).map((g) =>
        g.map((r) => r.id),
      ),
    ).toEqual([[0], [1], [2], [3]]);
  });
});

describe('batchesOf', () => {
  it('splits into BatchWriteItem calls of at most 25 requests, in order', () => {
    fc.assert(
      fc.property(fc.array(fc.nat(), { maxLength: 200 }), (items) => {
        const batches = batchesOf(items);
        expect(batches.flat()).toEqual(items);
        expect(batches.every((b) => b.length > 0 && b.length <= BATCH_WRITE_MAX_REQUESTS)).toBe(true);
        expect(batches.length).toBe(Math.ceil(items.length / 25));
      }),
    );
  });
});

describe('keys', () => {
  it('row keys cannot collide through separators inside ids', () => {
    expect(rowItemKey('a#b', 'c', 0, 0)).not.toBe(rowItemKey('a', 'b#c', 0, 0));
  });

  it('group keys depend on the attempt and the exact set of rows', () => {
    const keys = [rowItemKey('x', '1', 0, 0), rowItemKey('y', '1', 0, 0)];
    expect(groupKey('1', keys)).toBe(groupKey('1', [...keys].reverse()));
    expect(groupKey('1', keys)).not.toBe(groupKey('2', keys));
    expect(groupKey('1', keys)).not.toBe(groupKey('1', keys.slice(0, 1)));
  });
});
