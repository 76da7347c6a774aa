import { ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import type { DynamoDBBatchResponse, DynamoDBRecord, DynamoDBStreamEvent } from 'aws-lambda';
import { afterEach, describe, expect, it } from 'vitest';
import type { LocalRuntime } from '../../local/runtime/lambda-runtime.js';
import type { StreamFailureRecord } from '../../local/runtime/triggers/stream-failure-report.js';
import { type Topology, type Trigger, topology } from '../../shared/base/topology.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { startCloudRuntime } from '../support/runtime.js';
import { pause, waitFor } from '../support/wait.js';

type StreamTrigger = Extract<Trigger, { kind: 'stream' }>;
type Handler = (event: DynamoDBStreamEvent) => Promise<DynamoDBBatchResponse>;

const RETRY_ATTEMPTS = 2;

/**
 * The scheduler's futures trigger as declared, but with few retries, one batch per shard at a time
 * and reading from the start of the stream, so records written before the runtime starts arrive in
 * one batch (local-runtime-stream-lanes.test.ts delivers batches side by side).
 */
function topologyWith(bisectBatchOnError: boolean): Topology {
  const declared = topology.functions.scheduler.triggers.find(
    (trigger): trigger is StreamTrigger => trigger.kind === 'stream' && trigger.table === 'futures',
  );
  if (declared === undefined) throw new Error('the scheduler has no futures stream trigger');
  const trigger: StreamTrigger = {
    ...declared,
    startingPosition: 'TRIM_HORIZON',
    retryAttempts: RETRY_ATTEMPTS,
    bisectBatchOnError,
    parallelizationFactor: 1,
  };
  return {
    ...topology,
    functions: {
      ...topology.functions,
      scheduler: { ...topology.functions.scheduler, triggers: [trigger] },
    },
  };
}

const keyOf = (record: DynamoDBRecord): string => record.dynamodb?.Keys?.request_id?.S ?? '?';
const sequenceOf = (record: DynamoDBRecord): string => record.dynamodb?.SequenceNumber ?? '?';

/** The DynamoDB stream mapping's on-failure handling, run by the local runtime against a real local cloud. */
describe('local runtime: stream trigger bisection and on-failure destination', () => {
  let cloud: TestCloud;
  let runtime: LocalRuntime | undefined;
  /** Every invocation: its records and whether the handler threw. */
  const invocations: { keys: string[]; records: DynamoDBRecord[]; threw: boolean }[] = [];

  afterEach(async () => {
    await runtime?.stop();
    runtime = undefined;
    invocations.length = 0;
  });

  /** Writes the keys to a fresh futures table, in order, then starts the runtime over them. */
  async function deliverThrough(keys: readonly string[], bisect: boolean, handler: Handler): Promise<void> {
    cloud = await setupTestCloud();
    for (const key of keys) {
      await cloud.clients.doc.send(
        new PutCommand({
          TableName: cloud.names.tables.futures,
          Item: { request_id: key, live: 'default#0', status: 'pending' },
        }),
      );
    }
    const scheduler = async (event: DynamoDBStreamEvent): Promise<DynamoDBBatchResponse> => {
      const entry = { keys: event.Records.map(keyOf), records: event.Records, threw: false };
      invocations.push(entry);
      try {
        return await handler(event);
      } catch (error) {
        entry.threw = true;
        throw error;
      }
    };
    runtime = await startCloudRuntime(cloud, {
      topology: topologyWith(bisect),
      functions: ['scheduler'],
      handlers: { scheduler },
    });
  }

  /** Waits for the first on-failure message, then checks that no other one follows. */
  async function theOnlyFailureReport(): Promise<StreamFailureRecord> {
    const queueUrl = cloud.names.queueUrls.streamDlq;
    const receive = async (waitSeconds: number) =>
      (
        await cloud.clients.sqs.send(
          new ReceiveMessageCommand({
            QueueUrl: queueUrl,
            MaxNumberOfMessages: 10,
            WaitTimeSeconds: waitSeconds,
          }),
        )
      ).Messages ?? [];
    const [first, ...others] = await waitFor('a message on stream-dlq', async () => {
      const messages = await receive(1);
      return messages.length > 0 && messages;
    });
    expect(others).toEqual([]);
    await pause(500);
    expect(await receive(0)).toEqual([]);
    return JSON.parse(first?.Body ?? 'null') as StreamFailureRecord;
  }

  const threw = () => invocations.filter((invocation) => invocation.threw);
  const acknowledged = () =>
    invocations.filter((invocation) => !invocation.threw).flatMap((invocation) => invocation.keys);

  it('bisects a batch around a poison record, delivers the rest in order and reports the poison one', async () => {
    const keys = ['r0', 'r1', 'r2', 'poison', 'r4', 'r5', 'r6'];
    await deliverThrough(keys, true, async (event) => {
      if (event.Records.some((record) => keyOf(record) === 'poison')) throw new Error('poison record');
      return { batchItemFailures: [] };
    });

    const report = await theOnlyFailureReport();
    const good = keys.filter((key) => key !== 'poison');
    await waitFor('every other record acknowledged', () => acknowledged().length >= good.length);

    // One batch of seven, then halves: only the poison record ever fails alone.
    expect(invocations[0]?.keys).toEqual(keys);
    expect(acknowledged()).toEqual(good);
    const alone = threw().filter((invocation) => invocation.keys.length === 1);
    expect(alone.map((invocation) => invocation.keys)).toEqual(
      Array.from({ length: 1 + RETRY_ATTEMPTS }, () => ['poison']),
    );
    // Per-shard order: the records after the poison one wait until it has been given up on.
    const lastPoison = invocations.lastIndexOf(alone.at(-1) as (typeof invocations)[number]);
    const firstAfter = invocations.findIndex(
      (invocation) => !invocation.threw && invocation.keys.includes('r4'),
    );
    expect(lastPoison).toBeLessThan(firstAfter);

    const poison = invocations[0]?.records[3] as DynamoDBRecord;
    expect(keyOf(poison)).toBe('poison');
    expect(report).toEqual({
      requestContext: {
        requestId: expect.any(String),
        functionArn: expect.stringMatching(/^arn:aws:lambda:[^:]+:\d{12}:function:\S*scheduler$/),
        condition: 'RetryAttemptsExhausted',
        approximateInvokeCount: 1 + RETRY_ATTEMPTS,
      },
      responseContext: { statusCode: 200, executedVersion: '$LATEST', functionError: 'Unhandled' },
      version: '1.0',
      timestamp: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      DDBStreamBatchInfo: {
        shardId: expect.any(String),
        startSequenceNumber: sequenceOf(poison),
        endSequenceNumber: sequenceOf(poison),
        approximateArrivalOfFirstRecord: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/),
        approximateArrivalOfLastRecord: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/),
        batchSize: 1,
        streamArn: cloud.names.streamArns.futures,
      },
    });
  });

  it('retries a partial failure from its first failed record, then reports that range', async () => {
    const keys = ['a0', 'a1', 'stuck', 'a3', 'a4'];
    await deliverThrough(keys, true, async (event) => ({
      batchItemFailures: event.Records.filter((record) => keyOf(record) === 'stuck').map((record) => ({
        itemIdentifier: sequenceOf(record),
      })),
    }));

    const report = await theOnlyFailureReport();

    // No bisection for a batchItemFailures answer: every retry starts at the failed record.
    expect(invocations.map((invocation) => invocation.keys)).toEqual([
      keys,
      ...Array.from({ length: RETRY_ATTEMPTS }, () => ['stuck', 'a3', 'a4']),
    ]);
    const [stuck, a4] = [invocations[0]?.records[2], invocations[0]?.records[4]] as DynamoDBRecord[];
    expect(report.responseContext).toEqual({ statusCode: 200, executedVersion: '$LATEST' });
    expect(report.requestContext.approximateInvokeCount).toBe(1 + RETRY_ATTEMPTS);
    expect(report.DDBStreamBatchInfo).toMatchObject({
      startSequenceNumber: sequenceOf(stuck as DynamoDBRecord),
      endSequenceNumber: sequenceOf(a4 as DynamoDBRecord),
      batchSize: 3,
    });

    // The shard moves on past the reported range.
    await cloud.clients.doc.send(
      new PutCommand({
        TableName: cloud.names.tables.futures,
        Item: { request_id: 'later', live: 'default#0' },
      }),
    );
    await waitFor('a record after the reported range', () =>
      invocations.some((invocation) => invocation.keys.includes('later')),
    );
    expect(invocations.filter((invocation) => invocation.keys.includes('later'))).toHaveLength(1);
  });

  it('without bisection, retries the whole batch and reports it whole', async () => {
    const keys = ['b0', 'poison', 'b2'];
    await deliverThrough(keys, false, async (event) => {
      if (event.Records.some((record) => keyOf(record) === 'poison')) throw new Error('poison record');
      return { batchItemFailures: [] };
    });

    const report = await theOnlyFailureReport();

    expect(invocations.map((invocation) => invocation.keys)).toEqual(
      Array.from({ length: 1 + RETRY_ATTEMPTS }, () => keys),
    );
    const records = invocations[0]?.records ?? [];
    expect(report.DDBStreamBatchInfo).toMatchObject({
      startSequenceNumber: sequenceOf(records[0] as DynamoDBRecord),
      endSequenceNumber: sequenceOf(records[2] as DynamoDBRecord),
      batchSize: 3,
    });
    expect(report.responseContext.functionError).toBe('Unhandled');
  });
});
