import { CreateQueueCommand, ReceiveMessageCommand, SendMessageBatchCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import { type Fauxqs, startFauxqsServer } from '../../local/cloud/fauxqs.js';

/**
 * The local cloud's fauxqs ends long polls as SQS does (local/cloud/fauxqs-long-polls.ts): each message
 * that arrives ends one waiting receive, the oldest first, and the other receives keep waiting
 * until their own wait is over. Unpatched, fauxqs ends every waiting receive on each message, and
 * all but one answer empty at once.
 */
describe('fauxqs long polls', () => {
  const WAIT_SECONDS = 5;
  let server: Fauxqs;
  let clients: ReturnType<typeof localAwsClients>;
  beforeAll(async () => {
    server = await startFauxqsServer();
    clients = localAwsClients({ dynamodb: 'http://127.0.0.1:9', s3: server.endpoint, sqs: server.endpoint });
  });
  afterAll(async () => {
    clients.sqs.destroy();
    await server?.stop();
  });

  interface Poll {
    readonly index: number;
    readonly answer: Promise<{ readonly bodies: string[]; readonly at: number }>;
    settled: boolean;
  }

  /** `count` receives of one message each, started one after another so that fauxqs queues them in order. */
  async function waitingReceives(queueUrl: string, count: number): Promise<Poll[]> {
    const polls: Poll[] = [];
    for (let index = 0; index < count; index++) {
      const answer = clients.sqs
        .send(
          new ReceiveMessageCommand({
            QueueUrl: queueUrl,
            MaxNumberOfMessages: 1,
            WaitTimeSeconds: WAIT_SECONDS,
          }),
        )
        .then((output) => {
          poll.settled = true;
          return { bodies: (output.Messages ?? []).map((m) => m.Body ?? ''), at: Date.now() };
        });
      const poll: Poll = { index, answer, settled: false };
      polls.push(poll);
      // Long enough for the receive to reach fauxqs and start waiting before the next one.
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    return polls;
  }

  async function queue(name: string): Promise<string> {
    const created = await clients.sqs.send(new CreateQueueCommand({ QueueName: name }));
    return created.QueueUrl ?? '';
  }

  it('ends one waiting receive per message, the oldest first; the others wait on', async () => {
    const queueUrl = await queue('long-polls-one');
    const polls = await waitingReceives(queueUrl, 4);
    const sentAt = Date.now();
    await clients.sqs.send(
      new SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: [{ Id: '1', MessageBody: 'first' }] }),
    );
    const first = await polls[0]!.answer;
    expect(first.bodies).toEqual(['first']);
    expect(first.at - sentAt).toBeLessThan(WAIT_SECONDS * 1000 - 1000);
    // Well after the message was taken, the other three still wait (unpatched, they answer at once).
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(polls.slice(1).map((poll) => poll.settled)).toEqual([false, false, false]);
    const others = await Promise.all(polls.slice(1).map((poll) => poll.answer));
    expect(others.map((answer) => answer.bodies)).toEqual([[], [], []]);
  });

  it('ends as many waiting receives as messages arrive together, and no more', async () => {
    const queueUrl = await queue('long-polls-three');
    const polls = await waitingReceives(queueUrl, 4);
    await clients.sqs.send(
      new SendMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: ['a', 'b', 'c'].map((body, index) => ({ Id: String(index), MessageBody: body })),
      }),
    );
    const answered = await Promise.all(polls.slice(0, 3).map((poll) => poll.answer));
    expect(answered.flatMap((answer) => answer.bodies).sort()).toEqual(['a', 'b', 'c']);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(polls[3]!.settled).toBe(false);
    expect((await polls[3]!.answer).bodies).toEqual([]);
  });
});
