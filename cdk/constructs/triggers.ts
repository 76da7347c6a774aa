import { Duration } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { DynamoEventSource, SqsDlq, SqsEventSource } from 'aws-cdk-lib/aws-lambda-event-sources';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import type { FunctionDecl, QueueDecl, StreamView, TableDecl, Trigger } from '../../shared/base/topology.js';

type StreamTrigger = Extract<Trigger, { kind: 'stream' }>;
type QueueTrigger = Extract<Trigger, { kind: 'queue' }>;
type ScheduleTrigger = Extract<Trigger, { kind: 'schedule' }>;

/** Stream images each view carries: a filter on an image the stream lacks would never match. */
const IMAGES: Record<StreamView, readonly string[]> = {
  NEW_IMAGE: ['NewImage'],
  OLD_IMAGE: ['OldImage'],
  NEW_AND_OLD_IMAGES: ['NewImage', 'OldImage'],
  KEYS_ONLY: [],
};

/** `onFailure`: the queue the trigger declares, where the mapping reports a batch it gives up on. */
export function addStreamTrigger(
  fn: lambda.Function,
  table: dynamodb.Table,
  tableDecl: TableDecl,
  trigger: StreamTrigger,
  onFailure: sqs.IQueue,
): void {
  const view = tableDecl.stream;
  if (view === undefined) throw new Error(`Table ${tableDecl.name} triggers a function but has no stream`);
  for (const filter of trigger.filters) {
    const record = filter.dynamodb;
    const images = record === undefined || Array.isArray(record) ? [] : Object.keys(record);
    const missing = images.filter((image) => image.endsWith('Image') && !IMAGES[view].includes(image));
    if (missing.length > 0) {
      throw new Error(`A filter on table ${tableDecl.name} reads ${missing.join(', ')}, absent from ${view}`);
    }
  }
  fn.addEventSource(
    new DynamoEventSource(table, {
      startingPosition: lambda.StartingPosition[trigger.startingPosition],
      batchSize: trigger.batchSize,
      maxBatchingWindow: Duration.seconds(trigger.maxBatchingWindowSeconds),
      retryAttempts: trigger.retryAttempts,
      bisectBatchOnError: trigger.bisectBatchOnError,
      parallelizationFactor: trigger.parallelizationFactor ?? 1,
      reportBatchItemFailures: trigger.reportBatchItemFailures,
      // Grants the function's role SendMessage (and GetQueueAttributes, GetQueueUrl) on this queue only.
      onFailure: new SqsDlq(onFailure),
      // The topology's patterns go through verbatim: the local runtime evaluates the very same JSON.
      filters: trigger.filters.map((pattern) => lambda.FilterCriteria.filter(pattern)),
    }),
  );
}

export function addQueueTrigger(
  fn: lambda.Function,
  fnDecl: FunctionDecl,
  queue: sqs.Queue,
  queueDecl: QueueDecl,
  trigger: QueueTrigger,
): void {
  // Otherwise a message becomes visible again while the invocation that holds it still runs.
  if (queueDecl.visibilityTimeoutSeconds < fnDecl.timeoutSeconds) {
    throw new Error(
      `Queue ${queueDecl.name} hides messages for ${queueDecl.visibilityTimeoutSeconds}s, less than the ` +
        `${fnDecl.timeoutSeconds}s timeout of the function it triggers`,
    );
  }
  fn.addEventSource(
    new SqsEventSource(queue, {
      batchSize: trigger.batchSize,
      maxBatchingWindow: Duration.seconds(trigger.maxBatchingWindowSeconds),
      maxConcurrency: trigger.maxConcurrency,
      reportBatchItemFailures: trigger.reportBatchItemFailures,
    }),
  );
}

export function addScheduleTrigger(
  scope: Construct,
  id: string,
  fn: lambda.Function,
  trigger: ScheduleTrigger,
) {
  const interval = Duration.minutes(trigger.rateMinutes);
  new events.Rule(scope, id, {
    description: `Invokes ${fn.node.path} every ${trigger.rateMinutes} min`,
    schedule: events.Schedule.rate(interval),
    targets: [
      new targets.LambdaFunction(fn, {
        retryAttempts: 2,
        // A tick older than one interval is superseded by the next one (60 s is the smallest allowed).
        maxEventAge: Duration.seconds(Math.max(60, interval.toSeconds())),
      }),
    ],
  });
}
