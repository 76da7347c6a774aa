/**
 * Session futures (W9, docs/design.md#w9): the pure rules of a sampling session's completion log.
 *
 * Each (sampling session, clone) has a log of the samples that turned terminal, in commit order. A
 * commit takes the next position from the log's counter (an atomic ADD) and writes its entry at that
 * position in the same transaction that ends the future, on `attribute_not_exists`. The poll's cursor
 * is the last position it answered; it only advances over contiguous positions, so an entry whose
 * commit is still in flight (its position taken, its entry not yet written or not yet in the index)
 * holds the cursor back instead of being skipped. A position whose commit never lands (its worker
 * died) is voided by the poll after `HOLE_VOID_AFTER_MS`: a conditional put that either lands (the
 * commit, if it ever comes, then fails its condition and takes a new position) or finds the entry.
 * No entry is ever skipped, whatever the timing.
 */

/** The SDK's request ids per clone: `seq_id = CLONE_SEQ_SPAN * clone + n` (the original client is 0). */
export const CLONE_SEQ_SPAN = 1_000_000_000;

/** Positions are zero-padded so string order is numeric order in the index's sort key. */
const POSITION_DIGITS = 15;
export const MAX_LOG_POSITION = 10 ** POSITION_DIGITS - 1;

/** How long a position may stay unfilled before a poll voids it (a crashed commit's, or one far behind). */
export const HOLE_VOID_AFTER_MS = 5_000;
/** How long a gap seen in the index waits before the poll reads its entry from the table itself. */
export const HOLE_READ_AFTER_MS = 250;

export type LogState = 'finished' | 'failed';

/** One entry of the log: a sample that ended, or a voided position. */
export interface LogEntry {
  readonly position: number;
  /** Absent on a voided position. */
  readonly request_id?: string;
  readonly state: LogState | 'void';
}

export function cloneOfSeqId(seqId: number): number {
  return Math.floor(seqId / CLONE_SEQ_SPAN);
}

/** The log of one (sampling session, clone): also the commit signal's key for its pollers. */
export function sessionLogKey(samplingSessionId: string, cloneId: number): string {
  return `${samplingSessionId}#${cloneId}`;
}

export function padPosition(position: number): string {
  if (!Number.isSafeInteger(position) || position < 0 || position > MAX_LOG_POSITION) {
    throw new RangeError(`log position ${position} is out of range`);
  }
  return String(position).padStart(POSITION_DIGITS, '0');
}

/** The position a log entry's sort key starts with. */
export function positionOfSortKey(sortKey: string): number {
  return Number.parseInt(sortKey.slice(0, POSITION_DIGITS), 10);
}

/** What a poll may answer from the entries it read after `cursor`, and the first gap, if any. */
export interface LogWalk {
  /** Entries to answer, in position order (voided positions left out). */
  readonly answered: readonly LogEntry[];
  /** The cursor the answer carries: the last contiguous position read. */
  readonly cursor: number;
  /** The first position missing below a later entry (the walk stopped there); undefined when none. */
  readonly gap?: number;
}

/**
 * Walks `entries` (any order, possibly with duplicates) from `cursor + 1`: answers each contiguous
 * position and stops at the first missing one, up to `limit` answered entries.
 */
export function walkLog(cursor: number, entries: readonly LogEntry[], limit: number): LogWalk {
  const byPosition = new Map<number, LogEntry>();
  for (const entry of entries) if (entry.position > cursor) byPosition.set(entry.position, entry);
  const answered: LogEntry[] = [];
  let at = cursor;
  while (answered.length < limit) {
    const next = byPosition.get(at + 1);
    if (next === undefined) break;
    at += 1;
    if (next.state !== 'void') answered.push(next);
  }
  const later = [...byPosition.keys()].some((position) => position > at + 1);
  return later && answered.length < limit ? { answered, cursor: at, gap: at + 1 } : { answered, cursor: at };
}
