import { randomBytes, timingSafeEqual } from 'node:crypto';
import { type DynamoDBDocumentClient, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { type AwsClients, awsClients } from '../aws/clients.js';
import { config } from '../config.js';
import { type ApiKeyRecord, registryKey } from '../domain/records.js';
import { isAwsError, ValidationError } from '../errors.js';
import { sha256Hex } from '../ids.js';
import { readRegistryItem } from './registry.js';

/**
 * API keys: `tml-` plus 43 characters of base64url (256 random bits). Only the sha256 of a key is
 * stored (`registryKey.apiKey(hash)`), bound to its tenant; a revoked key keeps its record with
 * `revoked_at` so it can never authenticate again.
 */
export const API_KEY_PATTERN = /^tml-[A-Za-z0-9_-]{20,200}$/;
export const TENANT_PATTERN = /^[A-Za-z0-9_.-]{1,64}$/;

export function generateApiKey(): string {
  return `tml-${randomBytes(32).toString('base64url')}`;
}

export function apiKeyHash(key: string): string {
  return sha256Hex(key);
}

type DocClients = Pick<AwsClients, 'doc'>;

/** Creates a key for `tenant` and returns it; the key itself is not stored anywhere. */
export async function createApiKey(tenant: string, clients: DocClients = awsClients()): Promise<string> {
  if (!TENANT_PATTERN.test(tenant)) {
    throw new ValidationError(`tenant must be 1-64 letters, digits, _ . -; got "${tenant}"`, {
      context: { field: 'tenant' },
    });
  }
  const key = generateApiKey();
  const record: ApiKeyRecord = { pk: registryKey.apiKey(apiKeyHash(key)), tenant, created_at: Date.now() };
  await clients.doc.send(
    new PutCommand({
      TableName: config().table('registry'),
      Item: record,
      ConditionExpression: 'attribute_not_exists(pk)',
    }),
  );
  return key;
}

/** Revokes a key; false when no such key exists. Revoking twice keeps the first revocation time. */
export async function revokeApiKey(key: string, clients: DocClients = awsClients()): Promise<boolean> {
  try {
    await clients.doc.send(
      new UpdateCommand({
        TableName: config().table('registry'),
        Key: { pk: registryKey.apiKey(apiKeyHash(key)) },
        UpdateExpression: 'SET revoked_at = if_not_exists(revoked_at, :now)',
        ConditionExpression: 'attribute_exists(pk)',
        ExpressionAttributeValues: { ':now': Date.now() },
      }),
    );
    return true;
  } catch (error) {
    if (isAwsError(error, 'ConditionalCheckFailedException')) return false;
    throw error;
  }
}

/** The tenant a key belongs to; undefined for a malformed, unknown or revoked key. */
export async function tenantForApiKey(
  key: string,
  doc: DynamoDBDocumentClient = awsClients().doc,
): Promise<string | undefined> {
  if (!API_KEY_PATTERN.test(key)) return undefined;
  const pk = registryKey.apiKey(apiKeyHash(key));
  const record = await readRegistryItem<ApiKeyRecord>(pk, doc);
  if (record === undefined || record.revoked_at !== undefined) return undefined;
  // The lookup is by hash already; compare the stored key in constant time as well.
  const stored = Buffer.from(record.pk);
  const expected = Buffer.from(pk);
  if (stored.length !== expected.length || !timingSafeEqual(stored, expected)) return undefined;
  return record.tenant;
}
