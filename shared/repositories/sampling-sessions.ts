import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { TransactItem } from '../aws/transact.js';
import { NotFoundError } from '../base/errors.js';
import { registryKey, type SamplingSessionRecord } from '../domain/records.js';
import { requireOwnItem } from './registry.js';

/** The tenant's sampling session, or 404 naming `field` (unknown and other tenants' look the same). */
export function requireSamplingSession(
  doc: DynamoDBDocumentClient,
  table: string,
  samplingSessionId: string,
  tenant: string,
  field = 'sampling_session_id',
): Promise<SamplingSessionRecord> {
  const notFound = () =>
    new NotFoundError(`sampling session ${samplingSessionId} not found`, { context: { field } });
  return requireOwnItem(doc, table, registryKey.samplingSession(samplingSessionId), tenant, notFound);
}

/** An unnamed sampler save's session, created by its commit (a transaction item), never overwritten. */
export function samplingSessionCreateItem(table: string, record: SamplingSessionRecord): TransactItem {
  return { Put: { TableName: table, Item: { ...record }, ConditionExpression: 'attribute_not_exists(pk)' } };
}
