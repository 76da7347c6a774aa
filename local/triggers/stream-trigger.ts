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
import { isAwsError } from '../../shared/errors.js';
import { logger } from '../../shared/logger.js';
import type { FunctionId, Trigger } from '../../shared/topology.js';
import { matchesAnyPattern } from '../event-filter.js';
import { backoffMs, sleep } from './abortable-sleep.js';
import { failedItems } from './batch-response.js';
import type { Invoker } from './invoker.js';
import { toLambdaStreamRecord } from './stream-records.js';

export type StreamTriggerDecl = Extract<Trigger, { kind: 'stream' }>;

export interface StreamTriggerOptions {
  readonly functionId: FunctionId;
  readonly trigger: StreamTriggerDecl;
  readonly streamArn: string;
  readonly client: DynamoDBStreamsClient;
  readonly invoker: Invoker;
  readonly region: string;
  /** Pause between empty reads of a shard (Lambda polls about four times a second). */
  readonly pollIntervalMs?: number;
  /** How often the stream is described to find new shards. */
  readonly discoveryIntervalMs?: number;
}

export interface RunningTrigger {
  stop(): Promise<void>;
}

type ShardState = 'polling' | 'done';

/**
 * Delivers a table's stream to a function as Lambda's event source mapping does: per shard, in
 * order, filtered by the trigger's patterns, in batches of at most `batchSize`; a batch is retried
 * from its first failed record (or whole, when the handler throws) up to `retryAttempts`, then
 * skipped. Resolves once every open shard has an iterator, so writes after it are seen.
 */
export async function startStreamTrigger(options: StreamTriggerOptions): Promise<RunningTrigger> {
  const { client, streamArn, trigger } = options;
  const pollIntervalMs = options.pollIntervalMs ?? 250;
  const discoveryIntervalMs = options.discoveryIntervalMs ?? 2_000;
  const controller = new AbortController();
  const { signal } = controller;
  const shards = new Map<string, ShardState>();
  const loops = new Set<Promise<void>>();

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
          await deliver(records.map((record) => toLambdaStreamRecord(record, streamArn, options.region)));
        }
        iterator = page.NextShardIterator;
        if (records.length === 0) await sleep(pollIntervalMs, signal);
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
        await sleep(backoffMs(errors), signal);
      }
    }
  }

  async function deliver(records: readonly DynamoDBRecord[]): Promise<void> {
    let pending = records.filter((record) => matchesAnyPattern(record, trigger.filters));
    for (let retries = 0; pending.length > 0 && !signal.aborted; retries += 1) {
      const failedFrom = await invokeBatch(pending);
      if (failedFrom === undefined) return;
      if (retries >= trigger.retryAttempts) {
        logger.error('stream batch still failing after its retries; skipping it', {
          functionId: options.functionId,
          records: pending.length - failedFrom,
          retries,
        });
        return;
      }
      pending = pending.slice(failedFrom);
      await sleep(backoffMs(retries + 1), signal);
    }
  }

  /** Position of the first record to retry, or undefined when the whole batch succeeded. */
  async function invokeBatch(batch: readonly DynamoDBRecord[]): Promise<number | undefined> {
    const event: DynamoDBStreamEvent = { Records: [...batch] };
    const sequences = batch.map((record) => record.dynamodb?.SequenceNumber ?? '');
    try {
      const failed = failedItems(await options.invoker.invoke(options.functionId, event), sequences);
      if (failed === 'all') return 0;
      const positions = sequences.flatMap((sequence, position) => (failed.has(sequence) ? [position] : []));
      return positions.length === 0 ? undefined : Math.min(...positions);
    } catch (error) {
      logger.error('stream handler failed', { functionId: options.functionId, error: error as Error });
      return 0;
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
      await sleep(discoveryIntervalMs, signal);
      if (signal.aborted) return;
      await adoptNewShards(false).catch((error: unknown) => {
        if (!signal.aborted) logger.warn('stream discovery failed', { streamArn, error: error as Error });
      });
    }
  })();

  return {
    stop: async () => {
      controller.abort();
      await Promise.allSettled([discovery, ...loops]);
    },
  };
}
