import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DescribeTableCommand, DescribeTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import { DeleteObjectCommand, GetObjectCommand, NoSuchKey, PutObjectCommand } from '@aws-sdk/client-s3';
import { GetQueueAttributesCommand, ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { GetCommand, PutCommand, QueryCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import { startLocalCloud } from '../../local/cloud/cloud.js';
import { provisionResources } from '../../local/cloud/resources.js';
import { awsClients } from '../../shared/aws/clients.js';
import { config } from '../../shared/base/config.js';
import {
  BY_OWNER_INDEX,
  LIVE_INDEX,
  LIVE_PROJECTION,
  type Topology,
  topology,
} from '../../shared/base/topology.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';

describe('local cloud resources', () => {
  let cloud: TestCloud;
  beforeAll(async () => {
    cloud = await setupTestCloud();
  });

  it('creates tables with the declared keys, GSI projection, stream and TTL', async () => {
    const { Table } = await cloud.clients.dynamo.send(
      new DescribeTableCommand({ TableName: cloud.names.tables.futures }),
    );
    expect(Table?.KeySchema).toEqual([{ AttributeName: 'request_id', KeyType: 'HASH' }]);
    expect(Table?.StreamSpecification).toEqual({ StreamEnabled: true, StreamViewType: 'NEW_IMAGE' });
    const live = Table?.GlobalSecondaryIndexes?.find((index) => index.IndexName === LIVE_INDEX);
    expect(live?.Projection?.ProjectionType).toBe('INCLUDE');
    expect([...(live?.Projection?.NonKeyAttributes ?? [])].sort()).toEqual([...LIVE_PROJECTION].sort());
    const ttl = await cloud.clients.dynamo.send(
      new DescribeTimeToLiveCommand({ TableName: cloud.names.tables.registry }),
    );
    expect(ttl.TimeToLiveDescription?.AttributeName).toBe('ttl');
  });

  it('adds the indexes a kept table lacks: a data dir from before the listing indexes, restarted', async () => {
    // A cloud of its own in file mode, as `npm start` keeps one: stopped and started again on the folder.
    const dataDir = mkdtempSync(join(tmpdir(), 'tinker-indexes-'));
    const withoutIndexes: Topology = {
      ...topology,
      tables: {
        ...topology.tables,
        registry: { ...topology.tables.registry, indexes: [] },
        models: { ...topology.tables.models, indexes: [] },
      },
    };
    const record = {
      pk: 'session#s1',
      owner_key: 'session#t1',
      list_sort: '0000000000001#s1',
      session_id: 's1',
    };
    const prefix = 'kept';
    let local = await startLocalCloud({ dataDir });
    try {
      const old = await provisionResources(withoutIndexes, prefix, localAwsClients(local.endpoints));
      await localAwsClients(local.endpoints).doc.send(
        new PutCommand({ TableName: old.tables.registry, Item: record }),
      );
      await local.stop();
      local = await startLocalCloud({ dataDir });
      const clients = localAwsClients(local.endpoints);
      const kept = await provisionResources(topology, prefix, clients);
      for (const id of ['registry', 'models'] as const) {
        const { Table } = await clients.dynamo.send(new DescribeTableCommand({ TableName: kept.tables[id] }));
        expect(
          Table?.GlobalSecondaryIndexes?.map((index) => [index.IndexName, index.IndexStatus]).sort(),
        ).toEqual(topology.tables[id].indexes.map((index) => [index.name, 'ACTIVE']).sort());
      }
      // Built from the items already there, and a start on a table that has them changes nothing.
      await provisionResources(topology, prefix, clients);
      const page = await clients.doc.send(
        new QueryCommand({
          TableName: kept.tables.registry,
          IndexName: BY_OWNER_INDEX,
          KeyConditionExpression: 'owner_key = :o',
          ExpressionAttributeValues: { ':o': 'session#t1' },
        }),
      );
      expect(page.Items).toEqual([record]);
    } finally {
      await local.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 180_000);

  it('round-trips items and serves the sparse live index with only its projection', async () => {
    const table = cloud.names.tables.futures;
    const live = `${topology.settings.POOL}#0`;
    await cloud.clients.doc.send(
      new PutCommand({
        TableName: table,
        Item: { request_id: 'r1', live, model_id: 'm1', seq: 1, status: 'pending', payload_key: 'p/r1' },
      }),
    );
    await cloud.clients.doc.send(
      new PutCommand({
        TableName: table,
        Item: { request_id: 'r2', model_id: 'm1', seq: 2, status: 'completed' },
      }),
    );
    const item = await cloud.clients.doc.send(
      new GetCommand({ TableName: table, Key: { request_id: 'r1' } }),
    );
    expect(item.Item?.payload_key).toBe('p/r1');

    const page = await cloud.clients.doc.send(
      new QueryCommand({
        TableName: table,
        IndexName: LIVE_INDEX,
        KeyConditionExpression: 'live = :live',
        ExpressionAttributeValues: { ':live': live },
      }),
    );
    // r2 has no `live` attribute, so it is absent; payload_key is not projected.
    expect(page.Items).toEqual([{ request_id: 'r1', live, model_id: 'm1', seq: 1, status: 'pending' }]);
  });

  it('stores, reads and deletes binary objects', async () => {
    const bytes = Uint8Array.from({ length: 300 }, (_, i) => (i * 7) % 256);
    const Bucket = cloud.names.bucket;
    await cloud.clients.s3.send(new PutObjectCommand({ Bucket, Key: 'payloads/a/b.bin', Body: bytes }));
    const got = await cloud.clients.s3.send(new GetObjectCommand({ Bucket, Key: 'payloads/a/b.bin' }));
    expect(Buffer.from(await got.Body!.transformToByteArray())).toEqual(Buffer.from(bytes));
    await cloud.clients.s3.send(new DeleteObjectCommand({ Bucket, Key: 'payloads/a/b.bin' }));
    await expect(
      cloud.clients.s3.send(new GetObjectCommand({ Bucket, Key: 'payloads/a/b.bin' })),
    ).rejects.toBeInstanceOf(NoSuchKey);
  });

  it('creates the work queue with its visibility timeout and a redrive policy to the DLQ', async () => {
    const { Attributes } = await cloud.clients.sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: cloud.names.queueUrls.work, AttributeNames: ['All'] }),
    );
    expect(Attributes?.VisibilityTimeout).toBe(String(topology.queues.work.visibilityTimeoutSeconds));
    expect(JSON.parse(Attributes?.RedrivePolicy ?? '{}')).toEqual({
      deadLetterTargetArn: cloud.names.queueArns.workDlq,
      maxReceiveCount: topology.queues.work.deadLetter?.maxReceiveCount,
    });
  });

  it('applyEnv points the shared config and SDK clients at this cloud', async () => {
    cloud.applyEnv();
    expect(config().table('futures')).toBe(cloud.names.tables.futures);
    expect(config().workQueueUrl).toBe(cloud.names.queueUrls.work);
    const { sqs } = awsClients();
    await sqs.send(new SendMessageCommand({ QueueUrl: config().workQueueUrl, MessageBody: 'via env' }));
    const received = await cloud.clients.sqs.send(
      new ReceiveMessageCommand({ QueueUrl: cloud.names.queueUrls.work, WaitTimeSeconds: 1 }),
    );
    expect(received.Messages?.map((m) => m.Body)).toEqual(['via env']);
  });
});
