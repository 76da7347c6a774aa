import { describe, expect, it } from 'vitest';
import {
  CLONE_SEQ_SPAN,
  cloneOfSeqId,
  type LogEntry,
  padPosition,
  positionOfSortKey,
  walkLog,
} from '../../shared/domain/session-log.js';

/** W9: the completion log's walk, which decides what a session poll answers and where its cursor goes. */

const done = (position: number): LogEntry => ({ position, state: 'finished', request_id: `r${position}` });
const voided = (position: number): LogEntry => ({ position, state: 'void' });

describe('walkLog', () => {
  it('answers contiguous positions after the cursor, in order, whatever order the read gave', () => {
    expect(walkLog(0, [done(3), done(1), done(2)], 10)).toEqual({
      answered: [done(1), done(2), done(3)],
      cursor: 3,
    });
  });

  it('stops at a gap below a later entry and names it, answering what comes before it', () => {
    expect(walkLog(0, [done(1), done(3)], 10)).toEqual({ answered: [done(1)], cursor: 1, gap: 2 });
    expect(walkLog(0, [done(2)], 10)).toEqual({ answered: [], cursor: 0, gap: 1 });
  });

  it('passes voided positions without answering them', () => {
    expect(walkLog(0, [voided(1), done(2)], 10)).toEqual({ answered: [done(2)], cursor: 2 });
  });

  it('ignores entries at or before the cursor (a reconnect re-reads from its cursor) and duplicates', () => {
    expect(walkLog(2, [done(1), done(2), done(3), done(3)], 10)).toEqual({ answered: [done(3)], cursor: 3 });
  });

  it('answers at most `limit` entries; the cursor resumes after the last one', () => {
    const entries = [1, 2, 3, 4, 5].map(done);
    expect(walkLog(0, entries, 2)).toEqual({ answered: [done(1), done(2)], cursor: 2 });
    expect(walkLog(2, entries, 2)).toEqual({ answered: [done(3), done(4)], cursor: 4 });
  });

  it('an empty log answers nothing at the same cursor', () => {
    expect(walkLog(7, [], 10)).toEqual({ answered: [], cursor: 7 });
  });
});

describe('log keys', () => {
  it('padded positions sort as numbers and read back', () => {
    expect(padPosition(9) < padPosition(10)).toBe(true);
    expect(positionOfSortKey(`${padPosition(42)}#abc`)).toBe(42);
    expect(() => padPosition(-1)).toThrow(RangeError);
  });

  it('a seq_id names its clone as the SDK builds it (10^9 * clone + n)', () => {
    expect(cloneOfSeqId(5)).toBe(0);
    expect(cloneOfSeqId(CLONE_SEQ_SPAN * 3 + 7)).toBe(3);
  });
});
