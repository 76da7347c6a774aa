import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { TransactItem } from '../aws/transact.js';
import { checkpointListingKeys } from '../domain/listing-keys.js';
import { type CheckpointKind, type CheckpointNameRecord, registryKey } from '../domain/records.js';
import { formatCheckpointPath, parseCheckpointPath } from '../domain/tinker-path.js';
import { NotFoundError, ValidationError } from '../errors.js';
import { readFuture } from './futures.js';
import { readRegistryItem } from './registry.js';

export async function readCheckpointName(
  doc: DynamoDBDocumentClient,
  table: string,
  pk: string,
): Promise<CheckpointNameRecord | undefined> {
  return readRegistryItem<CheckpointNameRecord>(doc, table, pk);
}

/**
 * Whether a name record is a stale reservation: still pending, reserved by a save whose future (read
 * strongly) ended failed. Such a save never commits the name (a commit needs its future pending, and
 * failed is final). A save failed with a user error frees its name at commit; one failed without
 * running (E2's attempt limit, a missing payload) cannot, since its worker reads no payload and so
 * does not know the name: the next save of that name takes it over instead.
 */
export async function staleReservation(
  doc: DynamoDBDocumentClient,
  futuresTable: string,
  record: CheckpointNameRecord,
): Promise<boolean> {
  if (record.status !== 'pending') return false;
  const future = await readFuture(doc, futuresTable, record.request_id, true);
  return future?.status === 'failed';
}

const EXPECTED_PATH: Readonly<Record<CheckpointKind | 'any', string>> = {
  weights: 'tinker://<model_id>/weights/<name> (from save_weights)',
  sampler: 'tinker://<model_id>/sampler_weights/<name> (from save_weights_for_sampler)',
  any: 'tinker://<model_id>/weights/<name> or tinker://<model_id>/sampler_weights/<name>',
};

/** The path this server issues for a checkpoint, whatever form its record stored (W5). */
export function issuedPath(record: Pick<CheckpointNameRecord, 'model_id' | 'kind' | 'name'>): string {
  return formatCheckpointPath({ modelId: record.model_id, kind: record.kind, name: record.name });
}

/**
 * Resolves a `tinker://` path to the tenant's checkpoint name record: of the wanted kind, or of
 * either (`any`). Every form the parser accepts resolves, the legacy sampler form included. A path
 * of the wrong shape or kind is a 400; a checkpoint that does not exist, or is another tenant's, a
 * 404. The record may still be pending (reserved, not yet committed): callers decide what that means.
 */
export async function resolveCheckpoint(
  doc: DynamoDBDocumentClient,
  table: string,
  path: string,
  kind: CheckpointKind | 'any',
  tenant: string,
  field: string,
): Promise<CheckpointNameRecord> {
  const parsed = parseCheckpointPath(path);
  const expected = EXPECTED_PATH[kind];
  if (parsed === undefined)
    throw new ValidationError(`${field}: must look like ${expected}`, { context: { field } });
  if (kind !== 'any' && parsed.kind !== kind) {
    throw new ValidationError(
      `${field}: ${formatCheckpointPath(parsed)} is a ${parsed.kind} checkpoint; expected ${expected}`,
      {
        context: { field },
      },
    );
  }
  const record = await readCheckpointName(
    doc,
    table,
    registryKey.checkpointName(parsed.modelId, parsed.kind, parsed.name),
  );
  if (record === undefined || record.tenant !== tenant) throw checkpointNotFound(path, field);
  return record;
}

/** The one answer for a path naming no checkpoint of the caller's: unknown, another tenant's, or dead. */
export function checkpointNotFound(path: string, field: string): NotFoundError {
  return new NotFoundError(`checkpoint ${path} not found`, { context: { field } });
}

/** What a save's commit does to the name record its intake reserved. */
export type CheckpointEffect =
  | {
      readonly action: 'commit';
      readonly pk: string;
      readonly blob_key: string;
      /** Who and what the checkpoint is, for its listing keys (C1); absent for an unnamed sampler save. */
      readonly listing?: Pick<CheckpointNameRecord, 'tenant' | 'model_id' | 'kind' | 'name'>;
    }
  | { readonly action: 'release'; readonly pk: string };

/**
 * A save's name record in its commit, as a transaction item: `SET status = committed, blob_key` and
 * the commit time, with the listing keys that put it in `by_owner` and `by_parent` (C1), on
 * `request_id = :mine` (write-once: only the request that reserved the name fills it); a failed save
 * deletes its still-pending reservation on the same condition, so the name is free and never
 * half-made.
 */
export function checkpointEffectItem(
  table: string,
  effect: CheckpointEffect,
  requestId: string,
  now: number,
): TransactItem {
  if (effect.action === 'commit') {
    const keys = effect.listing === undefined ? undefined : checkpointListingKeys(effect.listing, now);
    return {
      Update: {
        TableName: table,
        Key: { pk: effect.pk },
        UpdateExpression:
          keys === undefined
            ? 'SET #status = :committed, blob_key = :blob, created_at = :now'
            : 'SET #status = :committed, blob_key = :blob, created_at = :now, owner_key = :owner, parent_key = :parent, list_sort = :sort',
        ConditionExpression: 'request_id = :mine',
        ExpressionAttributeNames: { '#status': 'status' },
        ExpressionAttributeValues: {
          ':committed': 'committed',
          ':blob': effect.blob_key,
          ':mine': requestId,
          ':now': now,
          ...(keys === undefined
            ? {}
            : { ':owner': keys.owner_key, ':parent': keys.parent_key, ':sort': keys.list_sort }),
        },
      },
    };
  }
  return {
    Delete: {
      TableName: table,
      Key: { pk: effect.pk },
      ConditionExpression: 'request_id = :mine AND #status = :pending',
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: { ':mine': requestId, ':pending': 'pending' },
    },
  };
}

/**
 * A save's reservation of its name in the submit's transaction: a put where the name is free, or,
 * over a stale reservation (see `staleReservation`), on that reservation's own request id, so a
 * concurrent submit taking the same name makes this one plan again and find it used.
 */
export function checkpointReserveItem(
  table: string,
  reservation: CheckpointNameRecord,
  staleRequestId?: string,
): TransactItem {
  if (staleRequestId === undefined) {
    return {
      Put: { TableName: table, Item: { ...reservation }, ConditionExpression: 'attribute_not_exists(pk)' },
    };
  }
  return {
    Put: {
      TableName: table,
      Item: { ...reservation },
      ConditionExpression: 'request_id = :stale AND #status = :pending',
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: { ':stale': staleRequestId, ':pending': 'pending' },
    },
  };
}
