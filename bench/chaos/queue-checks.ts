import { GetQueueAttributesCommand, ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { DeliveryLog } from './delivery-log.js';
import { workItemIdOf } from './processes.js';

/**
 * The queues at the end: the work queue drained, and every dead-lettered work message attributed to
 * something injected (each of its work item's failed deliveries explained), or none at all.
 */

export async function queueDepth(sqs: SQSClient, queueUrl: string): Promise<number> {
  const answer = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
    }),
  );
  const attributes = answer.Attributes ?? {};
  return (
    Number(attributes.ApproximateNumberOfMessages ?? 0) +
    Number(attributes.ApproximateNumberOfMessagesNotVisible ?? 0)
  );
}

export interface DeadLetterReport {
  readonly messages: number;
  readonly explained: number;
  /** Work items of dead-lettered messages nothing injected explains. */
  readonly unexplained: readonly string[];
}

export async function checkDeadLetters(
  sqs: SQSClient,
  dlqUrl: string,
  log: DeliveryLog,
): Promise<DeadLetterReport> {
  const bodies: string[] = [];
  for (;;) {
    const answer = await sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: dlqUrl,
        MaxNumberOfMessages: 10,
        WaitTimeSeconds: 0,
        VisibilityTimeout: 600,
      }),
    );
    const messages = answer.Messages ?? [];
    if (messages.length === 0) break;
    bodies.push(...messages.map((message) => message.Body ?? ''));
  }
  const unexplained: string[] = [];
  for (const body of bodies) {
    const workItemId = workItemIdOf(body);
    if (workItemId === undefined || !log.explainsDeadLetter(workItemId)) unexplained.push(workItemId ?? body);
  }
  return { messages: bodies.length, explained: bodies.length - unexplained.length, unexplained };
}
