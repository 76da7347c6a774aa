import { PutItemCommand } from '@aws-sdk/client-dynamodb';
import { PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { DynamoDBBatchResponse, DynamoDBRecord, DynamoDBStreamEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalRuntime } from '../../local/runtime/lambda-runtime.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { startCloudRuntime } from '../support/runtime.js';
import { pause, waitFor } from '../support/wait.js';

/** The scheduler's stream triggers, with a fake handler that records batches and can fail records. */
describe('local runtime: DynamoDB stream triggers', () => {
  let cloud: TestCloud;
  let runtime: LocalRuntime;
  const batches: DynamoDBRecord[][] = [];
  // Keys whose first delivery the fake reports as a batch item failure, or makes throw.
  const failOnce = new Set<string>();
  const throwOnce = new Set<string>();

  const keyOf = (record: DynamoDBRecord): string =>
    record.dynamodb?.Keys?.request_id?.S ?? record.dynamodb?.Keys?.model_id?.S ?? '?';
  const delivered = (key: string): DynamoDBRecord[] =>
    batches.flat().filter((record) => keyOf(record) === key);

  async function scheduler(event: DynamoDBStreamEvent): Promise<DynamoDBBatchResponse> {
    batches.push(event.Records);
    for (const record of event.Records) {
      if (throwOnce.delete(keyOf(record))) throw new Error('handler crashed');
    }
    const failures = event.Records.filter((record) => failOnce.delete(keyOf(record)));
    return {
      batchItemFailures: failures.map((record) => ({
        itemIdentifier: record.dynamodb?.SequenceNumber ?? '',
      })),
    };
  }

  beforeAll(async () => {
    cloud = await setupTestCloud();
    runtime = await startCloudRuntime(cloud, {
      functions: ['scheduler'],
      handlers: { scheduler },
    });
  });
  afterAll(async () => {
    await runtime?.stop();
  });

  const putFuture = (item: Record<string, unknown>) =>
    cloud.clients.doc.send(new PutCommand({ TableName: cloud.names.tables.futures, Item: item }));

  it('delivers a live row as Lambda does, and filters out a row without a live key', async () => {
    await putFuture({ request_id: 'terminal-1', status: 'completed' });
    await putFuture({ request_id: 'live-1', live: 'default#0', status: 'pending', seq: 1 });
    const [record] = await waitFor(
      'live-1 delivered',
      () => delivered('live-1').length > 0 && delivered('live-1'),
    );
    expect(record).toMatchObject({
      eventName: 'INSERT',
      eventSource: 'aws:dynamodb',
      eventSourceARN: cloud.names.streamArns.futures,
      awsRegion: 'us-east-1',
      dynamodb: {
        Keys: { request_id: { S: 'live-1' } },
        NewImage: {
          request_id: { S: 'live-1' },
          live: { S: 'default#0' },
          status: { S: 'pending' },
          seq: { N: '1' },
        },
        StreamViewType: 'NEW_IMAGE',
      },
    });
    expect(record?.eventID).toEqual(expect.any(String));
    expect(record?.dynamodb?.SequenceNumber).toEqual(expect.any(String));
    expect(record?.dynamodb?.ApproximateCreationDateTime).toEqual(expect.any(Number));
    // Same shard, written first: had it passed the filter, it would have arrived before live-1.
    expect(delivered('terminal-1')).toEqual([]);
  });

  it('passes binary attributes base64-encoded, as Lambda events carry them', async () => {
    await cloud.clients.dynamo.send(
      new PutItemCommand({
        TableName: cloud.names.tables.futures,
        Item: {
          request_id: { S: 'binary-1' },
          live: { S: 'default#1' },
          digest: { B: Uint8Array.of(0, 255, 7) },
        },
      }),
    );
    const [record] = await waitFor(
      'binary-1 delivered',
      () => delivered('binary-1').length > 0 && delivered('binary-1'),
    );
    expect(record?.dynamodb?.NewImage?.digest).toEqual({ B: Buffer.from([0, 255, 7]).toString('base64') });
  });

  it('on the models stream, delivers only the MODIFY that clears inflight, with both images', async () => {
    const models = cloud.names.tables.models;
    await cloud.clients.doc.send(new PutCommand({ TableName: models, Item: { model_id: 'm1', epoch: 1 } }));
    await cloud.clients.doc.send(
      new UpdateCommand({
        TableName: models,
        Key: { model_id: 'm1' },
        UpdateExpression: 'SET inflight = :token, epoch = :epoch',
        ExpressionAttributeValues: { ':token': 'm1#2', ':epoch': 2 },
      }),
    );
    await cloud.clients.doc.send(
      new UpdateCommand({ TableName: models, Key: { model_id: 'm1' }, UpdateExpression: 'REMOVE inflight' }),
    );
    const [record] = await waitFor('the commit of m1', () => delivered('m1').length > 0 && delivered('m1'));
    expect(record?.eventName).toBe('MODIFY');
    expect(record?.eventSourceARN).toBe(cloud.names.streamArns.models);
    expect(record?.dynamodb?.OldImage?.inflight).toEqual({ S: 'm1#2' });
    expect(record?.dynamodb?.NewImage).toEqual({ model_id: { S: 'm1' }, epoch: { N: '2' } });
    await pause(300);
    expect(delivered('m1')).toHaveLength(1);
  });

  it('retries from a reported batch item failure, then moves on', async () => {
    failOnce.add('retry-1');
    await putFuture({ request_id: 'retry-1', live: 'default#2' });
    const attempts = await waitFor(
      'retry-1 delivered twice',
      () => delivered('retry-1').length >= 2 && delivered('retry-1'),
    );
    expect(attempts[1]?.dynamodb?.SequenceNumber).toBe(attempts[0]?.dynamodb?.SequenceNumber);
    await putFuture({ request_id: 'after-retry', live: 'default#2' });
    await waitFor('after-retry delivered', () => delivered('after-retry').length > 0);
    expect(delivered('retry-1')).toHaveLength(2);
  });

  it('retries a batch whose handler throws, and keeps running', async () => {
    throwOnce.add('crash-1');
    await putFuture({ request_id: 'crash-1', live: 'default#3' });
    await waitFor('crash-1 delivered twice', () => delivered('crash-1').length >= 2);
    await putFuture({ request_id: 'after-crash', live: 'default#3' });
    await waitFor('after-crash delivered', () => delivered('after-crash').length > 0);
  });
});
