import {
  GetQueueAttributesCommand,
  SendMessageBatchCommand,
  SetQueueAttributesCommand,
} from '@aws-sdk/client-sqs';
import type { SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { initializeStackOf } from '../../local/client-middleware.js';
import { type LocalRuntime, startLocalRuntime } from '../../local/runtime.js';
import { type Topology, topology } from '../../shared/topology.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { pause, waitFor } from '../support/wait.js';

// The declared worker trigger takes one message per batch and 10-minute visibility; to see partial
// batch failures within a test, this copy takes batches of 10 from one poller (the messages are
// queued before it starts, so one receive returns both), and the test queue gets a short visibility
// timeout, still long enough for a batch to be handled and deleted on a loaded machine.
const VISIBILITY_SECONDS = 3;

const batchingTopology: Topology = {
  ...topology,
  functions: {
    ...topology.functions,
    worker: {
      ...topology.functions.worker,
      triggers: [
        {
          kind: 'queue',
          queue: 'work',
          batchSize: 10,
          maxBatchingWindowSeconds: 0,
          maxConcurrency: 1,
          reportBatchItemFailures: true,
        },
      ],
    },
  },
};

describe('local runtime: SQS trigger', () => {
  let cloud: TestCloud;
  let runtime: LocalRuntime | undefined;
  let deliveries: SQSRecord[] = [];

  beforeAll(async () => {
    cloud = await setupTestCloud();
    await cloud.clients.sqs.send(
      new SetQueueAttributesCommand({
        QueueUrl: cloud.names.queueUrls.work,
        Attributes: { VisibilityTimeout: String(VISIBILITY_SECONDS) },
      }),
    );
  });
  afterEach(async () => {
    await runtime?.stop();
    runtime = undefined;
    deliveries = [];
  });

  const send = (bodies: string[]) =>
    cloud.clients.sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: cloud.names.queueUrls.work,
        Entries: bodies.map((body, index) => ({
          Id: String(index),
          MessageBody: body,
          MessageAttributes: { kind: { DataType: 'String', StringValue: 'manifest' } },
        })),
      }),
    );
  const deliveriesOf = (body: string) => deliveries.filter((record) => record.body === body);
  const queueDepth = async () => {
    const { Attributes } = await cloud.clients.sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: cloud.names.queueUrls.work, AttributeNames: ['All'] }),
    );
    return (
      Number(Attributes?.ApproximateNumberOfMessages) +
      Number(Attributes?.ApproximateNumberOfMessagesNotVisible)
    );
  };

  it('redelivers only the message reported in batchItemFailures and deletes the rest', async () => {
    await send(['fail-once', 'succeed']);
    let failed = false;
    const worker = async (event: SQSEvent): Promise<SQSBatchResponse> => {
      deliveries.push(...event.Records);
      const victim = event.Records.find((record) => record.body === 'fail-once');
      if (victim === undefined || failed) return { batchItemFailures: [] };
      failed = true;
      return { batchItemFailures: [{ itemIdentifier: victim.messageId }] };
    };
    runtime = await startLocalRuntime({
      topology: batchingTopology,
      env: cloud.env,
      functions: ['worker'],
      handlers: { worker },
    });

    const again = await waitFor('fail-once redelivered', () => deliveriesOf('fail-once')[1], 15_000);
    const [first] = deliveriesOf('fail-once');
    expect(first?.attributes.ApproximateReceiveCount).toBe('1');
    expect(again.attributes.ApproximateReceiveCount).toBe('2');
    expect(again.messageId).toBe(first?.messageId);
    expect(deliveriesOf('succeed')).toHaveLength(1);
    await waitFor('the queue to drain', async () => (await queueDepth()) === 0);
    expect(first).toMatchObject({
      eventSource: 'aws:sqs',
      eventSourceARN: cloud.names.queueArns.work,
      awsRegion: 'us-east-1',
      messageAttributes: { kind: { dataType: 'String', stringValue: 'manifest' } },
    });
    expect(first?.receiptHandle).toEqual(expect.any(String));
    expect(first?.attributes.SentTimestamp).toMatch(/^\d+$/);
  });

  it('treats a thrown handler as a failed batch: every message comes back', async () => {
    await send(['crash-a', 'crash-b']);
    let calls = 0;
    const worker = async (event: SQSEvent): Promise<SQSBatchResponse> => {
      deliveries.push(...event.Records);
      calls += 1;
      if (calls === 1) throw new Error('worker crashed');
      return { batchItemFailures: [] };
    };
    runtime = await startLocalRuntime({
      topology: batchingTopology,
      env: cloud.env,
      functions: ['worker'],
      handlers: { worker },
    });
    await waitFor(
      'both redelivered',
      () => deliveriesOf('crash-a').length >= 2 && deliveriesOf('crash-b').length >= 2,
      15_000,
    );
    expect(deliveriesOf('crash-b')[1]?.attributes.ApproximateReceiveCount).toBe('2');
    await waitFor('the queue to drain', async () => (await queueDepth()) === 0);
  });

  it('runs the declared batches side by side from one receiver: no empty long poll per idle slot', async () => {
    const declared = topology.functions.worker.triggers[0];
    if (declared?.kind !== 'queue') throw new Error('the worker has no queue trigger');
    let receives = 0;
    let running = 0;
    let mostAtOnce = 0;
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    const worker = async (event: SQSEvent): Promise<SQSBatchResponse> => {
      deliveries.push(...event.Records);
      running += 1;
      mostAtOnce = Math.max(mostAtOnce, running);
      await released;
      running -= 1;
      return { batchItemFailures: [] };
    };
    runtime = await startLocalRuntime({
      topology,
      env: cloud.env,
      functions: ['worker'],
      handlers: { worker },
      onSdkClient: (client, user) => {
        if (user !== 'triggers') return;
        initializeStackOf(client).add(
          (next, context) => async (args) => {
            if (context.commandName === 'ReceiveMessageCommand') receives += 1;
            return next(args);
          },
          { step: 'initialize', priority: 'high', name: 'countReceives', override: true },
        );
      },
    });
    // Idle: one long poll of a second at a time, not one per concurrency slot.
    await pause(2_500);
    expect(receives).toBeLessThanOrEqual(4);

    // Every slot fills (batches of the declared size, all running at once) ...
    const bodies = Array.from({ length: declared.maxConcurrency }, (_, i) => `slot-${i}`);
    await send(bodies);
    await waitFor('every slot busy', () => running === declared.maxConcurrency, 10_000);
    expect(deliveries.map((record) => record.body).sort()).toEqual([...bodies].sort());
    // ... and while they run, nothing more is received (no message waits received but unhandled).
    const whileFull = receives;
    await send(['after']);
    await pause(1_000);
    expect(receives).toBe(whileFull);
    expect(deliveriesOf('after')).toHaveLength(0);
    release();
    await waitFor('after delivered', () => deliveriesOf('after').length === 1, 10_000);
    await waitFor('the queue to drain', async () => (await queueDepth()) === 0);
    expect(mostAtOnce).toBe(declared.maxConcurrency);
    expect(declared.batchSize).toBe(1);
  });
});
