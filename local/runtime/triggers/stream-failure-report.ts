import { randomUUID } from 'node:crypto';
import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { DynamoDBRecord } from 'aws-lambda';
import type { FunctionId } from '../../../shared/base/topology.js';
import { LOCAL_REGION } from '../../cloud/resources.js';

/**
 * The invocation record a DynamoDB stream mapping sends to its on-failure destination when it gives
 * up on a batch: where the records are (shard and sequence range), never the records themselves.
 * Field names and formats follow the example in the Lambda developer guide ("Error handling" of
 * "Using AWS Lambda with Amazon DynamoDB", services-dynamodb-errors).
 */
export interface StreamFailureRecord {
  readonly requestContext: {
    readonly requestId: string;
    readonly functionArn: string;
    readonly condition: 'RetryAttemptsExhausted';
    readonly approximateInvokeCount: number;
  };
  readonly responseContext: {
    readonly statusCode: number;
    readonly executedVersion: string;
    /** Present when the last invocation failed with an error (a throw or a timeout), as on AWS. */
    readonly functionError?: 'Unhandled';
  };
  readonly version: '1.0';
  /** When the batch was given up on, ISO 8601 with milliseconds. */
  readonly timestamp: string;
  readonly DDBStreamBatchInfo: {
    readonly shardId: string;
    readonly startSequenceNumber: string;
    readonly endSequenceNumber: string;
    /** ISO 8601 to the second, from the records' ApproximateCreationDateTime. */
    readonly approximateArrivalOfFirstRecord?: string;
    readonly approximateArrivalOfLastRecord?: string;
    readonly batchSize: number;
    readonly streamArn: string;
  };
}

export interface GivenUpBatch {
  readonly functionId: FunctionId;
  readonly streamArn: string;
  readonly shardId: string;
  /** The records given up on, in stream order (never empty). */
  readonly records: readonly DynamoDBRecord[];
  /** Invocations that included exactly these records' batch, the first one included. */
  readonly invocations: number;
  /** Whether the last invocation threw (or timed out) rather than answering batchItemFailures. */
  readonly functionError: boolean;
}

/** Where a stream trigger reports a batch it gives up on. */
export interface StreamFailureDestination {
  report(record: StreamFailureRecord): Promise<void>;
}

/** The ARN the local invoker puts in its Lambda context (`local-<id>` in the local region). */
function localFunctionArn(functionId: FunctionId): string {
  return `arn:aws:lambda:${LOCAL_REGION}:000000000000:function:local-${functionId}`;
}

function arrival(record: DynamoDBRecord | undefined): string | undefined {
  const seconds = record?.dynamodb?.ApproximateCreationDateTime;
  if (seconds === undefined) return undefined;
  return new Date(seconds * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function sequenceOf(record: DynamoDBRecord | undefined): string {
  const sequence = record?.dynamodb?.SequenceNumber;
  if (sequence === undefined) throw new Error('a stream record without a sequence number cannot be reported');
  return sequence;
}

export function streamFailureRecord(batch: GivenUpBatch, now: Date = new Date()): StreamFailureRecord {
  const first = batch.records[0];
  const last = batch.records.at(-1);
  return {
    requestContext: {
      requestId: randomUUID(),
      functionArn: localFunctionArn(batch.functionId),
      condition: 'RetryAttemptsExhausted',
      approximateInvokeCount: batch.invocations,
    },
    responseContext: {
      statusCode: 200,
      executedVersion: '$LATEST',
      ...(batch.functionError ? { functionError: 'Unhandled' as const } : {}),
    },
    version: '1.0',
    timestamp: now.toISOString(),
    DDBStreamBatchInfo: {
      shardId: batch.shardId,
      startSequenceNumber: sequenceOf(first),
      endSequenceNumber: sequenceOf(last),
      approximateArrivalOfFirstRecord: arrival(first),
      approximateArrivalOfLastRecord: arrival(last),
      batchSize: batch.records.length,
      streamArn: batch.streamArn,
    },
  };
}

/** An SQS queue as the destination, one message per given-up batch (what `SqsDlq` configures on AWS). */
export function sqsFailureDestination(client: SQSClient, queueUrl: string): StreamFailureDestination {
  return {
    report: async (record) => {
      await client.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: JSON.stringify(record) }));
    },
  };
}
