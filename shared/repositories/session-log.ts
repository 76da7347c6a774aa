import { type DynamoDBDocumentClient, PutCommand, QueryCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { writeIfCondition } from '../aws/conditional.js';
import { getItem } from '../aws/get-item.js';
import type { TransactItem } from '../aws/transact.js';
import { BY_PARENT_INDEX } from '../base/topology.js';
import { parentKey } from '../domain/listing-keys.js';
import { registryKey } from '../domain/records.js';
import { type LogEntry, type LogState, padPosition, positionOfSortKey } from '../domain/session-log.js';

/**
 * The completion logs of session futures (W9; rules in shared/domain/session-log.ts): registry items
 * `sfl#<log>#<position>`, listed by position in `by_parent`'s `sfl#<log>` partition (`list_sort` =
 * `<position>#<request_id>`, `status` = finished, failed or void), the log's position counter
 * `sfc#<log>` and a sampling session's clone counter `sfj#<sampling session>`. Every read and write of
 * them is here.
 */

/** Entries outlive any poll that could still want them: a week, like an idle SDK session. */
const LOG_RETENTION_SECONDS = 7 * 24 * 3600;

function expiry(now: number): number {
  return Math.floor(now / 1000) + LOG_RETENTION_SECONDS;
}

/** Adds `count` to a registry counter item and answers its new value (an atomic ADD: never a conflict). */
async function increment(
  doc: DynamoDBDocumentClient,
  table: string,
  pk: string,
  now: number,
  count = 1,
): Promise<number> {
  const answer = await doc.send(
    new UpdateCommand({
      TableName: table,
      Key: { pk },
      UpdateExpression: 'ADD #last :count SET #ttl = :ttl',
      ExpressionAttributeNames: { '#last': 'last', '#ttl': 'ttl' },
      ExpressionAttributeValues: { ':count': count, ':ttl': expiry(now) },
      ReturnValues: 'UPDATED_NEW',
    }),
  );
  const value = answer.Attributes?.last;
  if (typeof value !== 'number') throw new Error(`counter ${pk} answered no number`);
  return value;
}

/** The next position of a log, taken by a commit just before its transaction (1 for the first). */
export function takeLogPosition(
  doc: DynamoDBDocumentClient,
  table: string,
  logKey: string,
  now: number,
): Promise<number> {
  return increment(doc, table, registryKey.sessionLogCounter(logKey), now);
}

/**
 * The next `count` positions of a log at once, for the commits of several samples in one transaction:
 * answers the first; the others follow it. One ADD, as one position costs.
 */
export async function takeLogPositions(
  doc: DynamoDBDocumentClient,
  table: string,
  logKey: string,
  count: number,
  now: number,
): Promise<number> {
  if (!Number.isSafeInteger(count) || count < 1) throw new RangeError(`cannot take ${count} log positions`);
  const last = await increment(doc, table, registryKey.sessionLogCounter(logKey), now, count);
  return last - count + 1;
}

/** A new clone of a sampling session (join_sampling_session): 1 for the first; the original is 0. */
export function takeCloneId(
  doc: DynamoDBDocumentClient,
  table: string,
  samplingSessionId: string,
  now: number,
): Promise<number> {
  return increment(doc, table, registryKey.samplerClones(samplingSessionId), now);
}

export interface LogEntryInput {
  readonly logKey: string;
  readonly position: number;
  readonly requestId: string;
  readonly state: LogState;
  readonly tenant: string;
  readonly now: number;
}

function entryItem(
  logKey: string,
  position: number,
  state: LogEntry['state'],
  fields: Record<string, unknown>,
) {
  const padded = padPosition(position);
  return {
    pk: registryKey.sessionLogEntry(logKey, padded),
    parent_key: parentKey.sessionLog(logKey),
    list_sort: `${padded}#${typeof fields.request_id === 'string' ? fields.request_id : 'void'}`,
    status: state,
    ...fields,
  };
}

/** A commit's log entry, as a transaction item: only where no entry and no void is (the position is its own). */
export function logEntryItem(table: string, entry: LogEntryInput): TransactItem {
  return {
    Put: {
      TableName: table,
      Item: entryItem(entry.logKey, entry.position, entry.state, {
        request_id: entry.requestId,
        tenant: entry.tenant,
        ttl: expiry(entry.now),
      }),
      ConditionExpression: 'attribute_not_exists(pk)',
    },
  };
}

function entryOf(item: Record<string, unknown>): LogEntry | undefined {
  const sortKey = item.list_sort;
  const state = item.status;
  if (typeof sortKey !== 'string' || (state !== 'finished' && state !== 'failed' && state !== 'void')) {
    return undefined;
  }
  const position = positionOfSortKey(sortKey);
  if (state === 'void') return { position, state };
  return { position, state, request_id: sortKey.slice(sortKey.indexOf('#') + 1) };
}

/**
 * The log's entries after `cursor`, in position order, from the index (one Query; eventually
 * consistent, so an entry may show late: the walk in shared/domain/session-log.ts stops at its gap).
 */
export async function readLogAfter(
  doc: DynamoDBDocumentClient,
  table: string,
  logKey: string,
  cursor: number,
  limit: number,
): Promise<LogEntry[]> {
  const answer = await doc.send(
    new QueryCommand({
      TableName: table,
      IndexName: BY_PARENT_INDEX,
      KeyConditionExpression: 'parent_key = :log AND list_sort > :after',
      ExpressionAttributeValues: {
        ':log': parentKey.sessionLog(logKey),
        // Every sort key of a later position sorts after this one (`#` is below every digit).
        ':after': `${padPosition(cursor)}#~`,
      },
      Limit: limit,
    }),
  );
  return (answer.Items ?? []).flatMap((item) => entryOf(item) ?? []);
}

/** One position's entry, read strongly from the table (the index may not show it yet). */
export async function readLogEntry(
  doc: DynamoDBDocumentClient,
  table: string,
  logKey: string,
  position: number,
): Promise<LogEntry | undefined> {
  const item = await getItem<Record<string, unknown>>(
    doc,
    table,
    { pk: registryKey.sessionLogEntry(logKey, padPosition(position)) },
    true,
  );
  return item === undefined ? undefined : entryOf(item);
}

/** Voids a position no commit filled; false when an entry is there after all. */
export function voidLogPosition(
  doc: DynamoDBDocumentClient,
  table: string,
  logKey: string,
  position: number,
  now: number,
): Promise<boolean> {
  return writeIfCondition(() =>
    doc.send(
      new PutCommand({
        TableName: table,
        Item: entryItem(logKey, position, 'void', { ttl: expiry(now) }),
        ConditionExpression: 'attribute_not_exists(pk)',
      }),
    ),
  );
}
