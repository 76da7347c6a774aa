import { BatchWriteCommand, DeleteCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { DynamoDBRecord, DynamoDBStreamEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initializeStackOf } from '../../local/cloud/client-middleware.js';
import type { LocalRuntime, LocalRuntimeOptions } from '../../local/runtime/lambda-runtime.js';
import { awsClients } from '../../shared/aws/clients.js';
import { registryKey } from '../../shared/base/registry-keys.js';
import { type Trigger, topology } from '../../shared/base/topology.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { startCloudRuntime } from '../support/runtime.js';
import { pause, waitFor } from '../support/wait.js';

type StreamTrigger = Extract<Trigger, { kind: 'stream' }>;

/**
 * The stream triggers' wake-ups (local/runtime/write-wakes.ts): with an idle poll of a minute, a write made
 * through the handlers' clients is delivered at once, and one made through any other client waits
 * for the poll, so only the wake-up can have delivered it.
 */
describe('local runtime: writes wake the stream triggers', () => {
  let cloud: TestCloud;
  let runtime: LocalRuntime;
  const delivered: DynamoDBRecord[] = [];
  const keys = () => delivered.map((record) => record.dynamodb?.Keys?.request_id?.S);

  beforeAll(async () => {
    cloud = await setupTestCloud();
    runtime = await startCloudRuntime(cloud, {
      functions: ['scheduler'],
      streamPollIntervalMs: 60_000,
      handlers: {
        scheduler: async (event: DynamoDBStreamEvent) => {
          delivered.push(...event.Records);
          return { batchItemFailures: [] };
        },
      },
    });
  });
  afterAll(async () => {
    await runtime?.stop();
  });

  const live = (requestId: string) => ({ request_id: requestId, live: 'default#0', status: 'pending' });

  it('delivers a handler-client write at once and leaves another client’s write to the idle poll', async () => {
    await cloud.clients.doc.send(
      new PutCommand({ TableName: cloud.names.tables.futures, Item: live('quiet-1') }),
    );
    await pause(800);
    expect(keys()).toEqual([]);

    // awsClients() is what the handlers use; the runtime has hooked its own writes into the triggers.
    await awsClients().doc.send(
      new PutCommand({ TableName: cloud.names.tables.futures, Item: live('woken-1') }),
    );
    await waitFor('woken-1 delivered', () => keys().includes('woken-1'), 5_000);
    // The earlier write shares the shard, so it arrives with the woken read, in order.
    expect(keys()).toEqual(['quiet-1', 'woken-1']);
  });

  it('a write to a table with no trigger of this runtime wakes nothing', async () => {
    await awsClients().doc.send(
      new PutCommand({ TableName: cloud.names.tables.registry, Item: { pk: 'idem#not-watched' } }),
    );
    await cloud.clients.doc.send(
      new PutCommand({ TableName: cloud.names.tables.futures, Item: live('quiet-2') }),
    );
    await pause(800);
    expect(keys()).not.toContain('quiet-2');
  });
});

/**
 * How many reads a woken shard costs (stream-trigger.ts): a page short of the batch size held
 * everything there was, so the trigger sleeps after it instead of reading an empty page next; a
 * full page is read on at once. The idle poll is a minute, so every read counted here was a wake's
 * or a full page's.
 */
/** For `onSdkClient`: calls `counted` for each GetRecords the runtime's triggers send. */
function countGetRecords(counted: () => void): NonNullable<LocalRuntimeOptions['onSdkClient']> {
  return (client, user) => {
    if (user !== 'triggers') return;
    initializeStackOf(client).add(
      (next, context) => async (args) => {
        if (context.commandName === 'GetRecordsCommand') counted();
        return next(args);
      },
      { step: 'initialize', priority: 'high', name: 'countGetRecords', override: true },
    );
  };
}

describe('local runtime: a woken stream read costs one GetRecords unless its page was full', () => {
  const BATCH_SIZE = 10;
  let cloud: TestCloud;
  let runtime: LocalRuntime;
  const batches: DynamoDBRecord[][] = [];
  let reads = 0;

  const futuresTrigger = (): StreamTrigger => {
    const declared = topology.functions.scheduler.triggers.find(
      (trigger): trigger is StreamTrigger => trigger.kind === 'stream' && trigger.table === 'futures',
    );
    if (declared === undefined) throw new Error('the scheduler has no futures stream trigger');
    return { ...declared, batchSize: BATCH_SIZE, parallelizationFactor: 1 };
  };
  const keys = () => batches.flat().map((record) => record.dynamodb?.Keys?.request_id?.S);
  const live = (requestId: string) => ({ request_id: requestId, live: 'default#0', status: 'pending' });
  const put = (requestId: string) =>
    awsClients().doc.send(new PutCommand({ TableName: cloud.names.tables.futures, Item: live(requestId) }));

  beforeAll(async () => {
    cloud = await setupTestCloud();
    runtime = await startCloudRuntime(cloud, {
      topology: {
        ...topology,
        functions: {
          ...topology.functions,
          scheduler: { ...topology.functions.scheduler, triggers: [futuresTrigger()] },
        },
      },
      functions: ['scheduler'],
      streamPollIntervalMs: 60_000,
      handlers: {
        scheduler: async (event: DynamoDBStreamEvent) => {
          batches.push(event.Records);
          return { batchItemFailures: [] };
        },
      },
      onSdkClient: countGetRecords(() => {
        reads += 1;
      }),
    });
    // DynamoDB Local answers the first read after a shard's first record with a trimmed iterator
    // (stream-trigger.ts): pay that before counting.
    await put('warm-up');
    await waitFor('warm-up delivered', () => keys().includes('warm-up'), 5_000);
    await pause(300);
  });
  afterAll(async () => {
    await runtime?.stop();
  });

  it('reads once per write when each write is delivered before the next', async () => {
    reads = 0;
    for (let i = 0; i < 5; i++) {
      await put(`one-${i}`);
      await waitFor(`one-${i} delivered`, () => keys().includes(`one-${i}`), 5_000);
      // Room for the empty read that used to follow every delivered page.
      await pause(300);
    }
    expect(reads).toBe(5);
  });

  it('reads a burst of 25 records in three pages (two full ones) and no fourth', async () => {
    batches.length = 0;
    reads = 0;
    const ids = Array.from({ length: 25 }, (_, i) => `burst-${String(i).padStart(2, '0')}`);
    await awsClients().doc.send(
      new BatchWriteCommand({
        RequestItems: {
          [cloud.names.tables.futures]: ids.map((id) => ({ PutRequest: { Item: live(id) } })),
        },
      }),
    );
    await waitFor('the burst delivered', () => keys().length === ids.length, 5_000);
    await pause(300);
    expect([...keys()].sort()).toEqual(ids);
    expect(batches.map((batch) => batch.length)).toEqual([10, 10, 5]);
    // In stream order across the pages.
    const sequences = batches.flat().map((record) => BigInt(record.dynamodb?.SequenceNumber ?? '0'));
    expect(sequences).toEqual([...sequences].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    expect(reads).toBe(3);
  });
});

/**
 * A write wakes only the triggers whose filters a record of it could pass (write-wakes.ts): the
 * registry's many puts and updates (API key use, quotas, poll slots, the tick lock) cost its
 * drain-lift trigger no read, and deleting the drain record still wakes it at once.
 */
describe('local runtime: registry writes wake the drain trigger only for a drain record delete', () => {
  let cloud: TestCloud;
  let runtime: LocalRuntime;
  const delivered: DynamoDBRecord[] = [];
  let reads = 0;
  const drainKey = registryKey.drain(topology.settings.POOL ?? 'default');

  beforeAll(async () => {
    cloud = await setupTestCloud();
    runtime = await startCloudRuntime(cloud, {
      functions: ['scheduler'],
      streamPollIntervalMs: 60_000,
      handlers: {
        scheduler: async (event: DynamoDBStreamEvent) => {
          delivered.push(...event.Records);
          return { batchItemFailures: [] };
        },
      },
      onSdkClient: countGetRecords(() => {
        reads += 1;
      }),
    });
  });
  afterAll(async () => {
    await runtime?.stop();
  });

  it('reads nothing for puts and updates, and delivers the drain delete at once', async () => {
    const table = cloud.names.tables.registry;
    await pause(300);
    reads = 0;
    for (let i = 0; i < 5; i++) {
      await awsClients().doc.send(new PutCommand({ TableName: table, Item: { pk: `quota#t${i}`, n: i } }));
      await awsClients().doc.send(
        new UpdateCommand({
          TableName: table,
          Key: { pk: `quota#t${i}` },
          UpdateExpression: 'ADD n :one',
          ExpressionAttributeValues: { ':one': 1 },
        }),
      );
    }
    await awsClients().doc.send(new PutCommand({ TableName: table, Item: { pk: drainKey } }));
    await pause(500);
    expect(reads).toBe(0);

    await awsClients().doc.send(new DeleteCommand({ TableName: table, Key: { pk: drainKey } }));
    await waitFor('the drain delete delivered', () => delivered.length > 0, 5_000);
    expect(delivered.map((record) => [record.eventName, record.dynamodb?.Keys?.pk?.S])).toEqual([
      ['REMOVE', drainKey],
    ]);
  });
});
