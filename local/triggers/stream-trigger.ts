import {
  DescribeStreamCommand,
  type DynamoDBStreamsClient,
  GetRecordsCommand,
  type GetRecordsCommandOutput,
  GetShardIteratorCommand,
  type Shard,
  type ShardIteratorType,
} from '@aws-sdk/client-dynamodb-streams';
import type { DynamoDBRecord, DynamoDBStreamEvent } from 'aws-lambda';
import { exponentialDelay, realSleep } from '../../shared/aws/backoff.js';
import { isAwsError } from '../../shared/errors.js';
import { logger } from '../../shared/logger.js';
import type { FunctionId, Trigger } from '../../shared/topology.js';
import { matchesAnyPattern } from '../event-filter.js';
import { failedItems } from './batch-response.js';
import type { Invoker } from './invoker.js';
import { type StreamFailureDestination, streamFailureRecord } from './stream-failure-report.js';
import { toLambdaStreamRecord } from './stream-records.js';

/** A failed poll or invocation is retried after 100 ms, 200 ms, ... up to 2 s (retry n waits delay n - 1). */
export const TRIGGER_RETRY_BACKOFF = { baseMs: 100, capMs: 2_000 } as const;

export type StreamTriggerDecl = Extract<Trigger, { kind: 'stream' }>;

export interface StreamTriggerOptions {
  readonly functionId: FunctionId;
  readonly trigger: StreamTriggerDecl;
  readonly streamArn: string;
  readonly client: DynamoDBStreamsClient;
  readonly invoker: Invoker;
  readonly region: string;
  /** The queue `trigger.onFailure` names, where a batch given up on is reported. */
  readonly onFailure: StreamFailureDestination;
  /** Pause between empty reads of a shard (Lambda polls about four times a second). */
  readonly pollIntervalMs?: number;
  /**
   * Subscribes to the table's writes (local/write-wakes.ts), answering the unsubscribe: an idle
   * shard is read again as soon as one happens, not after `pollIntervalMs`.
   */
  readonly onTableWrite?: (listener: () => void) => () => void;
  /** How often the stream is described to find new shards. */
  readonly discoveryIntervalMs?: number;
}

export interface RunningTrigger {
  stop(): Promise<void>;
}

type ShardState = 'polling' | 'done';

/** How one invocation of a batch ended. */
type BatchOutcome =
  | { readonly kind: 'succeeded' }
  /** The handler answered batchItemFailures (or a malformed answer, which fails the whole batch). */
  | { readonly kind: 'failed-items'; readonly failedFrom: number }
  /** The handler threw or timed out: a function error. */
  | { readonly kind: 'function-error' };

/**
 * Delivers a table's stream to a function as Lambda's event source mapping does: per shard, in
 * order, filtered by the trigger's patterns, in batches of at most `batchSize`. Resolves once every
 * open shard has an iterator, so writes after it are seen.
 *
 * Failures follow the Lambda developer guide (DynamoDB: "Error handling" / services-dynamodb-errors,
 * and services-ddb-batchfailurereporting):
 * - a function error with `bisectBatchOnError` splits the batch in two and each half is delivered on
 *   its own, first half first, whatever ReportBatchItemFailures says; splitting does not count
 *   towards the retry quota, so only a batch that can no longer split (one record) spends retries;
 * - a batchItemFailures answer retries only from the first failed record (with bisection on, AWS
 *   splits at that sequence number and retries the rest, which is the same thing), spending a retry;
 * - after `retryAttempts` retries the batch is discarded and reported to the on-failure destination
 *   (condition RetryAttemptsExhausted, the shard and sequence range, not the records), and the shard
 *   moves on.
 * Not documented, so chosen here: the halves of a split inherit the retries their parent had spent,
 * and approximateInvokeCount counts the invocations of the batch as last split.
 */
