import { type DynamoDBDocumentClient, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { writeIfCondition } from '../aws/conditional.js';
import type { TransactItem } from '../aws/transact.js';
import { GoneError, NotFoundError } from '../base/errors.js';
import { registryKey, type SessionRecord } from '../domain/records.js';
import { requireOwnItem } from './registry.js';

export async function putSession(
  doc: DynamoDBDocumentClient,
  table: string,
  record: SessionRecord,
): Promise<void> {
  await doc.send(
    new PutCommand({
      TableName: table,
      Item: record,
      ConditionExpression: 'attribute_not_exists(pk)',
    }),
  );
}

function sessionNotFound(sessionId: string): NotFoundError {
  return new NotFoundError(`session ${sessionId} not found`, { context: { field: 'session_id' } });
}

function sessionEnded(sessionId: string): GoneError {
  return new GoneError(`session ${sessionId} has finished`, { context: { field: 'session_id' } });
}

/**
 * The tenant's session, finished or not, or 404 (unknown and other tenants' sessions look the same):
 * reading a session and answering retries of what it accepted stay allowed after its finish (W9).
 */
export function readOwnSession(
  doc: DynamoDBDocumentClient,
  table: string,
  sessionId: string,
  tenant: string,
): Promise<SessionRecord> {
  return requireOwnItem(doc, table, registryKey.session(sessionId), tenant, () => sessionNotFound(sessionId));
}

/** The tenant's session while it has not finished: 404 when unknown or another's, 410 once finished. */
export async function requireSession(
  doc: DynamoDBDocumentClient,
  table: string,
  sessionId: string,
  tenant: string,
): Promise<SessionRecord> {
  return requireOpen(await readOwnSession(doc, table, sessionId, tenant));
}

/** The session read, while it has not finished; 410 once it has (W9: no new submits after a finish). */
export function requireOpen(record: SessionRecord): SessionRecord {
  if (record.finished_at !== undefined) throw sessionEnded(record.session_id);
  return record;
}

/**
 * A submit's check, in its own transaction, that the session has not finished, so a submit racing a
 * finish either lands before it or is refused (W9). A session record that is absent passes: the
 * reads before the transaction have already answered 404 for an unknown one.
 */
export function sessionOpenCheckItem(table: string, sessionId: string): TransactItem {
  return {
    ConditionCheck: {
      TableName: table,
      Key: { pk: registryKey.session(sessionId) },
      ConditionExpression: 'attribute_not_exists(finished_at)',
    },
  };
}

export interface SessionFinish {
  readonly reason: NonNullable<SessionRecord['finish_reason']>;
  readonly detail?: string;
  readonly now: number;
}

/**
 * Updates the tenant's session while it has not finished; false when the condition failed: the
 * session is unknown, another tenant's, or finished.
 */
function updateOpenSession(
  doc: DynamoDBDocumentClient,
  table: string,
  sessionId: string,
  tenant: string,
  updateExpression: string,
  values: Readonly<Record<string, unknown>>,
): Promise<boolean> {
  return writeIfCondition(() =>
    doc.send(
      new UpdateCommand({
        TableName: table,
        Key: { pk: registryKey.session(sessionId) },
        UpdateExpression: updateExpression,
        ConditionExpression:
          'attribute_exists(pk) AND tenant = :tenant AND attribute_not_exists(finished_at)',
        ExpressionAttributeValues: { ...values, ':tenant': tenant },
      }),
    ),
  );
}

/**
 * Ends the tenant's session, once: a later finish keeps the first reason and answers as the first
 * did. 404 when the session is unknown or another tenant's.
 */
export async function finishSession(
  doc: DynamoDBDocumentClient,
  table: string,
  sessionId: string,
  tenant: string,
  finish: SessionFinish,
): Promise<void> {
  const detail = finish.detail === undefined ? undefined : { ':detail': finish.detail };
  const finished = await updateOpenSession(
    doc,
    table,
    sessionId,
    tenant,
    `SET finished_at = :now, finish_reason = :reason${detail === undefined ? '' : ', finish_detail = :detail'}`,
    { ':now': finish.now, ':reason': finish.reason, ...detail },
  );
  // Unknown or another tenant's: 404. Already finished: the first finish stands.
  if (!finished) await readOwnSession(doc, table, sessionId, tenant);
}

/** Heartbeat: records when the tenant's session was last seen; 410 once it has finished. */
export async function touchSession(
  doc: DynamoDBDocumentClient,
  table: string,
  sessionId: string,
  tenant: string,
  now: number,
): Promise<void> {
  if (await updateOpenSession(doc, table, sessionId, tenant, 'SET last_seen = :now', { ':now': now })) return;
  await readOwnSession(doc, table, sessionId, tenant);
  throw sessionEnded(sessionId);
}
