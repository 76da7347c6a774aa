import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import DataLoader from 'dataloader';
import { type FutureOutcome, readFutureOutcome, readFutureOutcomes } from '../../repositories/futures.js';

/**
 * How long a timed re-read waits for others to share its BatchGetItem. Timed re-reads are the
 * fallback of a poll that a commit signal wakes (from 250 ms apart), so a few ms more is nothing.
 */
export const TIMED_READ_WINDOW_MS = 20;

/**
 * The re-reads of waiting `retrieve_future` polls, merged where one process serves many polls at once
 * (the local runtime, whose commit signal wakes them: shared/base/commit-signal.ts): the reads of
 * polls woken by one commit (strong, made in the same turn of the event loop) go together, and so do
 * timed re-reads made within `TIMED_READ_WINDOW_MS` of each other (eventually consistent), as one
 * BatchGetItem per 100 rows instead of a GetItem each. A read alone is the GetItem it always was, so
 * a Lambda container, which serves one poll at a time, reads as before.
 */
export class OutcomeReads {
  readonly #strong: DataLoader<string, FutureOutcome | undefined>;
  readonly #timed: DataLoader<string, FutureOutcome | undefined>;

  constructor(doc: DynamoDBDocumentClient, table: string, windowMs = TIMED_READ_WINDOW_MS) {
    const loader = (consistent: boolean, schedule: (run: () => void) => void) =>
      new DataLoader<string, FutureOutcome | undefined>(
        async (ids) => {
          const [only] = ids;
          if (ids.length === 1 && only !== undefined)
            return [await readFutureOutcome(doc, table, only, consistent)];
          const rows = await readFutureOutcomes(doc, table, ids, consistent);
          return ids.map((id) => rows.get(id));
        },
        { cache: false, batchScheduleFn: schedule },
      );
    this.#strong = loader(true, (run) => setImmediate(run));
    this.#timed = loader(false, (run) => setTimeout(run, windowMs));
  }

  /** The row's outcome: `strong` for a poll its commit woke, else a timed (eventually consistent) read. */
  read(requestId: string, strong: boolean): Promise<FutureOutcome | undefined> {
    return (strong ? this.#strong : this.#timed).load(requestId);
  }
}

const readers = new WeakMap<DynamoDBDocumentClient, Map<string, OutcomeReads>>();

/** The process's merged re-reads of `table` through `doc`. */
export function outcomeReads(doc: DynamoDBDocumentClient, table: string): OutcomeReads {
  const byTable = readers.get(doc) ?? new Map<string, OutcomeReads>();
  readers.set(doc, byTable);
  const existing = byTable.get(table);
  if (existing !== undefined) return existing;
  const created = new OutcomeReads(doc, table);
  byTable.set(table, created);
  return created;
}
