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
import { exponentialDelay, realSleep } from '../../../shared/aws/backoff.js';
import { isAwsError } from '../../../shared/base/errors.js';
import { logger } from '../../../shared/base/logger.js';
import type { FunctionId, Trigger } from '../../../shared/base/topology.js';
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
  /**
   * Pause after a read that left nothing behind (an empty page, or one short of the batch size), cut
   * short by a write (Lambda polls about four times a second).
   */
  readonly pollIntervalMs?: number;
  /**
   * Subscribes to the table's writes (local/runtime/write-wakes.ts), answering the unsubscribe: an idle
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
 * order (with a `parallelizationFactor` above 1, per item, in `ShardLanes`), filtered by the trigger's
 * patterns, in batches of at most `batchSize`. Resolves once every
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
  const parallelization = Math.max(1, Math.floor(trigger.parallelizationFactor ?? 1));
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
      // A shard that ended has rolled over: its children start now, not at the next discovery.
      if (!signal.aborted) void discover(false);
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
    const lanes =
      parallelization > 1
        ? new ShardLanes(
            parallelization,
            trigger.batchSize,
            (batch) => deliverBatch(shardId, batch, 0),
            signal,
          )
        : undefined;
    try {
      await readShard(shardId, firstIterator, lanes);
    } finally {
      // A child shard starts only once its parent is done: everything read from this one is delivered.
      await lanes?.drained();
    }
  }

  /**
   * Reads a shard until it ends. With one batch at a time the read waits for each delivery, as Lambda
   * does; with `lanes` the reader hands records over and reads on while batches are delivered.
   */
  async function readShard(shardId: string, firstIterator: string, lanes: ShardLanes | undefined) {
    let iterator: string | undefined = firstIterator;
    let lastSequence: string | undefined;
    let errors = 0;
    while (iterator !== undefined && !signal.aborted) {
      // A write seen after this point may have landed after the read: the shard is read again at once.
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
          const converted = records.map((record) => toLambdaStreamRecord(record, streamArn, options.region));
          if (lanes === undefined) await deliver(shardId, converted);
          else await lanes.add(converted.filter((record) => matchesAnyPattern(record, trigger.filters)));
        }
        iterator = page.NextShardIterator;
        // A page short of the limit held everything the shard had when it was read, so what can be
        // new since is only what a counted write added (or another client's, seen at the idle poll).
        // A full page may have left records behind: read on at once.
        const full = records.length >= trigger.batchSize;
        if (!full && wakes.count === writesBefore) await wakes.sleep(pollIntervalMs, signal);
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

  // One discovery at a time, the first included, so that no shard is started twice. The first one's
  // failure fails the start; a later one's is logged and retried at the next.
  let discovering: Promise<void> = Promise.resolve();
  const discover = (initial: boolean): Promise<void> => {
    const next = discovering.then(() => adoptNewShards(initial));
    discovering = next.catch((error: unknown) => {
      if (!initial && !signal.aborted)
        logger.warn('stream discovery failed', { streamArn, error: error as Error });
    });
    return initial ? next : discovering;
  };

  await discover(true);
  const discovery = (async () => {
    while (!signal.aborted) {
      await realSleep(discoveryIntervalMs, signal);
      if (signal.aborted) return;
      await discover(false);
    }
  })();

  return {
    stop: async () => {
      unsubscribe?.();
      controller.abort();
      await Promise.allSettled([discovery, discovering, ...loops]);
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

/**
 * A shard's records delivered `factor` batches at a time, as Lambda's ParallelizationFactor does:
 * each record goes to the lane its item's keys hash to, and each lane delivers its records in order,
 * one batch at a time, so two records of one item never overtake each other (every table here is
 * keyed by its partition key alone, so per item is per partition key) while records of other items
 * need not wait. A lane that retries a failing batch holds up only its own records. The reader is
 * held back once `factor` full batches are queued.
 */
class ShardLanes {
  readonly #queues: DynamoDBRecord[][];
  readonly #running: (Promise<void> | undefined)[];
  readonly #roomWaiters: (() => void)[] = [];
  #queued = 0;

  constructor(
    private readonly factor: number,
    private readonly batchSize: number,
    private readonly deliver: (batch: readonly DynamoDBRecord[]) => Promise<void>,
    private readonly signal: AbortSignal,
  ) {
    this.#queues = Array.from({ length: factor }, () => []);
    this.#running = Array.from({ length: factor }, () => undefined);
    // A stopped trigger's reader must not stay parked behind a batch that will never be taken.
    signal.addEventListener('abort', () => this.#wakeReader(), { once: true });
  }

  #wakeReader(): void {
    for (const wake of this.#roomWaiters.splice(0)) wake();
  }

  /** Queues records (in stream order); resolves once the reader may read on. */
  async add(records: readonly DynamoDBRecord[]): Promise<void> {
    for (const record of records) {
      const lane = laneOf(record, this.factor);
      this.#queues[lane]?.push(record);
      this.#queued += 1;
      this.#start(lane);
    }
    while (this.#queued >= this.factor * this.batchSize && !this.signal.aborted) {
      await new Promise<void>((resolve) => this.#roomWaiters.push(resolve));
    }
  }

  /** Resolves once every queued record has been delivered (or given up on, or the trigger stopped). */
  async drained(): Promise<void> {
    for (;;) {
      const running = this.#running.filter((lane) => lane !== undefined);
      if (running.length === 0) return;
      await Promise.allSettled(running);
    }
  }

  #start(lane: number): void {
    if (this.#running[lane] !== undefined) return;
    const run = this.#drain(lane)
      .catch((error: unknown) => {
        if (!this.signal.aborted) logger.warn('stream lane stopped', { lane, error: error as Error });
      })
      .finally(() => {
        this.#running[lane] = undefined;
        // Records queued after the lane's last batch was taken and before it ended.
        if ((this.#queues[lane]?.length ?? 0) > 0 && !this.signal.aborted) this.#start(lane);
      });
    this.#running[lane] = run;
  }

  async #drain(lane: number): Promise<void> {
    const queue = this.#queues[lane] ?? [];
    while (queue.length > 0 && !this.signal.aborted) {
      const batch = queue.splice(0, this.batchSize);
      try {
        await this.deliver(batch);
      } finally {
        this.#queued -= batch.length;
        this.#wakeReader();
      }
    }
  }
}

/** The lane of a record's item: a stable hash (FNV-1a) of its keys. */
export function laneOf(record: Pick<DynamoDBRecord, 'dynamodb'>, factor: number): number {
  if (factor <= 1) return 0;
  const keys = JSON.stringify(record.dynamodb?.Keys ?? {});
  let hash = 0x811c9dc5;
  for (let i = 0; i < keys.length; i++) {
    hash ^= keys.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0) % factor;
}
