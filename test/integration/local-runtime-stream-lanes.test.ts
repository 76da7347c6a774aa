import { PutCommand } from '@aws-sdk/lib-dynamodb';
import type { DynamoDBBatchResponse, DynamoDBStreamEvent } from 'aws-lambda';
import { afterEach, describe, expect, it } from 'vitest';
import type { LocalRuntime } from '../../local/runtime/lambda-runtime.js';
import { laneOf } from '../../local/runtime/triggers/stream-trigger.js';
import { awsClients } from '../../shared/aws/clients.js';
import { type Topology, type Trigger, topology } from '../../shared/base/topology.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { startCloudRuntime } from '../support/runtime.js';
import { waitFor } from '../support/wait.js';

type StreamTrigger = Extract<Trigger, { kind: 'stream' }>;

/**
 * The local stream trigger with a ParallelizationFactor (local/runtime/triggers/stream-trigger.ts
 * `ShardLanes`), on a real local cloud: while one invocation is still running, a record of another
 * item is delivered to an invocation of its own, and records of one item are delivered in order.
 */
function topologyWith(parallelizationFactor: number): Topology {
  const declared = topology.functions.scheduler.triggers.find(
    (trigger): trigger is StreamTrigger => trigger.kind === 'stream' && trigger.table === 'futures',
  );
  if (declared === undefined) throw new Error('the scheduler has no futures stream trigger');
  return {
    ...topology,
    functions: {
      ...topology.functions,
      scheduler: {
        ...topology.functions.scheduler,
        triggers: [{ ...declared, parallelizationFactor }],
      },
    },
  };
}

describe('local runtime: stream batches of one shard side by side', () => {
  let cloud: TestCloud;
  let runtime: LocalRuntime | undefined;

  afterEach(async () => {
    await runtime?.stop();
    runtime = undefined;
  });

  const put = (requestId: string, version: number) =>
    awsClients().doc.send(
      new PutCommand({
        TableName: cloud.names.tables.futures,
        Item: { request_id: requestId, live: 'default#0', status: 'pending', version },
      }),
    );

  /** Starts the runtime with a handler that records each invocation and holds the ones `hold` names. */
  async function start(factor: number, hold: (keys: string[]) => boolean) {
    cloud = await setupTestCloud();
    const invocations: { keys: string[]; versions: number[]; ended: boolean }[] = [];
    let open = 0;
    let mostOpen = 0;
    let releaseHeld: () => void = () => {};
    const held = new Promise<void>((resolve) => (releaseHeld = resolve));
    runtime = await startCloudRuntime(cloud, {
      topology: topologyWith(factor),
      functions: ['scheduler'],
      streamLanes: true,
      handlers: {
        scheduler: async (event: DynamoDBStreamEvent): Promise<DynamoDBBatchResponse> => {
          const entry = {
            keys: event.Records.map((record) => record.dynamodb?.Keys?.request_id?.S ?? '?'),
            versions: event.Records.map((record) => Number(record.dynamodb?.NewImage?.version?.N)),
            ended: false,
          };
          invocations.push(entry);
          open += 1;
          mostOpen = Math.max(mostOpen, open);
          try {
            if (hold(entry.keys)) await held;
            return { batchItemFailures: [] };
          } finally {
            open -= 1;
            entry.ended = true;
          }
        },
      },
    });
    return { invocations, releaseHeld, mostOpen: () => mostOpen };
  }

  /** Two request ids that fall in different lanes of two. */
  function keysInTwoLanes(): [string, string] {
    const lane = (id: string) => laneOf({ dynamodb: { Keys: { request_id: { S: id } } } }, 2);
    const first = 'slow-0';
    for (let i = 0; ; i++) if (lane(`fast-${i}`) !== lane(first)) return [first, `fast-${i}`];
  }

  it('delivers another item’s record while an invocation is still running', async () => {
    const [slow, fast] = keysInTwoLanes();
    const t = await start(2, (keys) => keys.includes(slow));
    await put(slow, 1);
    await waitFor('the slow record delivered', () => t.invocations.some((i) => i.keys.includes(slow)));
    await put(fast, 1);
    await waitFor('the fast record delivered', () => t.invocations.some((i) => i.keys.includes(fast)), 5_000);
    // The slow invocation has not ended: the fast record did not wait behind it.
    expect(t.invocations.find((i) => i.keys.includes(slow))?.ended).toBe(false);
    expect(t.mostOpen()).toBe(2);
    t.releaseHeld();
  });

  it('with a factor of 1, the same record waits for the running invocation (as Lambda delivers a shard)', async () => {
    const [slow, fast] = keysInTwoLanes();
    const t = await start(1, (keys) => keys.includes(slow));
    await put(slow, 1);
    await waitFor('the slow record delivered', () => t.invocations.some((i) => i.keys.includes(slow)));
    await put(fast, 1);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(t.invocations.some((i) => i.keys.includes(fast))).toBe(false);
    t.releaseHeld();
    await waitFor('the fast record delivered', () => t.invocations.some((i) => i.keys.includes(fast)), 5_000);
    expect(t.mostOpen()).toBe(1);
  });

  it('records of one item are delivered in their stream order', async () => {
    const t = await start(2, () => false);
    const ids = ['a', 'b', 'c', 'd'];
    for (let version = 1; version <= 5; version++) {
      await Promise.all(ids.map((id) => put(id, version)));
    }
    const delivered = () => t.invocations.flatMap((i) => i.versions).length;
    await waitFor('every record delivered', () => delivered() === ids.length * 5, 10_000);
    for (const id of ids) {
      const versions = t.invocations.flatMap((i) =>
        i.keys.flatMap((key, at) => (key === id ? [i.versions[at]] : [])),
      );
      expect(versions, id).toEqual([1, 2, 3, 4, 5]);
    }
  });
});
