import {
  DeleteMessageBatchCommand,
  type Message,
  type MessageAttributeValue,
  ReceiveMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import type { SQSEvent, SQSMessageAttribute, SQSRecord, SQSRecordAttributes } from 'aws-lambda';
import { exponentialDelay, realSleep } from '../../../shared/aws/backoff.js';
import { logger } from '../../../shared/base/logger.js';
import type { FunctionId, Trigger } from '../../../shared/base/topology.js';
import { failedItems } from './batch-response.js';
import type { Invoker } from './invoker.js';
import { type RunningTrigger, TRIGGER_RETRY_BACKOFF } from './stream-trigger.js';

export type QueueTriggerDecl = Extract<Trigger, { kind: 'queue' }>;

export interface QueueTriggerOptions {
  readonly functionId: FunctionId;
  readonly trigger: QueueTriggerDecl;
  readonly queueUrl: string;
  readonly queueArn: string;
  readonly client: SQSClient;
  readonly invoker: Invoker;
  readonly region: string;
}

// Short long polls: idle pollers stay cheap and `stop()` never waits long for a receive to return.
const RECEIVE_WAIT_SECONDS = 1;
const SQS_MAX_PER_CALL = 10;

/**
 * Delivers a queue to a function as Lambda's event source mapping does: up to `maxConcurrency`
 * batches at once, each of at most `batchSize` messages gathered for at most the batching window.
 * Messages a handler reports in `batchItemFailures` (all of them, when it throws) are left alone to
 * become visible again after the visibility timeout; the others are deleted.
 */
export function startQueueTrigger(options: QueueTriggerOptions): RunningTrigger {
  const controller = new AbortController();
  const { signal } = controller;
  const pollers = Array.from({ length: options.trigger.maxConcurrency }, () => poll(options, signal));
  return {
    stop: async () => {
      controller.abort();
      await Promise.allSettled(pollers);
    },
  };
}

async function poll(options: QueueTriggerOptions, signal: AbortSignal): Promise<void> {
  let errors = 0;
  while (!signal.aborted) {
    try {
      const batch = await receiveBatch(options, signal);
      errors = 0;
      if (batch.length > 0) await handleBatch(options, batch);
    } catch (error) {
      if (signal.aborted) return;
      errors += 1;
      logger.warn('queue receive failed; retrying', {
        functionId: options.functionId,
        error: error as Error,
      });
      await realSleep(exponentialDelay(errors - 1, TRIGGER_RETRY_BACKOFF), signal);
    }
  }
}

async function receiveBatch(options: QueueTriggerOptions, signal: AbortSignal): Promise<Message[]> {
  const { batchSize, maxBatchingWindowSeconds } = options.trigger;
  const windowEnds = Date.now() + maxBatchingWindowSeconds * 1000;
  const batch: Message[] = [];
  do {
    // Once the batch holds something, a receive must not outlast the batching window.
    const waitSeconds =
      batch.length === 0 ? RECEIVE_WAIT_SECONDS : Math.max(0, Math.floor((windowEnds - Date.now()) / 1000));
    const answer = await options.client.send(
      new ReceiveMessageCommand({
        QueueUrl: options.queueUrl,
        MaxNumberOfMessages: Math.min(SQS_MAX_PER_CALL, batchSize - batch.length),
        WaitTimeSeconds: waitSeconds,
        MessageSystemAttributeNames: ['All'],
        MessageAttributeNames: ['All'],
      }),
    );
    batch.push(...(answer.Messages ?? []));
    if (signal.aborted) break;
  } while (batch.length > 0 && batch.length < batchSize && Date.now() < windowEnds);
  return batch;
}

async function handleBatch(options: QueueTriggerOptions, messages: readonly Message[]): Promise<void> {
  const records = messages.map((message) => toSqsRecord(message, options.queueArn, options.region));
  const event: SQSEvent = { Records: records };
  let failed: 'all' | ReadonlySet<string>;
  try {
    failed = failedItems(
      await options.invoker.invoke(options.functionId, event),
      records.map((record) => record.messageId),
    );
  } catch (error) {
    logger.error('queue handler failed', { functionId: options.functionId, error: error as Error });
    failed = 'all';
  }
  if (failed === 'all') return;
  const succeeded = records.filter((record) => !failed.has(record.messageId));
  for (let start = 0; start < succeeded.length; start += SQS_MAX_PER_CALL) {
    const chunk = succeeded.slice(start, start + SQS_MAX_PER_CALL);
    const answer = await options.client.send(
      new DeleteMessageBatchCommand({
        QueueUrl: options.queueUrl,
        Entries: chunk.map((record, index) => ({ Id: String(index), ReceiptHandle: record.receiptHandle })),
      }),
    );
    if ((answer.Failed ?? []).length > 0) {
      logger.warn('some processed messages could not be deleted; they will be delivered again', {
        functionId: options.functionId,
        failed: answer.Failed?.length,
      });
    }
  }
}

/** The record Lambda builds from a received message. */
export function toSqsRecord(message: Message, queueArn: string, awsRegion: string): SQSRecord {
  const system = message.Attributes ?? {};
  const attributes: SQSRecordAttributes = {
    ...system,
    ApproximateReceiveCount: system.ApproximateReceiveCount ?? '1',
    SentTimestamp: system.SentTimestamp ?? String(Date.now()),
    SenderId: system.SenderId ?? '000000000000',
    ApproximateFirstReceiveTimestamp: system.ApproximateFirstReceiveTimestamp ?? String(Date.now()),
  };
  const record: SQSRecord = {
    messageId: message.MessageId ?? '',
    receiptHandle: message.ReceiptHandle ?? '',
    body: message.Body ?? '',
    attributes,
    messageAttributes: Object.fromEntries(
      Object.entries(message.MessageAttributes ?? {}).map(([name, value]) => [
        name,
        toRecordAttribute(value),
      ]),
    ),
    md5OfBody: message.MD5OfBody ?? '',
    eventSource: 'aws:sqs',
    eventSourceARN: queueArn,
    awsRegion,
  };
  if (message.MD5OfMessageAttributes !== undefined)
    record.md5OfMessageAttributes = message.MD5OfMessageAttributes;
  return record;
}

function toRecordAttribute(value: MessageAttributeValue): SQSMessageAttribute {
  const attribute: SQSMessageAttribute = {
    dataType: value.DataType ?? 'String',
    stringListValues: value.StringListValues ?? [],
    binaryListValues: (value.BinaryListValues ?? []).map((bytes) => Buffer.from(bytes).toString('base64')),
  };
  if (value.StringValue !== undefined) attribute.stringValue = value.StringValue;
  if (value.BinaryValue !== undefined)
    attribute.binaryValue = Buffer.from(value.BinaryValue).toString('base64');
  return attribute;
}
