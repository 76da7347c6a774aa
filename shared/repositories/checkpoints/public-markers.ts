import { DeleteCommand, type DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { writeIfCondition } from '../../aws/conditional.js';
import type { TransactItem } from '../../aws/transact.js';
import { listSortKey, ownerKey } from '../../domain/listing-keys.js';
import {
  type CheckpointNameRecord,
  type PublicMarkerRecord,
  registryKey,
  registryPrefix,
} from '../../domain/records.js';

/**
 * The `pub#<model>#<kind>#<name>` registry items (`PublicMarkerRecord`): a published checkpoint in
 * the `public` partition of GSI `by_owner`, for listings of what a tenant may read (C4). This module
 * alone writes them; the name record's `public` is what access checks read.
 */

export function publicMarker(
  record: Pick<
    CheckpointNameRecord,
    'pk' | 'tenant' | 'model_id' | 'kind' | 'name' | 'content_id' | 'created_at'
  >,
): PublicMarkerRecord {
  return {
    pk: registryKey.publicMarker(record.model_id, record.kind, record.name),
    owner_key: ownerKey.published,
    // The name record's own listing order (created_at, then the name's parts).
    list_sort: listSortKey(record.created_at ?? 0, record.model_id, record.kind, record.name),
    name_pk: record.pk,
    content_id: record.content_id,
    tenant: record.tenant,
    model_id: record.model_id,
    kind: record.kind,
    name: record.name,
  };
}

export function publicMarkerPutItem(table: string, marker: PublicMarkerRecord): TransactItem {
  return { Put: { TableName: table, Item: { ...marker } } };
}

/**
 * Drops the marker of a name, if any: unpublish, delete, overwrite. With `contentId`, only while it
 * marks that content (the sweeper collecting an expired checkpoint must not drop a newer one's).
 */
export function publicMarkerDeleteItem(
  table: string,
  record: Pick<CheckpointNameRecord, 'model_id' | 'kind' | 'name'>,
  contentId?: string,
): TransactItem {
  const Key = { pk: registryKey.publicMarker(record.model_id, record.kind, record.name) };
  if (contentId === undefined) return { Delete: { TableName: table, Key } };
  return {
    Delete: {
      TableName: table,
      Key,
      ConditionExpression: 'attribute_not_exists(pk) OR content_id = :content',
      ExpressionAttributeValues: { ':content': contentId },
    },
  };
}

/** The marker key of a name record's key: both are `<prefix><model>#<kind>#<name>`. */
export function publicMarkerKeyOf(namePk: string): string {
  return registryPrefix.publicMarker + namePk.slice(registryPrefix.checkpointName.length);
}

/** The sweeper's: drops the marker of collected content, if it still marks that content. */
export async function deleteCollectedMarker(
  doc: DynamoDBDocumentClient,
  table: string,
  namePk: string,
  contentId: string,
): Promise<void> {
  await writeIfCondition(() =>
    doc.send(
      new DeleteCommand({
        TableName: table,
        Key: { pk: publicMarkerKeyOf(namePk) },
        ConditionExpression: 'content_id = :content',
        ExpressionAttributeValues: { ':content': contentId },
      }),
    ),
  );
}
