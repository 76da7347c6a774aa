import { CreateTableCommand, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { BatchWriteCommand, DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { type DynamoDbLocal, startDynamoDbLocal } from '../local/cloud/dynamodb-local.js';
import { LOCAL_CREDENTIALS, LOCAL_REGION } from '../local/cloud/resources.js';
import { Limiter } from '../shared/aws/limiter.js';
import { type BenchResult, machine, runCase, type Subject } from './harness.js';

/**
 * `npm run bench -- local-cloud [--quick]`: the local cloud's own speed where it shapes every other
 * measurement. DynamoDB Local keeps all stream records in one SQLite table keyed by sequence number
 * alone and finds a stream's records by scanning it, so a write to a streamed table slows with the
 * records that earlier tables' streams hold (kept 24 hours, deleted tables' too): a test run, a
 * benchmark with several scenes, `npm start` after a while. The loopback launcher adds indexes by
 * stream and by shard (local/cloud/dynamodb-loopback/LoopbackDynamoDbLocal.java).
 *
 * Case `streamed-writes-after-<N>`: on a DynamoDB Local whose first table's stream already holds N
 * records, each repeat creates a fresh streamed table and writes `ROWS` items into it (BatchWriteItem,
 * 25 a call, 8 calls at once, as the scheduler bench seeds). Ours: DynamoDB Local as the project
 * starts it; baseline (`unindexed`): the same, started without the indexes. Each side has its own
 * DynamoDB Local, so both see the same records before each repeat.
 */
const ROWS = 2_000;
const BATCH = 25;
const CONCURRENCY = 8;

interface Side {
  readonly local: DynamoDbLocal;
  readonly doc: DynamoDBDocumentClient;
  readonly dynamo: DynamoDBClient;
  tables: number;
  records: number;
}

async function startSide(streamRecordIndexes: boolean): Promise<Side> {
  const local = await startDynamoDbLocal({ streamRecordIndexes });
  const dynamo = new DynamoDBClient({
    region: LOCAL_REGION,
    credentials: LOCAL_CREDENTIALS,
    endpoint: local.endpoint,
  });
  return { local, dynamo, doc: DynamoDBDocumentClient.from(dynamo), tables: 0, records: 0 };
}

/** A new streamed table (as the topology's futures table: NEW_IMAGE) filled with `rows` items. */
async function writeNewTable(side: Side, rows: number): Promise<{ calls: number }> {
  side.tables += 1;
  const table = `streamed-${side.tables}`;
  await side.dynamo.send(
    new CreateTableCommand({
      TableName: table,
      BillingMode: 'PAY_PER_REQUEST',
      KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
      AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
      StreamSpecification: { StreamEnabled: true, StreamViewType: 'NEW_IMAGE' },
    }),
  );
  const limiter = new Limiter(CONCURRENCY);
  const writes: Promise<unknown>[] = [];
  for (let start = 0; start < rows; start += BATCH) {
    const items = Array.from({ length: Math.min(BATCH, rows - start) }, (_, offset) => ({
      PutRequest: { Item: { id: `${table}-${start + offset}`, model: `m${(start + offset) % 999}`, seq: 2 } },
    }));
    writes.push(
      limiter.run(() => side.doc.send(new BatchWriteCommand({ RequestItems: { [table]: items } }))),
    );
  }
  await Promise.all(writes);
  side.records += rows;
  return { calls: writes.length };
}

function measured(side: Side): Subject {
  return async () => {
    const before = side.records;
    const { calls } = await writeNewTable(side, ROWS);
    return { rows_written: ROWS, dynamodb_calls: calls, stream_records_before: before };
  };
}

export async function run(options: { quick: boolean }): Promise<BenchResult> {
  const prior = options.quick ? 5_000 : 10_000;
  const [ours, unindexed] = await Promise.all([startSide(true), startSide(false)]);
  try {
    if (ours.local.streamRecordIndexes.length === 0)
      throw new Error('DynamoDB Local started without its indexes');
    // The earlier records: one table's stream, written before anything is timed.
    await writeNewTable(ours, prior);
    await writeNewTable(unindexed, prior);
    const result = await runCase({
      name: `streamed-writes-after-${prior}`,
      params: {
        prior_stream_records: prior,
        rows_per_repeat: ROWS,
        measured: 'a fresh streamed table filled with BatchWriteItem after earlier streams hold records',
        compared_with: 'baseline (unindexed): the same DynamoDB Local without the stream-record indexes',
      },
      ours: measured(ours),
      baselines: { unindexed: measured(unindexed) },
      repeats: options.quick ? 1 : 3,
    });
    return { name: 'local-cloud', machine: machine(), quick: options.quick, cases: [result] };
  } finally {
    for (const side of [ours, unindexed]) side.dynamo.destroy();
    await Promise.all([ours.local.stop(), unindexed.local.stop()]);
  }
}
