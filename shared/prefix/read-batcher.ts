import { BatchGetCommand } from '@aws-sdk/lib-dynamodb';
import DataLoader from 'dataloader';
import { isAwsError } from '../errors.js';
import { type BackoffPolicy, backoffDelay, type Clock, RETRYABLE_ERROR_NAMES } from './backoff.js';
import { Limiter } from './limiter.js';
import type { PrefixTable } from './table.js';

/**
 * Shared, strongly consistent reads of the `prefixes` table (P4). Keys asked for within a short
 * window are merged (dataloader), deduplicated, and read in BatchGetItem calls of at most 100 keys.
 * Answers come unordered and are matched by key; UnprocessedKeys are retried with backoff; a call
 * that fails as a whole is bisected until the failing key stands alone, so only that key's askers see
 * an error. Nothing is cached across reads: every restore sees the table as of its own read.
 */

export type StoredItem = Readonly<Record<string, unknown>>;

/** BatchGetItem takes at most 100 keys a call. */
export const BATCH_GET_MAX_KEYS = 100;

export interface ReadBatcherOptions {
  readonly windowMs: number;
  /** Keys (with repeats) one dispatch may hold; split into BatchGetItem calls of <= 100 distinct keys. */
  readonly maxBatchSize: number;
  /** BatchGetItem calls in flight at once. */
  readonly readConcurrency: number;
  readonly backoff: BackoffPolicy;
  readonly clock: Clock;
}

/** Runs dataloader's scheduled batches after the window, or at once when a caller flushes. */
class WindowScheduler {
  private pending: (() => void)[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly windowMs: number) {}

  readonly schedule = (dispatch: () => void): void => {
    this.pending.push(dispatch);
    this.timer ??= setTimeout(this.flush, this.windowMs);
  };

  readonly flush = (): void => {
    clearTimeout(this.timer);
    this.timer = undefined;
    for (const dispatch of this.pending.splice(0)) dispatch();
  };
}

export class ReadBatchError extends Error {
  override readonly name = 'ReadBatchError';
}

export class ReadBatcher {
  private readonly loader: DataLoader<string, StoredItem | null>;
  private readonly scheduler: WindowScheduler;
  private readonly limiter: Limiter;

  constructor(
    private readonly table: PrefixTable,
    private readonly options: ReadBatcherOptions,
  ) {
    this.scheduler = new WindowScheduler(options.windowMs);
    this.limiter = new Limiter(options.readConcurrency);
    this.loader = new DataLoader((keys) => this.readAll(keys), {
      cache: false,
      maxBatchSize: options.maxBatchSize,
      batchScheduleFn: this.scheduler.schedule,
    });
  }

  /** The item, null when absent, or an Error for a key whose read failed (never rejects). */
  loadMany(keys: readonly string[]): Promise<(StoredItem | null | Error)[]> {
    return this.loader.loadMany(keys);
  }

  /** Dispatches what is waiting now instead of at the end of the window. */
  flush(): void {
    this.scheduler.flush();
  }

  private async readAll(keys: readonly string[]): Promise<(StoredItem | null | Error)[]> {
    const distinct = [...new Set(keys)];
    const chunks: string[][] = [];
    for (let start = 0; start < distinct.length; start += BATCH_GET_MAX_KEYS) {
      chunks.push(distinct.slice(start, start + BATCH_GET_MAX_KEYS));
    }
    const found = new Map<string, StoredItem | Error>();
    await Promise.all(
      chunks.map((chunk) =>
        this.limiter.run(async () => {
          for (const [key, value] of await this.readChunk(chunk)) found.set(key, value);
        }),
      ),
    );
    return keys.map((key) => found.get(key) ?? null);
  }

  private async readChunk(keys: readonly string[]): Promise<Map<string, StoredItem | Error>> {
    const { table, options } = this;
    const found = new Map<string, StoredItem | Error>();
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
        for (const item of output.Responses?.[table.tableName] ?? []) {
          if (typeof item.pk === 'string') found.set(item.pk, item);
        }
        pending = (output.UnprocessedKeys?.[table.tableName]?.Keys ?? []).map((key) => String(key.pk));
        if (pending.length === 0) break;
        if (retry >= options.backoff.maxRetries) {
          for (const key of pending)
            found.set(key, new ReadBatchError(`key still unprocessed after ${retry + 1} tries`));
          break;
        }
      } catch (error) {
        const retryable = isAwsError(error, ...RETRYABLE_ERROR_NAMES);
        if (!retryable || retry >= options.backoff.maxRetries) {
          // The whole call failed: split it until the key that makes it fail stands alone.
          if (pending.length === 1) {
            found.set(
              pending[0] as string,
              new ReadBatchError(`read failed: ${String(error)}`, { cause: error }),
            );
          } else {
            const middle = Math.ceil(pending.length / 2);
            const halves = await Promise.all([
              this.readChunk(pending.slice(0, middle)),
              this.readChunk(pending.slice(middle)),
            ]);
            for (const half of halves) for (const [key, value] of half) found.set(key, value);
          }
          break;
        }
      }
      await options.clock.sleep(backoffDelay(retry, options.backoff, options.clock.random));
    }
    return found;
  }
}
