import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { formatCheckpointPath, parseCheckpointPath } from '../api/tinker-path.js';
import { awsClients } from '../aws/clients.js';
import { type CheckpointKind, type CheckpointNameRecord, registryKey } from '../domain/records.js';
import { NotFoundError, ValidationError } from '../errors.js';
import { readFuture } from './futures.js';
import { readRegistryItem } from './registry.js';

export async function readCheckpointName(
  pk: string,
  doc: DynamoDBDocumentClient = awsClients().doc,
): Promise<CheckpointNameRecord | undefined> {
  return readRegistryItem<CheckpointNameRecord>(pk, doc);
}

/**
 * Whether a name record is a stale reservation: still pending, reserved by a save whose future (read
 * strongly) ended failed. Such a save never commits the name (a commit needs its future pending, and
 * failed is final). A save failed with a user error frees its name at commit; one failed without
 * running (E2's attempt limit, a missing payload) cannot, since its worker reads no payload and so
 * does not know the name: the next save of that name takes it over instead.
 */
export async function staleReservation(
  record: CheckpointNameRecord,
  doc: DynamoDBDocumentClient = awsClients().doc,
): Promise<boolean> {
  if (record.status !== 'pending') return false;
  const future = await readFuture(record.request_id, doc, true);
  return future?.status === 'failed';
}

/**
 * Resolves a `tinker://` path of the wanted kind to the tenant's checkpoint name record. A path of
 * the wrong shape or kind is a 400; a checkpoint that does not exist, or is another tenant's, a 404.
 * The record may still be pending (reserved, not yet committed): callers decide what that means.
 */
export async function resolveCheckpoint(
  path: string,
  kind: CheckpointKind,
  tenant: string,
  field: string,
  doc: DynamoDBDocumentClient = awsClients().doc,
): Promise<CheckpointNameRecord> {
  const parsed = parseCheckpointPath(path);
  const expected =
    kind === 'weights'
      ? 'tinker://<model_id>/weights/<name> (from save_weights)'
      : 'tinker://<model_id>/<name> (from save_weights_for_sampler)';
  if (parsed === undefined)
    throw new ValidationError(`${field}: must look like ${expected}`, { context: { field } });
  if (parsed.kind !== kind) {
    throw new ValidationError(
      `${field}: ${formatCheckpointPath(parsed)} is a ${parsed.kind} checkpoint; expected ${expected}`,
      {
        context: { field },
      },
    );
  }
  const record = await readCheckpointName(registryKey.checkpointName(parsed.modelId, kind, parsed.name), doc);
  if (record === undefined || record.tenant !== tenant) {
    throw new NotFoundError(`checkpoint ${path} not found`, { context: { field } });
  }
  return record;
}
