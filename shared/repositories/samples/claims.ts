import { DeleteCommand, type DynamoDBDocumentClient, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { batchGetByKey } from '../../aws/batch-get.js';
import { writeIfCondition } from '../../aws/conditional.js';
import { getItem } from '../../aws/get-item.js';
import type { TransactItem } from '../../aws/transact.js';
import { sampleClaimTtl } from '../../domain/planning/claim.js';
import { registryKey, type SampleClaimRecord } from '../../domain/records.js';

/**
 * The one module that reads and writes sample claims, the `registry` items `claim#<request_id>`
 * (docs/design.md#r4): the scheduler's claim, read and release, the worker's renewal, release and
 * the claim's deletion inside a sample's commit or cut (as a transaction item), and cancel_future's
 * check that no worker holds it.
 */

const claimKey = (requestId: string) => ({ pk: registryKey.sampleClaim(requestId) });

/** One sample's claim, read strongly; expired or not. */
export function readSampleClaim(
  doc: DynamoDBDocumentClient,
  table: string,
  requestId: string,
): Promise<SampleClaimRecord | undefined> {
  return getItem<SampleClaimRecord>(doc, table, claimKey(requestId));
}

/**
 * Which of `requestIds` hold a claim whose lease has not ended (strongly consistent). Expired claims
 * are left out, so the planner plans those samples again; `claimSample` may replace them.
 */
export async function readLiveSampleClaims(
  doc: DynamoDBDocumentClient,
  table: string,
  requestIds: Iterable<string>,
  now: number,
): Promise<Set<string>> {
  const claimed = new Set<string>();
  for (const claim of (await readSampleClaims(doc, table, requestIds)).values()) {
    if (claim.lease_until > now) claimed.add(claim.request_id);
  }
  return claimed;
}

/**
 * The claims of `requestIds` that exist, expired or not, by request id (strongly consistent): one
 * BatchGetItem per 100 samples, where `readSampleClaim` costs a call per sample.
 */
export async function readSampleClaims(
  doc: DynamoDBDocumentClient,
  table: string,
  requestIds: Iterable<string>,
): Promise<Map<string, SampleClaimRecord>> {
  const keys = [...requestIds].map((id) => registryKey.sampleClaim(id));
  const claims = new Map<string, SampleClaimRecord>();
  if (keys.length === 0) return claims;
  const items = await batchGetByKey(doc, keys, { table, keyName: 'pk', consistent: true });
  for (const item of items.values()) {
    const claim = item as unknown as SampleClaimRecord;
    claims.set(claim.request_id, claim);
  }
  return claims;
}

/** A conditional put: wins when the sample is unclaimed or its claim expired. `false` when lost. */
export async function claimSample(
  doc: DynamoDBDocumentClient,
  table: string,
  claim: Omit<SampleClaimRecord, 'pk' | 'ttl'>,
  now: number,
): Promise<boolean> {
  const item: SampleClaimRecord = {
    ...claimKey(claim.request_id),
    ...claim,
    ttl: sampleClaimTtl(claim.lease_until),
  };
  return writeIfCondition(() =>
    doc.send(
      new PutCommand({
        TableName: table,
        Item: item,
        ConditionExpression: 'attribute_not_exists(pk) OR lease_until <= :now',
        ExpressionAttributeValues: { ':now': now },
      }),
    ),
  );
}

/**
 * `SET lease_until IF claim_token = :token`: a long sample keeps its claim, so no tick plans it
 * again while it runs. `false` when the claim is gone or another work item's.
 */
export async function renewSampleClaim(
  doc: DynamoDBDocumentClient,
  table: string,
  requestId: string,
  claimToken: string,
  leaseUntil: number,
): Promise<boolean> {
  return writeIfCondition(() =>
    doc.send(
      new UpdateCommand({
        TableName: table,
        Key: claimKey(requestId),
        UpdateExpression: 'SET lease_until = :until, #ttl = :ttl',
        ConditionExpression: 'claim_token = :token',
        ExpressionAttributeNames: { '#ttl': 'ttl' },
        ExpressionAttributeValues: {
          ':until': leaseUntil,
          ':ttl': sampleClaimTtl(leaseUntil),
          ':token': claimToken,
        },
      }),
    ),
  );
}

/**
 * Deletes a claim only while it is still `claimToken`'s: the scheduler giving back one it could not
 * dispatch, the worker giving one back after an infrastructure error. `false` when it is another
 * work item's or gone: nothing changed.
 */
export async function releaseSampleClaim(
  doc: DynamoDBDocumentClient,
  table: string,
  requestId: string,
  claimToken: string,
): Promise<boolean> {
  return writeIfCondition(() =>
    doc.send(new DeleteCommand(sampleClaimDeleteItem(table, requestId, claimToken).Delete)),
  );
}

/** The claim's deletion on its token, as a transaction item (a sample's commit or cut). */
export function sampleClaimDeleteItem(
  table: string,
  requestId: string,
  claimToken: string,
): TransactItem & { readonly Delete: NonNullable<TransactItem['Delete']> } {
  return {
    Delete: {
      TableName: table,
      Key: claimKey(requestId),
      ConditionExpression: 'claim_token = :token',
      ExpressionAttributeValues: { ':token': claimToken },
    },
  };
}

/**
 * A transaction's check that no worker holds the sample (`cancel_future`, W9): a claimed sample runs
 * on and may finish; only a queued one is dropped.
 */
export function sampleUnclaimedItem(table: string, requestId: string, now: number): TransactItem {
  return {
    ConditionCheck: {
      TableName: table,
      Key: claimKey(requestId),
      // An expired claim holds nothing (`claimSample` takes it over the same way).
      ConditionExpression: 'attribute_not_exists(pk) OR lease_until <= :now',
      ExpressionAttributeValues: { ':now': now },
    },
  };
}
