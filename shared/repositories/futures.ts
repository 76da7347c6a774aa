import type { S3Client } from '@aws-sdk/client-s3';
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { type DynamoDBDocumentClient, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { batchGetByKey } from '../aws/batch-get.js';
import { writeIfCondition } from '../aws/conditional.js';
import { getItem } from '../aws/get-item.js';
import type { TransactItem } from '../aws/transact.js';
import { config } from '../base/config.js';
import { InfrastructureError } from '../base/errors.js';
import { liveKey, liveShard } from '../base/ids.js';
import type {
  FutureError,
  FutureRow,
  FutureStatus,
  RequestType,
  SamplePrefixRef,
} from '../domain/records.js';

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
  /** Samples: the (sampling session, clone) completion log the commit appends to (W9). */
  readonly sessionLog?: string;
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
    ...(input.sessionLog === undefined ? {} : { session_log: input.sessionLog }),
    created_at: input.now,
    updated_at: input.now,
  };
}

/** The members of a row that say whose it is and where it stands, without its result. */
export type FutureHead = Pick<FutureRow, 'request_id' | 'tenant' | 'status' | 'request_type'>;
const HEAD_MEMBERS = ['request_id', 'tenant', 'status', 'request_type'];

/**
 * A row's head only (no result, error or payload members): the answer is small and equally so for
 * every row, so what the caller learns before checking the tenant costs the same whoever owns it.
 */
export async function readFutureHead(
  doc: DynamoDBDocumentClient,
  table: string,
  requestId: string,
  consistent = false,
): Promise<FutureHead | undefined> {
  return getItem<FutureHead>(doc, table, { request_id: requestId }, consistent, HEAD_MEMBERS);
}

/** The members a terminal row's answer needs: its head, and its result (inline or its key) or error. */
export type FutureOutcome = FutureHead & Pick<FutureRow, 'result' | 'result_key' | 'error'>;
const OUTCOME_MEMBERS = [...HEAD_MEMBERS, 'result', 'result_key', 'error'];

/**
 * A row's head and outcome. While the row is pending it holds neither result nor error, so this costs
 * what the head costs; once terminal it is the whole answer (terminal rows never change again, so an
 * eventually consistent read that shows one shows its final form).
 */
export async function readFutureOutcome(
  doc: DynamoDBDocumentClient,
  table: string,
  requestId: string,
  consistent = false,
): Promise<FutureOutcome | undefined> {
  return getItem<FutureOutcome>(doc, table, { request_id: requestId }, consistent, OUTCOME_MEMBERS);
}

/**
 * `readFutureOutcome` of several rows at once, by request id (absent rows left out): one BatchGetItem
 * per 100 ids.
 */
export async function readFutureOutcomes(
  doc: DynamoDBDocumentClient,
  table: string,
  requestIds: Iterable<string>,
  consistent: boolean,
): Promise<Map<string, FutureOutcome>> {
  const items = await batchGetByKey(doc, requestIds, {
    table,
    keyName: 'request_id',
    consistent,
    attributes: OUTCOME_MEMBERS,
  });
  return new Map([...items].map(([id, item]) => [id, item as unknown as FutureOutcome]));
}

export async function readFuture(
  doc: DynamoDBDocumentClient,
  table: string,
  requestId: string,
  consistent = false,
): Promise<FutureRow | undefined> {
  return getItem<FutureRow>(doc, table, { request_id: requestId }, consistent);
}

/**
 * The result of a completed row: inline (the JSON text; rows written before results were stored as
 * text hold a map), or the S3 object `result_key` names.
 */
export async function readFutureResult(
  s3: S3Client,
  bucket: string,
  row: Pick<FutureRow, 'request_id' | 'result' | 'result_key'>,
): Promise<unknown> {
  if (row.result_key === undefined) {
    return typeof row.result === 'string' ? (JSON.parse(row.result) as unknown) : row.result;
  }
  try {
    const answer = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: row.result_key }));
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

/** How a step ends: its result inline or in S3, or its error. */
export type StoredOutcome =
  | { readonly status: 'completed'; readonly result: unknown }
  | { readonly status: 'completed'; readonly result_key: string }
  | { readonly status: 'failed'; readonly error: FutureError };

