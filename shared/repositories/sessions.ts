import { type DynamoDBDocumentClient, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { registryKey, type SessionRecord } from '../domain/records.js';
import { isAwsError, NotFoundError } from '../errors.js';
import { readRegistryItem } from './registry.js';

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

/** The tenant's session, or 404 (unknown and other tenants' sessions look the same). */
export async function requireSession(
  doc: DynamoDBDocumentClient,
  table: string,
  sessionId: string,
  tenant: string,
): Promise<SessionRecord> {
  const record = await readRegistryItem<SessionRecord>(doc, table, registryKey.session(sessionId));
  if (record === undefined || record.tenant !== tenant) throw sessionNotFound(sessionId);
  return record;
}

/** Heartbeat: records when the tenant's session was last seen. */
export async function touchSession(
  doc: DynamoDBDocumentClient,
  table: string,
  sessionId: string,
  tenant: string,
  now: number,
): Promise<void> {
  try {
    await doc.send(
      new UpdateCommand({
        TableName: table,
        Key: { pk: registryKey.session(sessionId) },
        UpdateExpression: 'SET last_seen = :now',
        ConditionExpression: 'attribute_exists(pk) AND tenant = :tenant',
        ExpressionAttributeValues: { ':now': now, ':tenant': tenant },
      }),
    );
  } catch (error) {
    if (isAwsError(error, 'ConditionalCheckFailedException')) throw sessionNotFound(sessionId);
    throw error;
  }
}
