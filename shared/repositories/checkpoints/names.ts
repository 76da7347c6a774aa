import { DeleteCommand, type DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { writeIfCondition } from '../../aws/conditional.js';
import type { TransactItem } from '../../aws/transact.js';
import { NotFoundError, ValidationError } from '../../base/errors.js';
import { storageKeys } from '../../base/storage-keys.js';
import { type CheckpointRouteKey, expiryOf, isLiveCheckpoint } from '../../domain/checkpoint-life.js';
import { checkpointListingKeys } from '../../domain/listing-keys.js';
import { type CheckpointKind, type CheckpointNameRecord, registryKey } from '../../domain/records.js';
import { formatCheckpointPath, parseCheckpointPath } from '../../domain/tinker-path.js';
import { readFuture } from '../futures.js';
import { readRegistryItem } from '../registry.js';

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
 * Who may use a checkpoint (C4): `owner`, the tenant that saved it (delete, publish, TTL); `read`,
 * also any tenant while it is published (load, sample, weights_info, archive).
 */
export type CheckpointAccess = 'owner' | 'read';

export interface CheckpointLookup {
  readonly now: number;
  readonly access: CheckpointAccess;
}

/** Whether `tenant` may see the record at all: anything else answers as an unknown checkpoint (C6). */
export function mayAccess(
  record: Pick<CheckpointNameRecord, 'tenant' | 'public'>,
  tenant: string,
  access: CheckpointAccess,
): boolean {
  return record.tenant === tenant || (access === 'read' && record.public === true);
}

/**
 * Resolves a `tinker://` path to a checkpoint name record the tenant may use (`lookup.access`): of
 * the wanted kind, or of either (`any`). Every form the parser accepts resolves, the legacy sampler
 * form included. A path of the wrong shape or kind is a 400; a checkpoint that does not exist, is
 * another tenant's (and not published to `read`), or is committed but expired (C5), a 404. The
 * record may still be pending (reserved, not yet committed): callers decide what that means.
 */
export async function resolveCheckpoint(
  doc: DynamoDBDocumentClient,
  table: string,
  path: string,
  kind: CheckpointKind | 'any',
  tenant: string,
  field: string,
  lookup: CheckpointLookup,
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
  if (record === undefined || !mayAccess(record, tenant, lookup.access))
    throw checkpointNotFound(path, field);
  if (record.status === 'committed' && !isLiveCheckpoint(record, lookup.now)) {
    throw checkpointNotFound(path, field);
  }
  return record;
}

/**
 * The live, committed checkpoint a lifecycle route names (`checkpointKeyFromRoute`), or the 404 of
 * an unknown one: absent, pending, expired, or not the tenant's to use this way (C6).
 */
export async function requireLiveCheckpoint(
  doc: DynamoDBDocumentClient,
  table: string,
  key: CheckpointRouteKey,
  tenant: string,
  lookup: CheckpointLookup,
): Promise<CheckpointNameRecord> {
  const record = await readCheckpointName(
    doc,
    table,
    registryKey.checkpointName(key.modelId, key.kind, key.name),
  );
  if (
    record === undefined ||
    !mayAccess(record, tenant, lookup.access) ||
    !isLiveCheckpoint(record, lookup.now)
  ) {
    throw checkpointNotFound(formatCheckpointPath(key), 'checkpoint_id');
  }
  return record;
}

/** The S3 objects of a checkpoint's content: its blob and, when built, its archive. */
export function checkpointObjectKeys(
  record: Pick<CheckpointNameRecord, 'model_id' | 'content_id' | 'blob_key' | 'archive_key'>,
): string[] {
  const blob = record.blob_key ?? storageKeys.legacyCheckpoint(record.model_id, record.content_id);
  return record.archive_key === undefined ? [blob] : [blob, record.archive_key];
}

/**
 * Holds while the record is the live, committed content the caller read, owned by `tenant`: every
 * lifecycle write is conditioned on it, so a delete, expiry or overwrite racing it wins and the
 * route answers 404 (C3-C5).
 */
export function liveOwnedCondition(
  record: Pick<CheckpointNameRecord, 'tenant' | 'content_id'>,
  now: number,
): {
  readonly ConditionExpression: string;
  readonly ExpressionAttributeNames: Record<string, string>;
  readonly ExpressionAttributeValues: Record<string, unknown>;
} {
  return {
    ConditionExpression:
      'tenant = :tenant AND content_id = :content AND #status = :committed AND (attribute_not_exists(expires_at) OR expires_at > :now)',
    ExpressionAttributeNames: { '#status': 'status' },
    ExpressionAttributeValues: {
      ':tenant': record.tenant,
      ':content': record.content_id,
      ':committed': 'committed',
      ':now': now,
    },
  };
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
      readonly model_id: string;
      readonly content_id: string;
      readonly blob_key: string;
      /** The archive built from the blob at save (C2). */
      readonly archive_key?: string;
      readonly size_bytes?: number;
      /** The model's optimizer steps at the save (W8: a sampled sequence's weights version). */
      readonly weights_version?: number;
      /** `expires_at` = the commit's time + this (C5). */
      readonly ttl_seconds?: number;
      /** Who and what the checkpoint is, for its listing keys (C1); absent for an unnamed sampler save. */
      readonly listing?: Pick<CheckpointNameRecord, 'tenant' | 'model_id' | 'kind' | 'name'>;
    }
  | { readonly action: 'release'; readonly pk: string };

/**
 * A save's name record in its commit, as a transaction item: `SET status = committed, blob_key, ...`
 * on `request_id = :mine` (write-once: only the request that reserved the name fills it); a failed
 * save deletes its still-pending reservation on the same condition, so the name is free and never
 * half-made. `now` is the commit's time: the checkpoint's `created_at`, and the start of its TTL.
 */
export function checkpointEffectItem(
  table: string,
  effect: CheckpointEffect,
  requestId: string,
  now: number,
): TransactItem {
  if (effect.action === 'commit') {
    const sets = ['#status = :committed', 'blob_key = :blob', 'created_at = :now'];
    const values: Record<string, unknown> = {
      ':committed': 'committed',
      ':blob': effect.blob_key,
      ':mine': requestId,
      ':now': now,
    };
    if (effect.archive_key !== undefined) {
      sets.push('archive_key = :archive');
      values[':archive'] = effect.archive_key;
    }
    if (effect.size_bytes !== undefined) {
      sets.push('size_bytes = :size');
      values[':size'] = effect.size_bytes;
    }
    if (effect.weights_version !== undefined) {
      sets.push('weights_version = :version');
      values[':version'] = effect.weights_version;
    }
    if (effect.ttl_seconds !== undefined) {
      sets.push('expires_at = :expires');
      values[':expires'] = expiryOf(now, effect.ttl_seconds);
    }
    if (effect.listing !== undefined) {
      // The listing keys put it in `by_owner` and `by_parent` (C1).
      const keys = checkpointListingKeys(effect.listing, now);
      sets.push('owner_key = :owner', 'parent_key = :parent', 'list_sort = :sort');
      values[':owner'] = keys.owner_key;
      values[':parent'] = keys.parent_key;
      values[':sort'] = keys.list_sort;
    }
    return {
      Update: {
        TableName: table,
        Key: { pk: effect.pk },
        UpdateExpression: `SET ${sets.join(', ')}`,
        ConditionExpression: 'request_id = :mine',
        ExpressionAttributeNames: { '#status': 'status' },
        ExpressionAttributeValues: values,
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

/**
 * `save_weights` with `overwrite` over a committed name (or over an expired one, which reads as
 * absent): the new reservation replaces the record on the old content's id, so a concurrent delete,
 * publish or second overwrite makes one of them plan again. The caller adds the old content's gc
 * entry and drops its public marker in the same transaction (C3).
 */
export function checkpointReplaceItem(
  table: string,
  reservation: CheckpointNameRecord,
  old: Pick<CheckpointNameRecord, 'content_id'>,
): TransactItem {
  return {
    Put: {
      TableName: table,
      Item: { ...reservation },
      ConditionExpression: 'content_id = :old AND #status = :committed',
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: { ':old': old.content_id, ':committed': 'committed' },
    },
  };
}

/**
 * The sweeper's removal of a name record whose content expired (C5), only while it still holds that
 * content and that expiry has passed: a name since deleted, replaced or given a new TTL is kept.
 * `false` when the condition failed (nothing to remove).
 */
export function deleteExpiredCheckpointName(
  doc: DynamoDBDocumentClient,
  table: string,
  namePk: string,
  contentId: string,
  now: number,
): Promise<boolean> {
  return writeIfCondition(() =>
    doc.send(
      new DeleteCommand({
        TableName: table,
        Key: { pk: namePk },
        ConditionExpression: 'content_id = :content AND expires_at <= :now',
        ExpressionAttributeValues: { ':content': contentId, ':now': now },
      }),
    ),
  );
}
