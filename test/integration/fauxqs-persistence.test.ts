import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import {
  CreateBucketCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
} from '@aws-sdk/client-s3';
import {
  CreateQueueCommand,
  DeleteMessageCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
} from '@aws-sdk/client-sqs';
import { afterAll, describe, expect, it } from 'vitest';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import { type Fauxqs, startFauxqsServer } from '../../local/cloud/fauxqs.js';

describe('persistent fauxqs stores (S3 objects, SQS messages)', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'tinker-fauxqs-'));
  let server: Fauxqs | undefined;
  afterAll(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Starts fauxqs on the folder and provisions as `resources.ts` does (create is a reuse). */
  async function startOn(): Promise<{ clients: ReturnType<typeof localAwsClients>; queueUrl: string }> {
    server = await startFauxqsServer({ dataDir: dir });
    const clients = localAwsClients({
      dynamodb: 'http://127.0.0.1:9',
      s3: server.endpoint,
      sqs: server.endpoint,
    });
    await clients.s3.send(new CreateBucketCommand({ Bucket: 'kept' }));
    const queue = await clients.sqs.send(
      new CreateQueueCommand({ QueueName: 'kept-work', Attributes: { VisibilityTimeout: '600' } }),
    );
    return { clients, queueUrl: queue.QueueUrl ?? '' };
  }
  async function restart(): ReturnType<typeof startOn> {
    await server?.stop();
    server = undefined;
    return startOn();
  }
  const receive = async (clients: ReturnType<typeof localAwsClients>, QueueUrl: string) =>
    (
      await clients.sqs.send(
        new ReceiveMessageCommand({
          QueueUrl,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 0,
          MessageSystemAttributeNames: ['ApproximateReceiveCount'],
        }),
      )
    ).Messages ?? [];

  it('restores objects and undeleted messages, in flight ones included, and forgets deleted ones', async () => {
    let { clients, queueUrl } = await startOn();
    await clients.s3.send(
      new PutObjectCommand({
        Bucket: 'kept',
        Key: 'state/m/1.bin',
        Body: Buffer.from([0, 1, 2, 255]),
        Metadata: { sha256: 'abc' },
      }),
    );
    await clients.s3.send(new PutObjectCommand({ Bucket: 'kept', Key: 'gone.json', Body: 'x' }));
    await clients.s3.send(new DeleteObjectCommand({ Bucket: 'kept', Key: 'gone.json' }));
    const before = await clients.s3.send(new HeadObjectCommand({ Bucket: 'kept', Key: 'state/m/1.bin' }));
    for (const body of ['first', 'second']) {
      await clients.sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: body }));
    }
    // Take both: in flight for ten minutes, then acknowledge only the second.
    const taken = await receive(clients, queueUrl);
    expect(taken.map((message) => message.Body)).toEqual(['first', 'second']);
    await clients.sqs.send(
      new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: taken[1]!.ReceiptHandle }),
    );

    ({ clients, queueUrl } = await restart());
    const object = await clients.s3.send(new GetObjectCommand({ Bucket: 'kept', Key: 'state/m/1.bin' }));
    expect([...(await object.Body!.transformToByteArray())]).toEqual([0, 1, 2, 255]);
    expect(object.Metadata).toEqual({ sha256: 'abc' });
    expect(object.ETag).toBe(before.ETag);
    expect(object.LastModified?.getTime()).toBe(before.LastModified?.getTime());
    await expect(
      clients.s3.send(new GetObjectCommand({ Bucket: 'kept', Key: 'gone.json' })),
    ).rejects.toThrow();
    const redelivered = await receive(clients, queueUrl);
    expect(redelivered.map((message) => [message.Body, message.Attributes?.ApproximateReceiveCount])).toEqual(
      [['first', '2']],
    );
    await clients.sqs.send(
      new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: redelivered[0]!.ReceiptHandle }),
    );

    ({ clients, queueUrl } = await restart());
    expect(await receive(clients, queueUrl)).toEqual([]);
  });
});
