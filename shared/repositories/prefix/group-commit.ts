import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { type BackoffPolicy, backoffDelay, type Clock } from '../../aws/backoff.js';
import { RETRYABLE_ERROR_NAMES } from '../../aws/transient-errors.js';
import { isAwsError } from '../../base/errors.js';
import { type AbortRecord, type CommitRecord, type GroupRecord, parseGroupRecord } from './records.js';
import type { PrefixTable } from './table.js';

/**
 * The group commit (P2): commit and abort race for one record, each a put on condition
 * `attribute_not_exists(pk)`, so exactly one of them ever lands. Any outcome that is not a clean
 * success is settled by a strongly consistent read; if the record is still absent, an abort marker
 * is written so a commit still in flight can no longer land.
 */

export type GroupOutcome =
  | { readonly state: 'committed'; readonly mine: boolean }
  | { readonly state: 'aborted'; readonly mine: boolean }
  /** Could not be settled (the table kept failing): treated as not committed by the writer. */
  | { readonly state: 'unknown'; readonly error: unknown };

export interface GroupCommitContext {
  readonly clock: Clock;
  readonly backoff: BackoffPolicy;
  /** Cancels the commit put in flight (its outcome is then settled). Never passed to settling. */
  readonly signal?: AbortSignal;
  /** False once no new write may start (deadline, aborted cut): stops commit retries. */
  readonly mayStartWrite: () => boolean;
}

const IF_ABSENT = 'attribute_not_exists(pk)';

export async function readGroupRecord(table: PrefixTable, key: string): Promise<GroupRecord | undefined> {
  const { Item } = await table.doc.send(
    new GetCommand({ TableName: table.tableName, Key: { pk: key }, ConsistentRead: true }),
  );
  return Item === undefined ? undefined : parseGroupRecord(Item);
}

function outcomeOf(record: GroupRecord, writer: string): GroupOutcome {
  return { state: record.status, mine: record.writer === writer };
}

function putIfAbsent(table: PrefixTable, record: GroupRecord, signal?: AbortSignal): Promise<unknown> {
  return table.doc.send(
    new PutCommand({ TableName: table.tableName, Item: record, ConditionExpression: IF_ABSENT }),
    signal === undefined ? {} : { abortSignal: signal },
  );
}

/**
 * Makes the record exist and reports what it says: read it; if absent, race an abort marker for it.
 * Cleanup, not new data, so it runs after the deadline too.
 */
export async function settleGroup(
  table: PrefixTable,
  abort: AbortRecord,
  ctx: Pick<GroupCommitContext, 'clock' | 'backoff'>,
  firstTry: 'read' | 'abort' = 'read',
): Promise<GroupOutcome> {
  let lastError: unknown;
  let step = firstTry;
  for (let retry = 0; retry <= ctx.backoff.maxRetries; retry++) {
    try {
      if (step === 'read') {
        const record = await readGroupRecord(table, abort.pk);
        if (record !== undefined) return outcomeOf(record, abort.writer);
      }
      step = 'read';
      await putIfAbsent(table, abort);
      return { state: 'aborted', mine: true };
    } catch (error) {
      lastError = error;
      // A lost condition means someone's record is there now: the next read tells whose.
      if (isAwsError(error, 'ConditionalCheckFailedException')) continue;
      await ctx.clock.sleep(backoffDelay(retry, ctx.backoff, ctx.clock.random));
    }
  }
  return { state: 'unknown', error: lastError };
}

export function abortRecordFor(record: Pick<CommitRecord, 'pk' | 'writer' | 'attempt' | 'ttl'>, at: number) {
  const abort: AbortRecord = {
    pk: record.pk,
    kind: 'group',
    status: 'aborted',
    writer: record.writer,
    attempt: record.attempt,
    ttl: record.ttl,
    at,
  };
  return abort;
}

/** Writes the commit record, retrying throttling while writes may start; settles anything else. */
export async function commitGroup(
  table: PrefixTable,
  record: CommitRecord,
  ctx: GroupCommitContext,
): Promise<GroupOutcome> {
  for (let retry = 0; ; retry++) {
    try {
      await putIfAbsent(table, record, ctx.signal);
      return { state: 'committed', mine: true };
    } catch (error) {
      if (isAwsError(error, 'ConditionalCheckFailedException')) break;
      const throttled = isAwsError(error, ...RETRYABLE_ERROR_NAMES) && !ctx.signal?.aborted;
      if (!throttled || retry >= ctx.backoff.maxRetries) break;
      await ctx.clock.sleep(backoffDelay(retry, ctx.backoff, ctx.clock.random), ctx.signal);
      if (!ctx.mayStartWrite()) break;
    }
  }
  return settleGroup(table, abortRecordFor(record, ctx.clock.now()), ctx, 'read');
}

/** Aborts a group unless its commit landed first; reports which way it went. */
export function abortGroup(
  table: PrefixTable,
  abort: AbortRecord,
  ctx: Pick<GroupCommitContext, 'clock' | 'backoff'>,
): Promise<GroupOutcome> {
  return settleGroup(table, abort, ctx, 'abort');
}
