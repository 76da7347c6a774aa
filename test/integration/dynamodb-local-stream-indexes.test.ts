import { CreateTableCommand, DescribeTableCommand, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  DescribeStreamCommand,
  DynamoDBStreamsClient,
  GetRecordsCommand,
  GetShardIteratorCommand,
} from '@aws-sdk/client-dynamodb-streams';
import { DeleteCommand, DynamoDBDocumentClient, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DynamoDbLocal, startDynamoDbLocal } from '../../local/cloud/dynamodb-local.js';
import { LOCAL_CREDENTIALS, LOCAL_REGION } from '../../local/cloud/resources.js';

/**
 * The launcher indexes DynamoDB Local's stream-record table (local/cloud/dynamodb-loopback), which its
 * own schema keys by sequence number alone. The indexes are for speed (measured by `npm run bench
 * -- local-cloud`); here: that they are there unless asked not to be, and that a stream reads the
 * same records, in the same order, with them as without them.
 */
describe('DynamoDB Local stream-record indexes', () => {
  let indexed: DynamoDbLocal;
  let plain: DynamoDbLocal;
  beforeAll(async () => {
    [indexed, plain] = await Promise.all([
      startDynamoDbLocal(),
      startDynamoDbLocal({ streamRecordIndexes: false }),
    ]);
  });
  afterAll(async () => {
    await Promise.all([indexed?.stop(), plain?.stop()]);
  });

  it('are added by default, by stream and by shard, and left out when asked', () => {
    expect(indexed.streamRecordIndexes).toEqual(['us_by_shard', 'us_by_stream']);
    expect(plain.streamRecordIndexes).toEqual([]);
  });

  it('change no stream: the same records in the same order, across two streamed tables', async () => {
    const [withIndexes, without] = await Promise.all([streamOfWrites(indexed), streamOfWrites(plain)]);
    // Two tables, a few inserts, modifies and removes each: enough to see order and kinds.
    expect(withIndexes.length).toBe(2 * 12);
    expect(withIndexes).toEqual(without);
  });
});

/** Writes the same items to two streamed tables and reads each table's stream from its start. */
async function streamOfWrites(local: DynamoDbLocal): Promise<string[]> {
  const common = { region: LOCAL_REGION, credentials: LOCAL_CREDENTIALS, endpoint: local.endpoint };
  const dynamo = new DynamoDBClient(common);
  const doc = DynamoDBDocumentClient.from(dynamo);
  const streams = new DynamoDBStreamsClient(common);
  const seen: string[] = [];
  for (const table of ['first', 'second']) {
    await dynamo.send(
      new CreateTableCommand({
        TableName: table,
        BillingMode: 'PAY_PER_REQUEST',
        KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
        AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
        StreamSpecification: { StreamEnabled: true, StreamViewType: 'NEW_AND_OLD_IMAGES' },
      }),
    );
    for (let index = 0; index < 6; index++) {
      await doc.send(new PutCommand({ TableName: table, Item: { id: `item-${index}`, round: 0 } }));
    }
    for (let index = 0; index < 3; index++) {
      await doc.send(
        new UpdateCommand({
          TableName: table,
          Key: { id: `item-${index}` },
          UpdateExpression: 'SET round = :one',
          ExpressionAttributeValues: { ':one': 1 },
        }),
      );
      await doc.send(new DeleteCommand({ TableName: table, Key: { id: `item-${5 - index}` } }));
    }
    const { Table } = await dynamo.send(new DescribeTableCommand({ TableName: table }));
    const { StreamDescription } = await streams.send(
      new DescribeStreamCommand({ StreamArn: Table?.LatestStreamArn }),
    );
    for (const shard of StreamDescription?.Shards ?? []) {
      const { ShardIterator } = await streams.send(
        new GetShardIteratorCommand({
          StreamArn: Table?.LatestStreamArn,
          ShardId: shard.ShardId,
          ShardIteratorType: 'TRIM_HORIZON',
        }),
      );
      const { Records } = await streams.send(new GetRecordsCommand({ ShardIterator, Limit: 1000 }));
      for (const record of Records ?? []) {
        const image = record.dynamodb?.NewImage ?? record.dynamodb?.OldImage;
        seen.push(`${table} ${record.eventName} ${record.dynamodb?.Keys?.id?.S} ${image?.round?.N}`);
      }
    }
  }
  dynamo.destroy();
  streams.destroy();
  return seen;
}
