import { BatchGetCommand } from '@aws-sdk/lib-dynamodb';
import { type BackoffPolicy, backoffDelay, type Clock } from '../../aws/backoff.js';
import { BATCH_GET_MAX_KEYS } from '../../aws/batch-get.js';
import { Limiter } from '../../aws/limiter.js';
import { RETRYABLE_ERROR_NAMES } from '../../aws/transient-errors.js';
import { InfrastructureError, isAwsError } from '../../base/errors.js';
import type { PrefixTable } from './table.js';

/**
 * Shared, strongly consistent reads of the `prefixes` table (P4). Keys asked for within a short
 * window are merged into one batch, deduplicated, and read in BatchGetItem calls of at most 100 keys
 * (keys marked `early` go in the first calls, in arrival order, then the others). Each key is answered
 * as soon as the call that holds it returns, not when the whole batch is in. A batch sends its calls a
 * few at a time, in order: its answers then arrive steadily and each response is decoded while the
 * table serves the next, instead of all arriving together and queueing for one CPU to decode them. Answers come unordered
 * and are matched by key; UnprocessedKeys are retried with backoff; a call that fails as a whole is
 * bisected until the failing key stands alone, so only that key's askers see an error. Nothing is
 * cached across batches: every restore sees the table as of its own read.
 */

export type StoredItem = Readonly<Record<string, unknown>>;

/** What one key's read gives: the item, null when absent, or the Error its read ended with. */
export type ReadResult = StoredItem | null | Error;

export interface ReadBatcherOptions {
  readonly windowMs: number;
  /** Distinct keys one batch may hold; a batch that reaches it is read at once. */
  readonly maxBatchSize: number;
  /** BatchGetItem calls in flight at once, across batches. */
  readonly readConcurrency: number;
  /** BatchGetItem calls of one batch in flight at once (within `readConcurrency`). */
  readonly readsInFlightPerBatch: number;
  readonly backoff: BackoffPolicy;
  readonly clock: Clock;
}

export interface LoadOptions {
  /** Read these keys in the batch's first calls (records that many of its other keys depend on). */
  readonly early?: boolean;
}

export class ReadBatchError extends InfrastructureError {
  override readonly name = 'ReadBatchError';
}

type Deliver = (key: string, value: ReadResult) => void;

/** Keys gathered within one window, each with the resolvers of everyone who asked for it. */
class Batch {
  readonly waiters = new Map<string, ((value: ReadResult) => void)[]>();
  readonly early = new Set<string>();

  add(key: string, options: LoadOptions): Promise<ReadResult> {
    return new Promise((resolve) => {
      const list = this.waiters.get(key);
      if (list === undefined) this.waiters.set(key, [resolve]);
      else list.push(resolve);
      if (options.early === true) this.early.add(key);
    });
  }

  /** Distinct keys, the early ones first, each group in arrival order. */
  keys(): string[] {
    const rest = [...this.waiters.keys()].filter((key) => !this.early.has(key));
    return [...this.early, ...rest];
  }

  readonly deliver: Deliver = (key, value) => {
    const list = this.waiters.get(key);
    if (list === undefined) return;
    this.waiters.delete(key);
    for (const resolve of list) resolve(value);
  };
}

/**
 * The fewest calls, the odd-sized one first: it holds the early keys and, being the smallest, tends
 * to come back first, so requests can be answered as each later call returns.
 */
function callChunks(keys: readonly string[]): string[][] {
  const chunks: string[][] = [];
  const first = keys.length % BATCH_GET_MAX_KEYS || BATCH_GET_MAX_KEYS;
  for (let start = 0; start < keys.length; ) {
    const end = start === 0 ? first : start + BATCH_GET_MAX_KEYS;
    chunks.push(keys.slice(start, end));
    start = end;
  }
  return chunks;
}

