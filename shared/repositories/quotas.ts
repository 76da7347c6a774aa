import { createHash } from 'node:crypto';
import { type DynamoDBDocumentClient, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { isAwsError } from '../base/errors.js';
import {
  decidePoll,
  POLL_RETRY_AFTER_MS,
  type PollHolders,
  pollRecordLimits,
  windowAt,
} from '../domain/quota-rules.js';
import { registryKey } from '../domain/records.js';

/**
 * The quota records in the registry table, read and written only here (docs/configuration.md#limits):
 * - `rate#<scope>#<subject>#<window start>`: a fixed-window counter `n`, one item per subject per
 *   second, taken with one conditional UpdateItem (`n < limit`) and deleted by TTL;
 * - `polls#<tenant>` (and `polls#<tenant>#<n>` past 64 slots, `pollRecordLimits`): the tenant's open long
 *   polls as maps of lease token -> lease end, taken with a conditional UpdateItem on the map's size
 *   and given back by removing the token. A lease that a crashed poll never gave back is removed by the
 *   next acquire that finds its map full.
 * Shared by every api container, so a limit holds however many instances run.
 */

/** Counter items outlive their window by this much before TTL deletes them (TTL is lazy anyway). */
const RATE_TTL_SECONDS = 120;
/** A poll record with no poll for this long is deleted by TTL (each acquire pushes it back). */
const POLLS_TTL_SECONDS = 24 * 3600;

export interface RateCount {
  readonly allowed: boolean;
  /** The window's end: a refused request may retry then. */
  readonly windowEnd: number;
}

/**
 * Counts one request of `subject` in the current window, unless the window already holds `limit`:
 * one UpdateItem (1 WCU, refused or not). `scope` names the limit (`submit`, `operator-read`).
 */
export async function countRequest(
  doc: DynamoDBDocumentClient,
  table: string,
  input: { readonly scope: string; readonly subject: string; readonly limit: number; readonly now: number },
): Promise<RateCount> {
  const window = windowAt(input.now);
  try {
    await doc.send(
      new UpdateCommand({
        TableName: table,
        Key: { pk: rateKey(input.scope, input.subject, window.start) },
        UpdateExpression: 'ADD n :one SET #ttl = if_not_exists(#ttl, :ttl)',
        ConditionExpression: 'attribute_not_exists(n) OR n < :limit',
        ExpressionAttributeNames: { '#ttl': 'ttl' },
        ExpressionAttributeValues: {
          ':one': 1,
          ':limit': input.limit,
          ':ttl': Math.ceil(window.end / 1000) + RATE_TTL_SECONDS,
        },
      }),
    );
    return { allowed: true, windowEnd: window.end };
  } catch (error) {
    if (isAwsError(error, 'ConditionalCheckFailedException'))
      return { allowed: false, windowEnd: window.end };
    throw error;
  }
}

export function rateKey(scope: string, subject: string, windowStart: number): string {
  return `${registryKey.rate(scope, subject)}#${windowStart}`;
}

export type PollLease =
  | { readonly acquired: true; readonly token: string; readonly record: number }
  | { readonly acquired: false; readonly retryAfterMs: number };

/** A poll lease asked for: the tenant, the poll's token, the tenant's limit, until when, and now. */
interface PollLeaseRequest {
  readonly tenant: string;
  readonly token: string;
  readonly limit: number;
  readonly until: number;
  readonly now: number;
}

/**
 * Takes one of `limit` long-poll slots of `tenant` until `until` (ms since the epoch; the poll must
 * give it back sooner, `releasePollLease`). The slots are split over the tenant's records
 * (`pollRecordLimits`: one record up to 64 slots); the lease goes in the record its token hashes to,
 * or, when that one is full, the next with room, so a poll is refused only when every record is
 * full. Usually one UpdateItem; a PutItem creates a record on its first poll; a full record is read
 * from the refused update (no extra read) and its expired leases removed in the one retry.
 */
export async function acquirePollLease(
  doc: DynamoDBDocumentClient,
  table: string,
  input: PollLeaseRequest,
): Promise<PollLease> {
  const limits = pollRecordLimits(input.limit);
  const first = createHash('sha256').update(input.token).digest().readUInt32BE(0) % limits.length;
  let retryAfterMs = POLL_RETRY_AFTER_MS;
  for (let tried = 0; tried < limits.length; tried++) {
    const record = (first + tried) % limits.length;
    const lease = await acquireInRecord(doc, table, record, { ...input, limit: limits[record] ?? 0 });
    if (lease.acquired) return lease;
    retryAfterMs = Math.min(retryAfterMs, lease.retryAfterMs);
  }
  return { acquired: false, retryAfterMs };
}

/** `acquirePollLease` in one of the tenant's records, holding at most `limit` leases. */
async function acquireInRecord(
  doc: DynamoDBDocumentClient,
  table: string,
  record: number,
  input: PollLeaseRequest,
): Promise<PollLease> {
  const pk = registryKey.polls(input.tenant, record);
  const ttl = Math.ceil(input.now / 1000) + POLLS_TTL_SECONDS;
  const take = async (expired: readonly string[]): Promise<PollHolders | 'taken' | 'absent'> => {
    const names: Record<string, string> = { '#h': 'holders', '#t': input.token, '#ttl': 'ttl' };
    const values: Record<string, unknown> = { ':until': input.until, ':ttl': ttl, ':limit': input.limit };
    const present = expired.map((token, i) => {
      names[`#e${i}`] = token;
      return `attribute_exists(#h.#e${i})`;
    });
    // With k expired leases removed in the same write, the map may hold up to limit - 1 + k before it.
    values[':limit'] = input.limit + expired.length;
    try {
      await doc.send(
        new UpdateCommand({
          TableName: table,
          Key: { pk },
          UpdateExpression: `SET #h.#t = :until, #ttl = :ttl${
            expired.length === 0 ? '' : ` REMOVE ${expired.map((_, i) => `#h.#e${i}`).join(', ')}`
          }`,
          ConditionExpression: ['attribute_exists(#h)', 'size(#h) < :limit', ...present].join(' AND '),
          ExpressionAttributeNames: names,
          ExpressionAttributeValues: values,
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      );
      return 'taken';
    } catch (error) {
      if (!isAwsError(error, 'ConditionalCheckFailedException')) throw error;
      const item = (error as { Item?: Parameters<typeof unmarshall>[0] }).Item;
      const holders = item === undefined ? undefined : (unmarshall(item).holders as PollHolders | undefined);
      return holders ?? 'absent';
    }
  };

  for (let attempt = 0, expired: readonly string[] = []; attempt < 3; attempt++) {
    const outcome = await take(expired);
    if (outcome === 'taken') return { acquired: true, token: input.token, record };
    if (outcome === 'absent') {
      // The tenant's first poll (or TTL deleted the record): create it holding this lease.
      try {
        await doc.send(
          new PutCommand({
            TableName: table,
            Item: { pk, holders: { [input.token]: input.until }, ttl },
            ConditionExpression: 'attribute_not_exists(pk)',
          }),
        );
        return { acquired: true, token: input.token, record };
      } catch (error) {
        if (!isAwsError(error, 'ConditionalCheckFailedException')) throw error;
        expired = [];
        continue;
      }
    }
    const decision = decidePoll(outcome, input.limit, input.now);
    if (decision.kind === 'full') return { acquired: false, retryAfterMs: decision.retryAfterMs };
    expired = decision.kind === 'reap' ? decision.expired : [];
  }
  // Lost three races in a row to other polls of this tenant: the slots are contended, so full.
  return { acquired: false, retryAfterMs: 1_000 };
}

/** Gives a poll's slot back to its record: one UpdateItem, a no-op when the lease is already gone. */
export async function releasePollLease(
  doc: DynamoDBDocumentClient,
  table: string,
  input: { readonly tenant: string; readonly token: string; readonly record: number },
): Promise<void> {
  try {
    await doc.send(
      new UpdateCommand({
        TableName: table,
        Key: { pk: registryKey.polls(input.tenant, input.record) },
        UpdateExpression: 'REMOVE #h.#t',
        // Never create the record (an update of a missing item would).
        ConditionExpression: 'attribute_exists(#h)',
        ExpressionAttributeNames: { '#h': 'holders', '#t': input.token },
      }),
    );
  } catch (error) {
    if (!isAwsError(error, 'ConditionalCheckFailedException')) throw error;
  }
}
