import { PutObjectCommand } from '@aws-sdk/client-s3';
import { type DynamoDBDocumentClient, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { type AwsClients, awsClients } from '../../shared/aws/clients.js';
import { config } from '../../shared/base/config.js';
import { ConditionLostError, isAwsError } from '../../shared/base/errors.js';
import { storageKeys } from '../../shared/base/storage-keys.js';
import type { FutureError } from '../../shared/domain/records.js';
import {
  futureEndItem,
  INLINE_RESULT_MAX_BYTES,
  type StoredOutcome,
} from '../../shared/repositories/futures.js';

/**
 * Ends future rows directly, as no production path does (the worker commits its rows in one
 * transaction, E4): API tests use it to give the API a completed or failed row to answer with.
 */

/** The run these rows are ended by: a result written here is under this run's key (E3). */
export const SUPPORT_RUN = 'test-support';

/** Ends a pending row with the commit's own future action (`futureEndItem`), sent alone. */
async function finish(
  requestId: string,
  terminal: StoredOutcome,
  doc: DynamoDBDocumentClient,
): Promise<void> {
  const update = futureEndItem(
    config().table('futures'),
    requestId,
    terminal,
    Date.now(),
    SUPPORT_RUN,
  ).Update;
  if (update === undefined) throw new Error('a future end is an update');
  try {
    await doc.send(new UpdateCommand(update));
  } catch (error) {
    if (isAwsError(error, 'ConditionalCheckFailedException')) {
      throw new ConditionLostError(`future ${requestId} is not pending`, {
        context: { request_id: requestId },
      });
    }
    throw error;
  }
}

/**
 * Completes a pending row outside the worker's commit protocol: inline when small,
 * otherwise the result goes to S3 first. The worker commits its own rows transactionally (E4).
 */
export async function completeFuture(
  requestId: string,
  result: unknown,
  clients: Pick<AwsClients, 'doc' | 's3'> = awsClients(),
): Promise<void> {
  const body = JSON.stringify(result);
  if (Buffer.byteLength(body) <= INLINE_RESULT_MAX_BYTES) {
    await finish(requestId, { status: 'completed', result: body }, clients.doc);
    return;
  }
  const key = storageKeys.result(requestId, SUPPORT_RUN);
  await clients.s3.send(
    new PutObjectCommand({ Bucket: config().bucket, Key: key, Body: body, ContentType: 'application/json' }),
  );
  await finish(requestId, { status: 'completed', result_key: key }, clients.doc);
}

export async function failFuture(
  requestId: string,
  error: FutureError,
  clients: Pick<AwsClients, 'doc'> = awsClients(),
): Promise<void> {
  await finish(requestId, { status: 'failed', error }, clients.doc);
}