export class ReadBatcher {
  private readonly limiter: Limiter;
  private current: Batch | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly table: PrefixTable,
    private readonly options: ReadBatcherOptions,
  ) {
    if (options.maxBatchSize < 1) throw new RangeError('maxBatchSize must be at least 1');
    if (options.readsInFlightPerBatch < 1) {
      throw new RangeError('readsInFlightPerBatch must be at least 1');
    }
    this.limiter = new Limiter(options.readConcurrency);
  }

  /** One promise per key (never rejects): joins the batch forming within the window. */
  load(keys: readonly string[], options: LoadOptions = {}): Promise<ReadResult>[] {
    return keys.map((key) => {
      const batch = this.batch();
      const answer = batch.add(key, options);
      if (batch.waiters.size >= this.options.maxBatchSize) this.flush();
      return answer;
    });
  }

  /** Reads what is waiting now instead of at the end of the window. */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.current;
    this.current = undefined;
    if (batch !== undefined) this.dispatch(batch);
  }

  private batch(): Batch {
    if (this.current === undefined) {
      this.current = new Batch();
      this.timer = setTimeout(() => this.flush(), this.options.windowMs);
    }
    return this.current;
  }

  private dispatch(batch: Batch): void {
    const chunks = callChunks(batch.keys());
    let next = 0;
    // Each lane sends the batch's next call when its previous one is answered.
    const lane = async (): Promise<void> => {
      for (let chunk = chunks[next++]; chunk !== undefined; chunk = chunks[next++]) {
        const keys = chunk;
        await this.limiter
          .run(() => this.readChunk(keys, batch.deliver))
          .catch((error: unknown) => {
            // Not expected (readChunk answers every key); still, nobody is left waiting.
            const failure = new ReadBatchError(`read failed: ${String(error)}`, { cause: error });
            for (const key of keys) batch.deliver(key, failure);
          });
      }
    };
    const lanes = Math.min(this.options.readsInFlightPerBatch, chunks.length);
    for (let index = 0; index < lanes; index++) void lane();
  }

  /** Reads `keys` and delivers every one of them: each answer as soon as its response is in. */
  private async readChunk(keys: readonly string[], deliver: Deliver): Promise<void> {
    const { table, options } = this;
    let pending = keys;
    for (let retry = 0; pending.length > 0; retry++) {
      try {
        const output = await table.doc.send(
          new BatchGetCommand({
            RequestItems: {
              [table.tableName]: { Keys: pending.map((pk) => ({ pk })), ConsistentRead: true },
            },
          }),
        );
        const unprocessed = new Set(
          (output.UnprocessedKeys?.[table.tableName]?.Keys ?? []).map((key) => String(key.pk)),
        );
        for (const item of output.Responses?.[table.tableName] ?? []) {
          if (typeof item.pk === 'string' && !unprocessed.has(item.pk)) deliver(item.pk, item);
        }
        // Neither returned nor unprocessed: absent. Delivering an item first makes this a no-op for it.
        for (const key of pending) if (!unprocessed.has(key)) deliver(key, null);
        pending = pending.filter((key) => unprocessed.has(key));
        if (pending.length === 0) return;
        if (retry >= options.backoff.maxRetries) {
          for (const key of pending) {
            deliver(key, new ReadBatchError(`key still unprocessed after ${retry + 1} tries`));
          }
          return;
        }
      } catch (error) {
        const retryable = isAwsError(error, ...RETRYABLE_ERROR_NAMES);
        if (!retryable || retry >= options.backoff.maxRetries) {
          // The whole call failed: split it until the key that makes it fail stands alone.
          if (pending.length === 1) {
            deliver(
              pending[0] as string,
              new ReadBatchError(`read failed: ${String(error)}`, { cause: error }),
            );
            return;
          }
          const middle = Math.ceil(pending.length / 2);
          await Promise.all([
            this.readChunk(pending.slice(0, middle), deliver),
            this.readChunk(pending.slice(middle), deliver),
          ]);
          return;
        }
      }
      await options.clock.sleep(backoffDelay(retry, options.backoff, options.clock.random));
    }
  }
}
