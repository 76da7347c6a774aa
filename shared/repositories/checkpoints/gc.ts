import { DeleteCommand, type DynamoDBDocumentClient, PutCommand, QueryCommand } from '@aws-sdk/lib-dynamodb';
import { writeIfCondition } from '../../aws/conditional.js';
import type { TransactItem } from '../../aws/transact.js';
import { BY_OWNER_INDEX } from '../../base/topology.js';
import { gcDueBound, gcSortKey } from '../../domain/checkpoint-life.js';
import { ownerKey } from '../../domain/listing-keys.js';
import { type CheckpointNameRecord, type GcEntryRecord, registryKey } from '../../domain/records.js';
import { readRegistryItem } from '../registry.js';
import { checkpointObjectKeys } from './names.js';

/**
 * The `gc#<content_id>` registry items (`GcEntryRecord`): a checkpoint content the sweeper collects
 * once due. This module alone reads and writes them.
 */

/** The partition of the registry's `by_owner` index that holds the entries, sorted by due time. */
const GC_PARTITION = ownerKey.gc;

export function gcEntry(
  record: Pick<CheckpointNameRecord, 'pk' | 'model_id' | 'content_id' | 'blob_key' | 'archive_key'>,
  due: number,
): GcEntryRecord {
  return {
    pk: registryKey.gcEntry(record.content_id),
    owner_key: GC_PARTITION,
    list_sort: gcSortKey(due, record.content_id),
    due,
    content_id: record.content_id,
    name_pk: record.pk,
    blob_keys: checkpointObjectKeys(record),
  };
}

/**
 * The entry of a content not saved yet (a TTL given at submit): no objects, since their keys will be
 * the committing run's (E3); the sweeper takes them from the name record once it holds the content.
 */
export function unsavedGcEntry(
  record: Pick<CheckpointNameRecord, 'pk' | 'model_id' | 'content_id'>,
  due: number,
): GcEntryRecord {
  return {
    ...gcEntry({ pk: record.pk, model_id: record.model_id, content_id: record.content_id }, due),
    blob_keys: [],
  };
}

/** Puts (or moves: one entry per content) a content's gc entry. */
export function gcEntryPutItem(table: string, entry: GcEntryRecord): TransactItem {
  return { Put: { TableName: table, Item: { ...entry } } };
}

/** Drops a content's gc entry: its TTL was cleared. */
export function gcEntryDeleteItem(table: string, contentId: string): TransactItem {
  return { Delete: { TableName: table, Key: { pk: registryKey.gcEntry(contentId) } } };
}

/**
 * The keys of entries due at `now`, oldest first, one page (`limit`) of one Query of the index's
 * `gc` partition: never a scan. The index is eventually consistent, so the caller reads each entry
 * again strongly (`readGcEntry`) before acting on it.
 */
export async function dueGcEntryKeys(
  doc: DynamoDBDocumentClient,
  table: string,
  now: number,
  limit: number,
): Promise<string[]> {
  const page = await doc.send(
    new QueryCommand({
      TableName: table,
      IndexName: BY_OWNER_INDEX,
      KeyConditionExpression: 'owner_key = :gc AND list_sort < :bound',
      ExpressionAttributeValues: { ':gc': GC_PARTITION, ':bound': gcDueBound(now) },
      ProjectionExpression: 'pk',
      Limit: limit,
    }),
  );
  return (page.Items ?? []).flatMap((item) => (typeof item.pk === 'string' ? [item.pk] : []));
}

export function readGcEntry(
  doc: DynamoDBDocumentClient,
  table: string,
  pk: string,
): Promise<GcEntryRecord | undefined> {
  return readRegistryItem<GcEntryRecord>(doc, table, pk);
}

/** The collected entry's removal, on its due time (a moved entry is not this one). */
export async function deleteCollectedGcEntry(
  doc: DynamoDBDocumentClient,
  table: string,
  entry: GcEntryRecord,
): Promise<void> {
  await writeIfCondition(() =>
    doc.send(
      new DeleteCommand({
        TableName: table,
        Key: { pk: entry.pk },
        ConditionExpression: 'due = :due',
        ExpressionAttributeValues: { ':due': entry.due },
      }),
    ),
  );
}

/** Moves a due entry to a later time, unless something moved or removed it since it was read. */
export async function moveGcEntry(
  doc: DynamoDBDocumentClient,
  table: string,
  entry: GcEntryRecord,
  due: number,
): Promise<boolean> {
  return writeIfCondition(() =>
    doc.send(
      new PutCommand({
        TableName: table,
        Item: { ...entry, due, list_sort: gcSortKey(due, entry.content_id) },
        ConditionExpression: 'due = :due',
        ExpressionAttributeValues: { ':due': entry.due },
      }),
    ),
  );
}
