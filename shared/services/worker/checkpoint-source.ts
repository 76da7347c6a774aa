import { InfrastructureError, isAwsError, StepUserError } from '../../base/errors.js';
import { storageKeys } from '../../base/storage-keys.js';
import { isLiveCheckpoint } from '../../domain/checkpoint-life.js';
import { type CheckpointNameRecord, registryKey } from '../../domain/records.js';
import { parseCheckpointPath } from '../../domain/tinker-path.js';
import { mayAccess, readCheckpointName } from '../../repositories/checkpoints/names.js';
import { readFuture } from '../../repositories/futures.js';
import type { Tables } from '../../repositories/tables.js';
import { fetchBlob, type LocalBlob } from './state-blobs.js';
import type { CheckpointRefPayload } from './step-payloads.js';
import type { WorkerClients } from './types.js';

/**
 * The blob a load_weights step names (to a spool file when `asFile`, ./state-blobs.ts; the caller
 * discards it unless it is one of `savedHere`). A checkpoint saved earlier in the same work item is
 * taken from there (it commits together with the load, E4); otherwise the name record, read strongly, must be
 * committed. A name still pending belongs to a save of another model that has not committed: an
 * infrastructure error, so the model is re-planned and tries again (after K attempts the step fails
 * with a server error, E2). A name whose save failed is the user's error.
 */
export async function loadCheckpointBlob(
  ref: CheckpointRefPayload & { readonly content_id: string },
  savedHere: ReadonlyMap<string, LocalBlob>,
  store: {
    readonly asFile: boolean;
    readonly clients: WorkerClients;
    readonly tables: Tables<'futures' | 'registry'>;
    readonly bucket: string;
    /** The loading model's tenant: the owner's, or any while the checkpoint is published (C4). */
    readonly tenant: string;
    readonly now: number;
  },
): Promise<LocalBlob> {
  const { clients, tables, bucket } = store;
  const own = savedHere.get(ref.content_id);
  if (own !== undefined) return own;
  const record: CheckpointNameRecord | undefined = await readCheckpointName(
    clients.doc,
    tables.registry,
    ref.pk,
  );
  if (
    record === undefined ||
    record.content_id !== ref.content_id ||
    !mayAccess(record, store.tenant, 'read')
  ) {
    throw new StepUserError(
      `path: checkpoint ${ref.path} does not exist (its save did not succeed, or it was deleted or replaced)`,
      { context: { field: 'path' } },
    );
  }
  if (record.status === 'committed') {
    // Expired reads as absent at once, collected or not (C5): a user error, never a retry.
    if (!isLiveCheckpoint(record, store.now)) {
      throw new StepUserError(`path: checkpoint ${ref.path} has expired`, { context: { field: 'path' } });
    }
    return checkpointBlob(clients, bucket, checkpointBlobKey(record), ref.path, store.asFile);
  }
  const saver = await readFuture(clients.doc, tables.futures, record.request_id, true);
  if (saver?.status === 'failed') {
    throw new StepUserError(`path: checkpoint ${ref.path} was never saved: its save failed`, {
      context: { field: 'path' },
    });
  }
  throw new InfrastructureError(`checkpoint ${ref.path} is not saved yet`, { context: { pk: ref.pk } });
}

/** The blob a committed name record names (E3: never derived, but for records from before `blob_key`). */
export function checkpointBlobKey(
  record: Pick<CheckpointNameRecord, 'model_id' | 'content_id' | 'blob_key'>,
): string {
  return record.blob_key ?? storageKeys.legacyCheckpoint(record.model_id, record.content_id);
}

/**
 * A checkpoint's blob (a spool file when `asFile`). Missing means collected (a delete or an expiry whose record went after the
 * check above): the user's error, not a retry that could only end in a server error.
 */
export async function checkpointBlob(
  clients: WorkerClients,
  bucket: string,
  key: string,
  path: string,
  asFile: boolean,
): Promise<LocalBlob> {
  try {
    return await fetchBlob(clients.s3, bucket, key, asFile);
  } catch (error) {
    if (error instanceof InfrastructureError && isAwsError(error.cause, 'NoSuchKey', 'NotFound')) {
      throw new StepUserError(`checkpoint ${path} was deleted`, { context: { field: 'path' } });
    }
    throw error;
  }
}

/**
 * Checks a sampler checkpoint a sample names is still what its sampling session was made on: the
 * same content, live, readable by the sample's tenant; answers the blob key its name record names. A
 * session made before W5 carries no path: its blob is read at the one key of its time
 * (`checkpointBlob` still turns a collected one into the user's error).
 */
export async function requireLiveSamplerCheckpoint(
  checkpoint: { readonly model_id: string; readonly content_id: string; readonly path?: string },
  store: {
    /** The name record by key: the work item's shared read (`SamplerCache.checkpointName`). */
    readonly readName: (pk: string) => Promise<CheckpointNameRecord | undefined>;
    readonly tenant: string;
    readonly now: number;
  },
): Promise<string> {
  const legacy = storageKeys.legacyCheckpoint(checkpoint.model_id, checkpoint.content_id);
  if (checkpoint.path === undefined) return legacy;
  const parsed = parseCheckpointPath(checkpoint.path);
  if (parsed === undefined) return legacy;
  const record = await store.readName(registryKey.checkpointName(parsed.modelId, parsed.kind, parsed.name));
  if (
    record === undefined ||
    record.content_id !== checkpoint.content_id ||
    !mayAccess(record, store.tenant, 'read') ||
    !isLiveCheckpoint(record, store.now)
  ) {
    throw new StepUserError(
      `model_path: checkpoint ${checkpoint.path} of this sampling session no longer exists (deleted, expired, replaced or unpublished)`,
      { context: { field: 'model_path' } },
    );
  }
  return checkpointBlobKey(record);
}
