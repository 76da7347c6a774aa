import { PutCommand } from '@aws-sdk/lib-dynamodb';
import type { DynamoDBRecord, DynamoDBStreamEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalRuntime } from '../../local/runtime.js';
import { awsClients } from '../../shared/aws/clients.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { startCloudRuntime } from '../support/runtime.js';
import { pause, waitFor } from '../support/wait.js';

/**
 * The stream triggers' wake-ups (local/write-wakes.ts): with an idle poll of a minute, a write made
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
