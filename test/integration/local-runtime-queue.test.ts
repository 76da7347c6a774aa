import {
  GetQueueAttributesCommand,
  SendMessageBatchCommand,
  SetQueueAttributesCommand,
} from '@aws-sdk/client-sqs';
import type { SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type LocalRuntime, startLocalRuntime } from '../../local/runtime/lambda-runtime.js';
import { type Topology, topology } from '../../shared/base/topology.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { waitFor } from '../support/wait.js';

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
});
