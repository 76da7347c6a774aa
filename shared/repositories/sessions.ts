import { type DynamoDBDocumentClient, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { awsClients } from '../aws/clients.js';
import { config } from '../config.js';
import { registryKey, type SessionRecord } from '../domain/records.js';
import { isAwsError, NotFoundError } from '../errors.js';
import { readRegistryItem } from './registry.js';

export async function putSession(
  record: SessionRecord,
  doc: DynamoDBDocumentClient = awsClients().doc,
): Promise<void> {
  await doc.send(
    new PutCommand({
      TableName: config().table('registry'),
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
  sessionId: string,
  tenant: string,
  doc: DynamoDBDocumentClient = awsClients().doc,
): Promise<SessionRecord> {
  const record = await readRegistryItem<SessionRecord>(registryKey.session(sessionId), doc);
  if (record === undefined || record.tenant !== tenant) throw sessionNotFound(sessionId);
  return record;
}

/** Heartbeat: records when the tenant's session was last seen. */
export async function touchSession(
  sessionId: string,
  tenant: string,
  now: number,
  doc: DynamoDBDocumentClient = awsClients().doc,
): Promise<void> {
  try {
    await doc.send(
      new UpdateCommand({
        TableName: config().table('registry'),
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
