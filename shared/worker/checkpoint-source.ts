import type { CheckpointNameRecord } from '../domain/records.js';
import { InfrastructureError, StepUserError } from '../errors.js';
import { readCheckpointName } from '../repositories/checkpoints.js';
import { readFuture } from '../repositories/futures.js';
import type { Tables } from '../repositories/tables.js';
import { storageKeys } from '../storage-keys.js';
import { getBytes } from './blobs.js';
import type { CheckpointRefPayload } from './step-payloads.js';
import type { WorkerClients } from './types.js';

/**
 * The bytes a load_weights step names. A checkpoint saved earlier in the same work item is taken from
 * memory (it commits together with the load, E4); otherwise the name record, read strongly, must be
 * committed. A name still pending belongs to a save of another model that has not committed: an
 * infrastructure error, so the model is re-planned and tries again (after K attempts the step fails
 * with a server error, E2). A name whose save failed is the user's error.
 */
export async function loadCheckpointBytes(
  ref: CheckpointRefPayload & { readonly content_id: string },
  savedHere: ReadonlyMap<string, Uint8Array>,
  store: {
    readonly clients: WorkerClients;
    readonly tables: Tables<'futures' | 'registry'>;
    readonly bucket: string;
  },
): Promise<Uint8Array> {
  const { clients, tables, bucket } = store;
  const own = savedHere.get(ref.content_id);
  if (own !== undefined) return own;
  const record: CheckpointNameRecord | undefined = await readCheckpointName(
    clients.doc,
    tables.registry,
    ref.pk,
  );
  if (record === undefined || record.content_id !== ref.content_id) {
    throw new StepUserError(`path: checkpoint ${ref.path} does not exist (its save did not succeed)`, {
      context: { field: 'path' },
    });
  }
  if (record.status === 'committed') {
    return getBytes(
      clients.s3,
      bucket,
      record.blob_key ?? storageKeys.checkpoint(record.model_id, record.content_id),
    );
  }
  const saver = await readFuture(clients.doc, tables.futures, record.request_id, true);
  if (saver?.status === 'failed') {
    throw new StepUserError(`path: checkpoint ${ref.path} was never saved: its save failed`, {
      context: { field: 'path' },
    });
  }
  throw new InfrastructureError(`checkpoint ${ref.path} is not saved yet`, { context: { pk: ref.pk } });
}