/**
 * A future's end, as a commit's transaction item: `SET status, result | result_key | error,
 * updated_at [, run] REMOVE live` on `status = pending` (first writer wins; the row leaves the index).
 * `run` is the worker run whose commit ends it: the objects of its request under another run's keys
 * are that run's garbage (E3, E5).
 */
export function futureEndItem(
  table: string,
  requestId: string,
  outcome: StoredOutcome,
  now: number,
  run?: string,
): TransactItem {
  const { status, ...fields } = outcome;
  const [field, value] = Object.entries(fields)[0] as [string, unknown];
  const names: Record<string, string> = { '#status': 'status', '#field': field };
  const values: Record<string, unknown> = {
    ':status': status,
    ':value': value,
    ':now': now,
    ':pending': 'pending',
  };
  let sets = 'SET #status = :status, #field = :value, updated_at = :now';
  if (run !== undefined) {
    sets += ', #run = :run';
    names['#run'] = 'run';
    values[':run'] = run;
  }
  return {
    Update: {
      TableName: table,
      Key: { request_id: requestId },
      UpdateExpression: `${sets} REMOVE live`,
      ConditionExpression: '#status = :pending',
      ExpressionAttributeNames: names,
      ExpressionAttributeValues: values,
    },
  };
}

/**
 * A cut sample's future back to pending, as a transaction item: it keeps every attribute the client
 * sees (status, `live`, so the scheduler plans it again) and gets the prefix pointers it resumes
 * from, or loses them when it has none left; `updated_at` changes, so the futures stream wakes the
 * scheduler.
 */
export function futureCutItem(
  table: string,
  requestId: string,
  prefixRef: SamplePrefixRef | undefined,
  now: number,
): TransactItem {
  const values: Record<string, unknown> = { ':now': now, ':pending': 'pending' };
  if (prefixRef !== undefined) values[':ref'] = prefixRef;
  return {
    Update: {
      TableName: table,
      Key: { request_id: requestId },
      UpdateExpression:
        prefixRef === undefined
          ? 'SET updated_at = :now REMOVE prefix_ref'
          : 'SET prefix_ref = :ref, updated_at = :now',
      ConditionExpression: '#status = :pending',
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: values,
    },
  };
}

/** `members` of the rows of `requestIds` that exist, by request id, read strongly (BatchGetItem). */
export function readFutureMembers(
  doc: DynamoDBDocumentClient,
  futuresTable: string,
  requestIds: Iterable<string>,
  members: readonly string[],
): Promise<Map<string, Record<string, unknown>>> {
  return batchGetByKey(doc, requestIds, {
    table: futuresTable,
    keyName: 'request_id',
    consistent: true,
    attributes: members,
  });
}

/** What a dispatched sample needs from its row: the index projects no tenant. */
export interface SampleRowFacts {
  readonly tenant: string;
  readonly status: FutureStatus;
}

/**
 * Tenant and status of the samples this tick claimed, and only of those (like the payloads, R6).
 * Strongly consistent, so a row a worker already ended (while the index still lists it) is not
 * dispatched again, and the stream check (R5) never mistakes a just-written row for a missing one.
 */
export async function readSampleRows(
  doc: DynamoDBDocumentClient,
  futuresTable: string,
  requestIds: Iterable<string>,
): Promise<Map<string, SampleRowFacts>> {
  const items = await readFutureMembers(doc, futuresTable, requestIds, ['request_id', 'tenant', 'status']);
  const facts = new Map<string, SampleRowFacts>();
  for (const [id, item] of items) {
    if (typeof item.tenant === 'string' && typeof item.status === 'string') {
      facts.set(id, { tenant: item.tenant, status: item.status as FutureStatus });
    }
  }
  return facts;
}

/**
 * Counts a failed run of a pending sample (E2 per sample: `attempts`); `false` when the row ended or
 * went meanwhile. The row's `updated_at` is left alone: this is no state change the scheduler plans on.
 */
export function countSampleAttempt(
  doc: DynamoDBDocumentClient,
  table: string,
  requestId: string,
): Promise<boolean> {
  return writeIfCondition(() =>
    doc.send(
      new UpdateCommand({
        TableName: table,
        Key: { request_id: requestId },
        UpdateExpression: 'ADD attempts :one',
        ConditionExpression: '#status = :pending',
        ExpressionAttributeNames: { '#status': 'status' },
        ExpressionAttributeValues: { ':one': 1, ':pending': 'pending' },
      }),
    ),
  );
}