export async function startStreamTrigger(options: StreamTriggerOptions): Promise<RunningTrigger> {
  const { client, streamArn, trigger } = options;
  const pollIntervalMs = options.pollIntervalMs ?? 250;
  const discoveryIntervalMs = options.discoveryIntervalMs ?? 2_000;
  const controller = new AbortController();
  const { signal } = controller;
  const shards = new Map<string, ShardState>();
  const loops = new Set<Promise<void>>();
  const wakes = new Wakes();
  const unsubscribe = options.onTableWrite?.(() => wakes.wake());

  const startShard = (shardId: string, iterator: string): void => {
    shards.set(shardId, 'polling');
    const loop = pollShard(shardId, iterator).finally(() => {
      shards.set(shardId, 'done');
      loops.delete(loop);
    });
    loops.add(loop);
  };

  async function iteratorFor(
    shardId: string,
    type: ShardIteratorType,
    after?: string,
  ): Promise<string | undefined> {
    const answer = await client.send(
      new GetShardIteratorCommand({
        StreamArn: streamArn,
        ShardId: shardId,
        ShardIteratorType: after === undefined ? type : 'AFTER_SEQUENCE_NUMBER',
        SequenceNumber: after,
      }),
      { abortSignal: signal },
    );
    return answer.ShardIterator;
  }

  async function pollShard(shardId: string, firstIterator: string): Promise<void> {
    let iterator: string | undefined = firstIterator;
    let lastSequence: string | undefined;
    let errors = 0;
    while (iterator !== undefined && !signal.aborted) {
      // A write seen after this point makes an empty answer stale: the shard is read again at once.
      const writesBefore = wakes.count;
      try {
        const page: GetRecordsCommandOutput = await client.send(
          new GetRecordsCommand({ ShardIterator: iterator, Limit: trigger.batchSize }),
          {
            abortSignal: signal,
          },
        );
        errors = 0;
        const records = page.Records ?? [];
        if (records.length > 0) {
          lastSequence = records.at(-1)?.dynamodb?.SequenceNumber ?? lastSequence;
          await deliver(
            shardId,
            records.map((record) => toLambdaStreamRecord(record, streamArn, options.region)),
          );
        }
        iterator = page.NextShardIterator;
        if (records.length === 0 && wakes.count === writesBefore) await wakes.sleep(pollIntervalMs, signal);
      } catch (error) {
        if (signal.aborted) return;
        if (isAwsError(error, 'ResourceNotFoundException')) {
          logger.warn('stream is gone; its trigger stops', { functionId: options.functionId, streamArn });
          return;
        }
        if (isAwsError(error, 'ExpiredIteratorException', 'TrimmedDataAccessException')) {
          // Resume after the last record read. DynamoDB Local also reports an iterator taken on an empty
          // shard as trimmed once the shard's first record arrives (its sequence numbers are global);
          // every record of such a shard is newer than the iterator, so its horizon is the right start.
          const fresh = await iteratorFor(shardId, 'TRIM_HORIZON', lastSequence).catch(() => undefined);
          if (fresh !== undefined) {
            iterator = fresh;
            continue;
          }
        }
        errors += 1;
        logger.warn('stream read failed; retrying', {
          functionId: options.functionId,
          shardId,
          error: error as Error,
        });
        await realSleep(exponentialDelay(errors - 1, TRIGGER_RETRY_BACKOFF), signal);
      }
    }
  }

  async function deliver(shardId: string, records: readonly DynamoDBRecord[]): Promise<void> {
    const batch = records.filter((record) => matchesAnyPattern(record, trigger.filters));
    if (batch.length > 0) await deliverBatch(shardId, batch, 0);
  }

  /** Delivers `batch` until it succeeds or is given up on; `retriesSpent` were spent on it before. */
  async function deliverBatch(
    shardId: string,
    batch: readonly DynamoDBRecord[],
    retriesSpent: number,
  ): Promise<void> {
    let pending = batch;
    let retries = retriesSpent;
    for (let invocations = 1; pending.length > 0 && !signal.aborted; invocations += 1) {
      const outcome = await invokeBatch(pending);
      if (outcome.kind === 'succeeded') return;
      if (outcome.kind === 'function-error' && trigger.bisectBatchOnError && pending.length > 1) {
        const middle = Math.ceil(pending.length / 2);
        await deliverBatch(shardId, pending.slice(0, middle), retries);
        await deliverBatch(shardId, pending.slice(middle), retries);
        return;
      }
      if (outcome.kind === 'failed-items') pending = pending.slice(outcome.failedFrom);
      if (retries >= trigger.retryAttempts) {
        await giveUp(shardId, pending, invocations, outcome.kind === 'function-error');
        return;
      }
      retries += 1;
      await realSleep(exponentialDelay(retries - 1, TRIGGER_RETRY_BACKOFF), signal);
    }
  }

  async function invokeBatch(batch: readonly DynamoDBRecord[]): Promise<BatchOutcome> {
    const event: DynamoDBStreamEvent = { Records: [...batch] };
    const sequences = batch.map((record) => record.dynamodb?.SequenceNumber ?? '');
    let answer: unknown;
    try {
      answer = await options.invoker.invoke(options.functionId, event);
    } catch (error) {
      logger.error('stream handler failed', { functionId: options.functionId, error: error as Error });
      return { kind: 'function-error' };
    }
    const failed = failedItems(answer, sequences);
    if (failed === 'all') return { kind: 'failed-items', failedFrom: 0 };
    const positions = sequences.flatMap((sequence, position) => (failed.has(sequence) ? [position] : []));
    return positions.length === 0
      ? { kind: 'succeeded' }
      : { kind: 'failed-items', failedFrom: Math.min(...positions) };
  }

  /** Reports a discarded batch; keeps trying (the shard waits) so that no failure goes unrecorded. */
  async function giveUp(
    shardId: string,
    records: readonly DynamoDBRecord[],
    invocations: number,
    functionError: boolean,
  ): Promise<void> {
    const record = streamFailureRecord({
      functionId: options.functionId,
      streamArn,
      shardId,
      records,
      invocations,
      functionError,
    });
    const { startSequenceNumber, endSequenceNumber } = record.DDBStreamBatchInfo;
    logger.error('stream batch still failing after its retries; reporting it to its on-failure queue', {
      functionId: options.functionId,
      shardId,
      records: records.length,
      startSequenceNumber,
      endSequenceNumber,
      onFailure: trigger.onFailure,
    });
    for (let attempt = 1; !signal.aborted; attempt += 1) {
      try {
        await options.onFailure.report(record);
        return;
      } catch (error) {
        logger.warn('reporting a failed stream batch failed; retrying', {
          functionId: options.functionId,
          onFailure: trigger.onFailure,
          error: error as Error,
        });
        await realSleep(exponentialDelay(attempt - 1, TRIGGER_RETRY_BACKOFF), signal);
      }
    }
  }

  async function describeShards(): Promise<Shard[]> {
    const found: Shard[] = [];
    let startAfter: string | undefined;
    do {
      const page = await client.send(
        new DescribeStreamCommand({ StreamArn: streamArn, ExclusiveStartShardId: startAfter }),
        { abortSignal: signal },
      );
      found.push(...(page.StreamDescription?.Shards ?? []));
      startAfter = page.StreamDescription?.LastEvaluatedShardId;
    } while (startAfter !== undefined);
    return found;
  }

  /** Starts shards not seen before, each only after its parent is finished (per-key order). */
  async function adoptNewShards(initial: boolean): Promise<void> {
    for (const shard of await describeShards()) {
      const shardId = shard.ShardId;
      if (shardId === undefined || shards.has(shardId)) continue;
      const parent = shard.ParentShardId;
      if (parent !== undefined && shards.get(parent) === 'polling') continue;
      const closed = shard.SequenceNumberRange?.EndingSequenceNumber !== undefined;
      if (initial && closed && trigger.startingPosition === 'LATEST') {
        shards.set(shardId, 'done');
        continue;
      }
      // Shards born after start-up are read from their beginning: all their records are new.
      const position = initial ? trigger.startingPosition : 'TRIM_HORIZON';
      const iterator = await iteratorFor(shardId, position);
      if (iterator === undefined) shards.set(shardId, 'done');
      else startShard(shardId, iterator);
    }
  }

  await adoptNewShards(true);
  const discovery = (async () => {
    while (!signal.aborted) {
      await realSleep(discoveryIntervalMs, signal);
      if (signal.aborted) return;
      await adoptNewShards(false).catch((error: unknown) => {
        if (!signal.aborted) logger.warn('stream discovery failed', { streamArn, error: error as Error });
      });
    }
  })();

  return {
    stop: async () => {
      unsubscribe?.();
      controller.abort();
      await Promise.allSettled([discovery, ...loops]);
    },
  };
}

/** The table's writes as the shard loops see them: a count to compare, and idle sleeps a write ends. */
class Wakes {
  count = 0;
  readonly #sleepers = new Set<AbortController>();

  wake(): void {
    this.count += 1;
    for (const sleeper of this.#sleepers) sleeper.abort();
  }

  /** Sleeps `ms`, or less when a write happens or `signal` aborts. */
  async sleep(ms: number, signal: AbortSignal): Promise<void> {
    const sleeper = new AbortController();
    const stop = (): void => sleeper.abort();
    signal.addEventListener('abort', stop, { once: true });
    this.#sleepers.add(sleeper);
    try {
      await realSleep(ms, sleeper.signal);
    } finally {
      this.#sleepers.delete(sleeper);
      signal.removeEventListener('abort', stop);
    }
  }
}
