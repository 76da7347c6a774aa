import { randomBytes, timingSafeEqual } from 'node:crypto';
import { type DynamoDBDocumentClient, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { isAwsError, ValidationError } from '../base/errors.js';
import { sha256Hex } from '../base/ids.js';
import { type ApiKeyRecord, type OperatorKeyRecord, registryKey } from '../domain/records.js';
import { readRegistryItem } from './registry.js';

/**
 * API keys, of two kinds told apart by their prefix, each followed by 43 characters of base64url
 * (256 random bits):
 * - tenant keys `tml-...` call the Tinker API as their tenant (`registryKey.apiKey(hash)`);
 * - operator keys `tso-...` read the cross-tenant operator views, such as the status page's data
 *   (`registryKey.operatorKey(hash)`), and nothing else.
 * Only the sha256 of a key is stored; a revoked key keeps its record with `revoked_at` so it can never
 * authenticate again.
 */
export const API_KEY_PATTERN = /^tml-[A-Za-z0-9_-]{20,200}$/;
export const OPERATOR_KEY_PATTERN = /^tso-[A-Za-z0-9_-]{20,200}$/;
export const TENANT_PATTERN = /^[A-Za-z0-9_.-]{1,64}$/;
/** Operators are named like tenants, or by an email address. */
export const OPERATOR_PATTERN = /^[A-Za-z0-9_.@+-]{1,64}$/;

export type KeyKind = 'tenant' | 'operator';

const KEY_PREFIX: Readonly<Record<KeyKind, string>> = { tenant: 'tml-', operator: 'tso-' };

function generateKey(kind: KeyKind): string {
  return `${KEY_PREFIX[kind]}${randomBytes(32).toString('base64url')}`;
}

export function apiKeyHash(key: string): string {
  return sha256Hex(key);
}

/** What a key claims to be by its shape alone (no lookup); undefined for a malformed key. */
export function keyKind(key: string): KeyKind | undefined {
  if (API_KEY_PATTERN.test(key)) return 'tenant';
  if (OPERATOR_KEY_PATTERN.test(key)) return 'operator';
  return undefined;
}

function registryKeyOf(kind: KeyKind, key: string): string {
  const hash = apiKeyHash(key);
  return kind === 'tenant' ? registryKey.apiKey(hash) : registryKey.operatorKey(hash);
}

/** How each kind of key's holder is named: the pattern, and how a 400 describes it. */
const HOLDER_NAME: Readonly<Record<KeyKind, { readonly pattern: RegExp; readonly allowed: string }>> = {
  tenant: { pattern: TENANT_PATTERN, allowed: 'letters, digits, _ . -' },
  operator: { pattern: OPERATOR_PATTERN, allowed: 'letters, digits, _ . @ + -' },
};

/**
 * Creates a key of `kind` held by `holder` (its record's `tenant` or `operator`) and returns it;
 * only its hash is stored.
 */
async function createKey(
  doc: DynamoDBDocumentClient,
  table: string,
  kind: KeyKind,
  holder: string,
): Promise<string> {
  const { pattern, allowed } = HOLDER_NAME[kind];
  if (!pattern.test(holder)) {
    throw new ValidationError(`${kind} must be 1-64 ${allowed}; got "${holder}"`, {
      context: { field: kind },
    });
  }
  const key = generateKey(kind);
  const record: ApiKeyRecord | OperatorKeyRecord =
    kind === 'tenant'
      ? { pk: registryKeyOf(kind, key), tenant: holder, created_at: Date.now() }
      : { pk: registryKeyOf(kind, key), operator: holder, created_at: Date.now() };
  await doc.send(
    new PutCommand({ TableName: table, Item: record, ConditionExpression: 'attribute_not_exists(pk)' }),
  );
  return key;
}

/** Creates a key for `tenant` and returns it; the key itself is not stored anywhere. */
export function createApiKey(doc: DynamoDBDocumentClient, table: string, tenant: string): Promise<string> {
  return createKey(doc, table, 'tenant', tenant);
}

/** Creates an operator key held by `operator` and returns it; only its hash is stored. */
export function createOperatorKey(
  doc: DynamoDBDocumentClient,
  table: string,
  operator: string,
): Promise<string> {
  return createKey(doc, table, 'operator', operator);
}

/**
 * Revokes a key of either kind; false when no such key exists. Revoking twice keeps the first
 * revocation time.
 */
export async function revokeApiKey(
  doc: DynamoDBDocumentClient,
  table: string,
  key: string,
): Promise<boolean> {
  const kind = keyKind(key);
  if (kind === undefined) return false;
  try {
    await doc.send(
      new UpdateCommand({
        TableName: table,
        Key: { pk: registryKeyOf(kind, key) },
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

/** The live (unrevoked) record of a key of `kind`; undefined for a malformed, unknown or revoked key. */
async function liveKeyRecord<T extends { readonly pk: string; readonly revoked_at?: number }>(
  doc: DynamoDBDocumentClient,
  table: string,
  kind: KeyKind,
  key: string,
): Promise<T | undefined> {
  if (keyKind(key) !== kind) return undefined;
  const pk = registryKeyOf(kind, key);
  const record = await readRegistryItem<T>(doc, table, pk);
  if (record === undefined || record.revoked_at !== undefined) return undefined;
  // The lookup is by hash already; compare the stored key in constant time as well.
  const stored = Buffer.from(record.pk);
  const expected = Buffer.from(pk);
  if (stored.length !== expected.length || !timingSafeEqual(stored, expected)) return undefined;
  return record;
}

/** The tenant a key belongs to; undefined for a malformed, unknown or revoked key (or an operator key). */
export async function tenantForApiKey(
  doc: DynamoDBDocumentClient,
  table: string,
  key: string,
): Promise<string | undefined> {
  return (await liveKeyRecord<ApiKeyRecord>(doc, table, 'tenant', key))?.tenant;
}

/** The operator holding a key; undefined for a malformed, unknown or revoked key (or a tenant key). */
export async function operatorForKey(
  doc: DynamoDBDocumentClient,
  table: string,
  key: string,
): Promise<string | undefined> {
  return (await liveKeyRecord<OperatorKeyRecord>(doc, table, 'operator', key))?.operator;
}
