import { DeleteCommand, type DynamoDBDocumentClient, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { batchGetByKey } from '../../aws/batch-get.js';
import { writeIfCondition } from '../../aws/conditional.js';
import { getItem } from '../../aws/get-item.js';
import { Limiter } from '../../aws/limiter.js';
import { type TransactItem, transactWrite } from '../../aws/transact.js';
import { sha256Hex } from '../../base/ids.js';
import { sampleClaimTtl } from '../../domain/planning/claim.js';
import { TRANSACT_WRITE_MAX_ACTIONS } from '../../domain/planning/limits.js';
import { registryKey, type SampleClaimRecord } from '../../domain/records.js';

/**
 * The one module that reads and writes sample claims, the `registry` items `claim#<request_id>`
 * (docs/design.md#r4): the scheduler's claim, read and release, the worker's renewal, release and
 * the claim's deletion inside a sample's commit or cut (as a transaction item), and cancel_future's
 * check that no worker holds it or, when one does, its cancel mark (`cancel_requested`).
 *
 * A running sample's cancel (W9) is a mark on its claim: the worker holding the claim reads it
 * (`readCancelledClaims`), stops the call at its next step and commits it cancelled. Every other end
 * of the sample (its commit, its cut) deletes the claim only while it has no mark, so once a cancel
 * was answered `cancelled: true` nothing but the cancelled end lands: a claim whose lease ended (its
 * worker died) is taken over by the next `claimSample` with its mark, so the next worker ends it
 * cancelled.
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

/**
 * A conditional update: wins when the sample is unclaimed or its claim expired; `false` when lost.
 * An expired claim is taken over, not replaced: its `claims` count goes on (the dispatches since the
 * claim was last deleted, by a commit, a cut or a release, so each one past the first is a run whose
 * worker vanished: E2's attempts, per sample) and a cancel mark stays (W9).
 */
export async function claimSample(
  doc: DynamoDBDocumentClient,
  table: string,
  claim: NewSampleClaim,
  now: number,
): Promise<boolean> {
  return writeIfCondition(() => doc.send(new UpdateCommand(claimUpdate(table, claim, now))));
}

/** What the scheduler writes to claim a sample (the rest of `SampleClaimRecord` is kept or derived). */
export type NewSampleClaim = Omit<SampleClaimRecord, 'pk' | 'ttl' | 'cancel_requested' | 'claims'>;

function claimUpdate(table: string, claim: NewSampleClaim, now: number) {
  return {
    TableName: table,
    Key: claimKey(claim.request_id),
    UpdateExpression:
      'SET request_id = :request, claim_token = :token, work_item_id = :item, lease_until = :until, #ttl = :ttl ADD claims :one',
    ConditionExpression: 'attribute_not_exists(pk) OR lease_until <= :now',
    ExpressionAttributeNames: { '#ttl': 'ttl' },
    ExpressionAttributeValues: {
      ':request': claim.request_id,
      ':token': claim.claim_token,
      ':item': claim.work_item_id,
      ':until': claim.lease_until,
      ':ttl': sampleClaimTtl(claim.lease_until),
      ':one': 1,
      ':now': now,
    },
  };
}

/** Claims one TransactWriteItems holds. */
const CLAIMS_PER_TRANSACTION = TRANSACT_WRITE_MAX_ACTIONS;

/**
 * Several samples' claims, each the same conditional update as `claimSample`'s, answered in order
 * (`true`: landed). They go as one TransactWriteItems per 100, which lands whole when no other tick
 * took any of them meanwhile (the usual case: the tick lock keeps ticks apart); a transaction that
 * does not land changed nothing, and its claims are then made one by one, so each is won or lost
 * exactly as alone. One claim is one UpdateItem. An error whose outcome is unknown is thrown: the
 * caller gives back every claim of the call (a release deletes only a claim that is its own).
 */
export async function claimSamples(
  doc: DynamoDBDocumentClient,
  table: string,
  claims: readonly NewSampleClaim[],
  now: number,
  concurrency = 16,
): Promise<boolean[]> {
  const limiter = new Limiter(concurrency);
  const oneByOne = (each: readonly NewSampleClaim[]) =>
    Promise.all(each.map((claim) => limiter.run(() => claimSample(doc, table, claim, now))));
  if (claims.length <= 1) return oneByOne(claims);
  const groups: NewSampleClaim[][] = [];
  for (let at = 0; at < claims.length; at += CLAIMS_PER_TRANSACTION) {
    groups.push(claims.slice(at, at + CLAIMS_PER_TRANSACTION));
  }
  const answers = await Promise.all(
    groups.map(async (group) => {
      if (group.length === 1) return oneByOne(group);
      const token = sha256Hex(
        ['claims', now, ...group.flatMap((claim) => [claim.request_id, claim.claim_token])].join('\u0000'),
      ).slice(0, 36);
      const outcome = await transactWrite(
        group.map((claim) => ({ Update: claimUpdate(table, claim, now) })),
        token,
        doc,
      );
      return outcome.ok ? group.map(() => true) : oneByOne(group);
    }),
  );
  return answers.flat();
}

/**
 * cancel_future of a running sample (W9): marks its claim while a worker holds it (the lease has not
 * ended). `false` when no live claim is there (the sample is queued, or ended).
 */
export async function markSampleCancelled(
  doc: DynamoDBDocumentClient,
  table: string,
  requestId: string,
  now: number,
): Promise<boolean> {
  return writeIfCondition(() =>
    doc.send(
      new UpdateCommand({
        TableName: table,
        Key: claimKey(requestId),
        UpdateExpression: 'SET cancel_requested = if_not_exists(cancel_requested, :now)',
        ConditionExpression: 'attribute_exists(pk) AND lease_until > :now',
        ExpressionAttributeValues: { ':now': now },
      }),
    ),
  );
}

/**
 * Which of the `claims` (request id to claim token) are still those tokens' and carry a cancel mark
 * (strongly consistent, one BatchGetItem per 100): the samples a worker must end cancelled.
 */
export async function readCancelledClaims(
  doc: DynamoDBDocumentClient,
  table: string,
  claims: ReadonlyMap<string, string>,
): Promise<Set<string>> {
  const cancelled = new Set<string>();
  for (const [requestId, claim] of await readSampleClaims(doc, table, claims.keys())) {
    if (claim.cancel_requested !== undefined && claim.claim_token === claims.get(requestId)) {
      cancelled.add(requestId);
    }
  }
  return cancelled;
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

/**
 * The claim's deletion on its token, as a transaction item (a sample's commit or cut). Unless the
 * sample ends `cancelled`, only while the claim has no cancel mark: a cancel answered `true` wins.
 */
export function sampleClaimDeleteItem(
  table: string,
  requestId: string,
  claimToken: string,
  cancelled = false,
): TransactItem & { readonly Delete: NonNullable<TransactItem['Delete']> } {
  return {
    Delete: {
      TableName: table,
      Key: claimKey(requestId),
      ConditionExpression: cancelled
        ? 'claim_token = :token'
        : 'claim_token = :token AND attribute_not_exists(cancel_requested)',
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
