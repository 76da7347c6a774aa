import { GetObjectCommand } from '@aws-sdk/client-s3';
import { type DynamoDBDocumentClient, GetCommand } from '@aws-sdk/lib-dynamodb';
import { type AwsClients, awsClients } from '../aws/clients.js';
import { config } from '../config.js';
import type { FutureRow, RequestType } from '../domain/records.js';
import { InfrastructureError } from '../errors.js';
import { liveKey, liveShard } from '../ids.js';

/** Results larger than this go to S3 (`result_key`) instead of the row (items are at most 400 KB). */
export const INLINE_RESULT_MAX_BYTES = 64 * 1024;

export interface PendingFutureInput {
  readonly requestId: string;
  readonly tenant: string;
  readonly modelId: string;
  readonly seq?: number;
  readonly requestType: RequestType;
  readonly checkpointId?: string;
  readonly tokens: number;
  readonly payloadKey: string;
  readonly payloadDigest: string;
  readonly now: number;
}

/** A new pending row: in the `live` index on its model's shard until it turns terminal. */
export function pendingFutureRow(input: PendingFutureInput): FutureRow {
  const { pool, liveShards } = config();
  return {
    request_id: input.requestId,
    tenant: input.tenant,
    model_id: input.modelId,
    ...(input.seq === undefined ? {} : { seq: input.seq }),
    request_type: input.requestType,
    ...(input.checkpointId === undefined ? {} : { checkpoint_id: input.checkpointId }),
    status: 'pending',
    live: liveKey(pool, liveShard(input.modelId, liveShards)),
    tokens: input.tokens,
    payload_key: input.payloadKey,
    payload_digest: input.payloadDigest,
    created_at: input.now,
    updated_at: input.now,
  };
}

/** The members of a row that say whose it is and where it stands, without its result. */
export type FutureHead = Pick<FutureRow, 'request_id' | 'tenant' | 'status' | 'request_type'>;

/**
 * A row's head only (no result, error or payload members): the answer is small and equally so for
 * every row, so what the caller learns before checking the tenant costs the same whoever owns it.
 */
export async function readFutureHead(
  requestId: string,
  doc: DynamoDBDocumentClient = awsClients().doc,
  consistent = false,
): Promise<FutureHead | undefined> {
  const answer = await doc.send(
    new GetCommand({
      TableName: config().table('futures'),
      Key: { request_id: requestId },
      ConsistentRead: consistent,
      ProjectionExpression: 'request_id, tenant, #status, request_type',
      ExpressionAttributeNames: { '#status': 'status' },
    }),
  );
  return answer.Item as FutureHead | undefined;
}

export async function readFuture(
  requestId: string,
  doc: DynamoDBDocumentClient = awsClients().doc,
  consistent = false,
): Promise<FutureRow | undefined> {
  const answer = await doc.send(
    new GetCommand({
      TableName: config().table('futures'),
      Key: { request_id: requestId },
      ConsistentRead: consistent,
    }),
  );
  return answer.Item as FutureRow | undefined;
}

/**
 * The result of a completed row: inline (the JSON text; rows written before results were stored as
 * text hold a map), or the S3 object `result_key` names.
 */
export async function readFutureResult(
  row: FutureRow,
  clients: Pick<AwsClients, 's3'> = awsClients(),
): Promise<unknown> {
  if (row.result_key === undefined) {
    return typeof row.result === 'string' ? (JSON.parse(row.result) as unknown) : row.result;
  }
  try {
    const answer = await clients.s3.send(
      new GetObjectCommand({ Bucket: config().bucket, Key: row.result_key }),
    );
    const body = await answer.Body?.transformToString('utf8');
    if (body === undefined) throw new Error('empty body');
    return JSON.parse(body) as unknown;
  } catch (error) {
    throw new InfrastructureError(`result ${row.result_key} of ${row.request_id} is unreadable`, {
      cause: error,
      context: { request_id: row.request_id },
    });
  }
}
