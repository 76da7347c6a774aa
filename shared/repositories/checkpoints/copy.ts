import { backoffDelay, realSleep } from '../../aws/backoff.js';
import { copyObject } from '../../aws/s3-streams.js';
import { type TransactItem, transactWrite } from '../../aws/transact.js';
import { InfrastructureError } from '../../base/errors.js';
import { sha256Hex } from '../../base/ids.js';
import { checkpointContentId, storageKeys } from '../../base/storage-keys.js';
import { expiryOf } from '../../domain/checkpoint-life.js';
import { checkpointListingKeys } from '../../domain/listing-keys.js';
import { type CheckpointNameRecord, registryKey, type SeqCounterRecord } from '../../domain/records.js';
import type { IntakeStore } from '../intake/run-intake.js';
import { putOnce } from '../intake/run-intake.js';
import { modelCreateItem, type NewRun, newModelRow } from '../models.js';
import { newSeqCounter } from '../seq-counters.js';
import { requireSession, sessionOpenCheckItem } from '../sessions.js';
import { gcEntry, gcEntryPutItem } from './gc.js';
import { checkpointObjectKeys, issuedPath, readCheckpointName } from './names.js';

/**
 * copy_weights: a committed checkpoint the tenant may read, copied under a new training run of its
 * session (`model_id` derived from the session and `model_seq_id`, so a retry names the same copy).
 * The copy owns its content: its blob is copied in S3 (never shared, so deleting either collects
 * only its own), then its name record is put committed in one transaction with the new run's model
 * row and seq counter, both unloaded (the run holds weights, not a trainable model: it is listed,
 * loaded and sampled like any run's checkpoint) and, with a TTL, its gc entry (C5). A retry after
 * the transaction finds the copy and answers it.
 */

/** The copy's new run (`baseModel` and `loraConfig` are the source run's: what the copy samples and loads as). */
export interface CheckpointCopy extends NewRun {
  readonly source: CheckpointNameRecord;
  readonly ttlSeconds?: number;
}

const MAX_ATTEMPTS = 10;
const BACKOFF = { baseMs: 20, capMs: 500, maxRetries: MAX_ATTEMPTS };

/** The run segment of a copied checkpoint's key (E3's keys are unique per writer; a copy has one). */
const COPY_RUN = 'copy';

export async function copyCheckpoint(
  copy: CheckpointCopy,
  store: IntakeStore,
): Promise<{ tinker_path: string }> {
  const { source } = copy;
  const { doc, s3 } = store.clients;
  const table = store.tables.registry;
  const pk = registryKey.checkpointName(copy.modelId, source.kind, source.name);
  const existing = await readCheckpointName(doc, table, pk);
  if (existing !== undefined && existing.tenant === copy.tenant) return { tinker_path: issuedPath(existing) };
  // Derived from the copy's name record, so a retry writes the same object; no worker run writes a
  // copy, so its run segment is the fixed COPY_RUN (the GC finds no save request for the content id
  // and leaves the object to the name record's collection, services/sweeper/checkpoint-gc.ts).
  const contentId = checkpointContentId(sha256Hex(`copy\u0000${pk}`).slice(0, 32));
  const blobKey = storageKeys.checkpoint(copy.modelId, contentId, COPY_RUN);
  const [sourceBlob] = checkpointObjectKeys(source);
  await store.admission;
  // Server side, in parts above one CopyObject's 5 GiB (a large training checkpoint).
  await copyObject(s3, store.bucket, sourceBlob as string, blobKey);
  const listing = checkpointListingKeys({ ...source, tenant: copy.tenant, model_id: copy.modelId }, copy.now);
  const expiresAt = expiryOf(copy.now, copy.ttlSeconds);
  const record: CheckpointNameRecord = {
    pk,
    tenant: copy.tenant,
    model_id: copy.modelId,
    kind: source.kind,
    name: source.name,
    path: issuedPath({ model_id: copy.modelId, kind: source.kind, name: source.name }),
    request_id: contentId,
    status: 'committed',
    content_id: contentId,
    blob_key: blobKey,
    ...listing,
    ...(expiresAt === undefined ? {} : { expires_at: expiresAt }),
    ...(source.size_bytes === undefined ? {} : { size_bytes: source.size_bytes }),
    ...(source.user_metadata === undefined ? {} : { user_metadata: source.user_metadata }),
  };
  const counter: SeqCounterRecord = { ...newSeqCounter(copy, 0), unloaded: true };
  const model = newModelRow(copy, 'unloaded');
  const items: TransactItem[] = [
    putOnce(table, record),
    putOnce(table, counter),
    modelCreateItem(store.tables.models, model),
    sessionOpenCheckItem(table, copy.sessionId),
  ];
  if (expiresAt !== undefined) items.push(gcEntryPutItem(table, gcEntry(record, expiresAt)));
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
    const outcome = await transactWrite(
      items,
      sha256Hex(`copy\u0000${pk}\u0000${attempt}`).slice(0, 36),
      doc,
    );
    if (outcome.ok) return { tinker_path: record.path };
    if (outcome.conditionFailed) {
      // A concurrent retry of the same copy got there first.
      const landed = await readCheckpointName(doc, table, pk);
      if (landed !== undefined && landed.tenant === copy.tenant) return { tinker_path: issuedPath(landed) };
      // Else the session may have finished since it was read: 410 (W9).
      await requireSession(doc, table, copy.sessionId, copy.tenant);
    }
    await realSleep(backoffDelay(attempt, BACKOFF, Math.random));
  }
  throw new InfrastructureError(`copy to ${record.path} met too much contention; retry`);
}
