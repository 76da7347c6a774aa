import { DeleteCommand, type DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import { batchGetByKey } from '../aws/batch-get.js';
import { type FutureStatus, registryKey } from '../domain/records.js';
import { isAwsError } from '../errors.js';
import { type SampleRelease, sampleClaimTtl } from '../scheduling/claim.js';

/** `registry` item `claim#<request_id>`: a sample is claimed per request (R4). */
export interface SampleClaimRecord {
  readonly pk: string;
  readonly request_id: string;
  readonly claim_token: string;
  readonly work_item_id: string;
  readonly lease_until: number;
  readonly ttl: number;
}

/**
 * Which of `requestIds` hold a claim whose lease has not ended (strongly consistent). Expired claims
 * are left out, so the planner plans those samples again; the claim put below may replace them.
 */
export async function readLiveSampleClaims(
  doc: DynamoDBDocumentClient,
  registryTable: string,
  requestIds: Iterable<string>,
  now: number,
): Promise<Set<string>> {
  const keys = [...requestIds].map((id) => registryKey.sampleClaim(id));
  if (keys.length === 0) return new Set();
  const items = await batchGetByKey(doc, keys, { table: registryTable, keyName: 'pk', consistent: true });
  const claimed = new Set<string>();
  for (const item of items.values()) {
    const claim = item as unknown as SampleClaimRecord;
    if (claim.lease_until > now) claimed.add(claim.request_id);
  }
  return claimed;
}

/** A conditional put: wins when the sample is unclaimed or its claim expired. `false` when lost. */
export async function claimSample(
  doc: DynamoDBDocumentClient,
  registryTable: string,
  claim: Omit<SampleClaimRecord, 'pk' | 'ttl'>,
  now: number,
): Promise<boolean> {
  const item: SampleClaimRecord = {
    pk: registryKey.sampleClaim(claim.request_id),
    ...claim,
    ttl: sampleClaimTtl(claim.lease_until),
  };
  try {
    await doc.send(
      new PutCommand({
        TableName: registryTable,
        Item: item,
        ConditionExpression: 'attribute_not_exists(pk) OR lease_until <= :now',
        ExpressionAttributeValues: { ':now': now },
      }),
    );
    return true;
  } catch (error) {
    if (isAwsError(error, 'ConditionalCheckFailedException')) return false;
    throw error;
  }
}

/**
 * Gives back a sample claim the pass could not dispatch (`sampleReleaseFor`): deletes the claim only
 * if it is still this pass's. `false` when it is not (another work item's, or gone): nothing changed.
 */
export async function releaseSample(
  doc: DynamoDBDocumentClient,
  registryTable: string,
  release: SampleRelease,
): Promise<boolean> {
  try {
    await doc.send(
      new DeleteCommand({
        TableName: registryTable,
        Key: { pk: registryKey.sampleClaim(release.request_id) },
        ConditionExpression: 'claim_token = :token',
        ExpressionAttributeValues: { ':token': release.condition.claim_token },
      }),
    );
    return true;
  } catch (error) {
    if (isAwsError(error, 'ConditionalCheckFailedException')) return false;
    throw error;
  }
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
  const items = await batchGetByKey(doc, requestIds, {
    table: futuresTable,
    keyName: 'request_id',
    consistent: true,
    attributes: ['request_id', 'tenant', 'status'],
  });
  const facts = new Map<string, SampleRowFacts>();
  for (const [id, item] of items) {
    if (typeof item.tenant === 'string' && typeof item.status === 'string') {
      facts.set(id, { tenant: item.tenant, status: item.status as FutureStatus });
    }
  }
  return facts;
}
