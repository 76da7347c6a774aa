import { randomUUID } from 'node:crypto';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { backoffDelay, DEFAULT_BACKOFF, realSleep } from '../../aws/backoff.js';
import { type TransactItem, transactWrite } from '../../aws/transact.js';
import { RetryLaterError } from '../../base/errors.js';
import { type CheckpointRouteKey, expiryOf } from '../../domain/checkpoint-life.js';
import type { CheckpointNameRecord } from '../../domain/records.js';
import { gcEntry, gcEntryDeleteItem, gcEntryPutItem } from './gc.js';
import { liveOwnedCondition, requireLiveCheckpoint } from './names.js';
import { publicMarker, publicMarkerDeleteItem, publicMarkerPutItem } from './public-markers.js';

/**
 * The owner's writes to a committed checkpoint (C3-C5), each one transaction on the name record
 * (conditioned on it still being the live content read, `liveOwnedCondition`) and the records that
 * follow it: the gc entry, the public marker. A lost race re-reads: a checkpoint deleted, expired or
 * overwritten meanwhile then answers 404, as an unknown one does.
 */

export interface LifecycleStore {
  readonly doc: DynamoDBDocumentClient;
  readonly table: string;
}

/** Re-reads after a lost race or contention before answering "try again". */
const ATTEMPTS = 5;

/**
 * Reads the owner's live checkpoint, plans its items (none: nothing to change, answered as done),
 * writes them in one transaction.
 */
async function ownerWrite(
  store: LifecycleStore,
  key: CheckpointRouteKey,
  tenant: string,
  now: number,
  plan: (record: CheckpointNameRecord) => readonly TransactItem[],
): Promise<CheckpointNameRecord> {
  for (let attempt = 0; ; attempt++) {
    const record = await requireLiveCheckpoint(store.doc, store.table, key, tenant, { now, access: 'owner' });
    const items = plan(record);
    if (items.length === 0) return record;
    const outcome = await transactWrite(items, randomUUID(), store.doc);
    if (outcome.ok) return record;
    if (attempt + 1 >= ATTEMPTS) {
      throw new RetryLaterError(`checkpoint is being changed by another request; retry shortly`);
    }
    await realSleep(backoffDelay(attempt + 1, DEFAULT_BACKOFF, Math.random));
  }
}

function nameUpdate(
  store: LifecycleStore,
  record: CheckpointNameRecord,
  now: number,
  update: string,
  values: Record<string, unknown> = {},
): TransactItem {
  const condition = liveOwnedCondition(record, now);
  return {
    Update: {
      TableName: store.table,
      Key: { pk: record.pk },
      UpdateExpression: update,
      ...condition,
      ExpressionAttributeValues: { ...condition.ExpressionAttributeValues, ...values },
    },
  };
}

/**
 * C3: the name record goes (from listings, resolveCheckpoint and the worker's loads at once), with a
 * gc entry due now for its blobs and archive and its public marker; the sweeper deletes the objects.
 */
export async function deleteCheckpoint(
  store: LifecycleStore,
  key: CheckpointRouteKey,
  tenant: string,
  now: number,
): Promise<void> {
  await ownerWrite(store, key, tenant, now, (record) => [
    { Delete: { TableName: store.table, Key: { pk: record.pk }, ...liveOwnedCondition(record, now) } },
    gcEntryPutItem(store.table, gcEntry(record, now)),
    publicMarkerDeleteItem(store.table, record),
  ]);
}

/**
 * C4: `public` on the name record (what access checks read) and the listing marker, or both gone.
 * Already so: nothing is written and the answer is the same success (see docs/design.md#c4).
 */
export async function setCheckpointPublic(
  store: LifecycleStore,
  key: CheckpointRouteKey,
  tenant: string,
  now: number,
  published: boolean,
): Promise<void> {
  await ownerWrite(store, key, tenant, now, (record) => {
    if ((record.public === true) === published) return [];
    if (published) {
      return [
        nameUpdate(store, record, now, 'SET #public = :true', { ':true': true }),
        publicMarkerPutItem(store.table, publicMarker(record)),
      ].map(withPublicName);
    }
    return [
      nameUpdate(store, record, now, 'REMOVE #public'),
      publicMarkerDeleteItem(store.table, record),
    ].map(withPublicName);
  });
}

/** `public` is a DynamoDB reserved word: the name record's updates name it through `#public`. */
function withPublicName(item: TransactItem): TransactItem {
  if (item.Update === undefined) return item;
  return {
    Update: {
      ...item.Update,
      ExpressionAttributeNames: { ...item.Update.ExpressionAttributeNames, '#public': 'public' },
    },
  };
}

/**
 * C5: `expires_at` = now + ttl, and the content's gc entry moved to that time; null clears both.
 * Returns the new expiry (undefined: never).
 */
export async function setCheckpointTtl(
  store: LifecycleStore,
  key: CheckpointRouteKey,
  tenant: string,
  now: number,
  ttlSeconds: number | null,
): Promise<number | undefined> {
  const expiresAt = expiryOf(now, ttlSeconds);
  await ownerWrite(store, key, tenant, now, (record) => {
    if (expiresAt === undefined) {
      return [
        nameUpdate(store, record, now, 'REMOVE expires_at'),
        gcEntryDeleteItem(store.table, record.content_id),
      ];
    }
    return [
      nameUpdate(store, record, now, 'SET expires_at = :expires', { ':expires': expiresAt }),
      gcEntryPutItem(store.table, gcEntry(record, expiresAt)),
    ];
  });
  return expiresAt;
}

/**
 * C2, for a checkpoint saved before archives were built at save: records the archive the API just
 * built, on the content it was built from. A lost race leaves the object for that content's gc.
 */
export async function recordArchive(
  store: LifecycleStore,
  record: CheckpointNameRecord,
  archiveKey: string,
  now: number,
): Promise<boolean> {
  const condition = liveOwnedCondition(record, now);
  const outcome = await transactWrite(
    [
      {
        Update: {
          TableName: store.table,
          Key: { pk: record.pk },
          UpdateExpression: 'SET archive_key = :archive',
          ...condition,
          ExpressionAttributeValues: { ...condition.ExpressionAttributeValues, ':archive': archiveKey },
        },
      },
      // A TTL set before the archive existed: its gc entry must now collect the archive too.
      ...(record.expires_at === undefined
        ? []
        : [gcEntryPutItem(store.table, gcEntry({ ...record, archive_key: archiveKey }, record.expires_at))]),
    ],
    randomUUID(),
    store.doc,
  );
  return outcome.ok;
}
