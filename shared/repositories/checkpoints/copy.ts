import { backoffDelay, realSleep } from '../../aws/backoff.js';
import { copyObject } from '../../aws/s3-streams.js';
import { type TransactItem, transactWrite } from '../../aws/transact.js';
import { IdempotencyConflictError, InfrastructureError } from '../../base/errors.js';
import { sha256Hex } from '../../base/ids.js';
import { checkpointContentId, storageKeys } from '../../base/storage-keys.js';
import { expiryOf } from '../../domain/checkpoint-life.js';
import { checkpointListingKeys } from '../../domain/listing-keys.js';
import {
  type CheckpointNameRecord,
  type CopyIdemRecord,
  registryKey,
  type SeqCounterRecord,
} from '../../domain/records.js';
import {
  findOriginal,
  type IdempotencyKey,
  type IntakeStore,
  putOnce,
  requireOpenSession,
  runIntake,
} from '../intake/run-intake.js';
import { modelCreateItem, type NewRun, newModelRow, readModelRow } from '../models.js';
import { canonicalJson } from '../payloads.js';
import { newSeqCounter } from '../seq-counters.js';
import { sessionOpenCheckItem } from '../sessions.js';
import { gcEntry, gcEntryPutItem } from './gc.js';
import { checkpointObjectKeys, issuedPath, readCheckpointName } from './names.js';

/**
 * copy_weights: a committed checkpoint the tenant may read, copied under a new training run of its
 * session (`model_id` derived from the session and `model_seq_id`). The key is settled first: one
 * transaction puts the idempotency record of `(session, model_seq_id)` (the digest of the request's
 * parameters, the copy's path, and the blob it copies from and to) with the check that the session
 * has not finished. Only then is the blob copied in S3 (never shared, so deleting either collects
 * only its own), and a second transaction puts the name record committed, the new run's model row
 * and seq counter, both unloaded (the run holds weights, not a trainable model: it is listed, loaded
 * and sampled like any run's checkpoint) and, with a TTL, its gc entry (C5). Twins and retries find
 * the record and finish that same copy (the same bytes to the same key), or answer it once it
 * landed (R7); the same key with other parameters is a 400 and copies nothing.
 */

/** The copy's new run (`baseModel` and `loraConfig` are the source run's: what the copy samples and loads as). */
export interface CheckpointCopy extends NewRun {
  readonly source: CheckpointNameRecord;
  readonly ttlSeconds?: number;
  /** Minted per request: names the content of the copy it settles, and its transactions. */
  readonly requestId: string;
  readonly modelSeqId: number;
  /** `copyDigest` of the request. */
  readonly digest: string;
  /** The key's record when a retry or a twin found it settled (`findCopy`). */
  readonly settled?: CopyIdemRecord;
}

/** The run segment of a copied checkpoint's key (E3's keys are unique per writer; a copy has one). */
const COPY_RUN = 'copy';

const MAX_ATTEMPTS = 10;
const BACKOFF = { baseMs: 20, capMs: 500, maxRetries: MAX_ATTEMPTS };

/** What a retry of copy_weights must repeat exactly: every parameter but the key (R7). */
export function copyDigest(parameters: {
  readonly source_path: string;
  readonly ttl_seconds?: number | null | undefined;
}): string {
  return sha256Hex(
    canonicalJson({ source_path: parameters.source_path, ttl_seconds: parameters.ttl_seconds ?? null }),
  );
}

function copyIdemKey(sessionId: string, modelSeqId: number): IdempotencyKey {
  return {
    pk: registryKey.copyIdem(sessionId, modelSeqId),
    describe: `model_seq_id ${modelSeqId} of session ${sessionId}`,
    field: 'model_seq_id',
  };
}

/**
 * The copy an earlier copy_weights of `(session, model_seq_id)` settled, if any, and whether it
 * landed: another tenant's is a 404 and other parameters a 400 (R7). Read before anything else, so a
 * retry is answered even after the session finished or the source went (W9).
 */
export async function findCopy(
  store: Pick<IntakeStore, 'clients' | 'tables'>,
  key: { readonly sessionId: string; readonly modelSeqId: number },
  retry: { readonly tenant: string; readonly digest: string },
): Promise<{ readonly record: CopyIdemRecord; readonly landed: boolean } | undefined> {
  const { doc } = store.clients;
  const table = store.tables.registry;
  const record = await findOriginal<CopyIdemRecord>(
    doc,
    table,
    copyIdemKey(key.sessionId, key.modelSeqId),
    retry,
  );
  if (record === undefined) return undefined;
  return { record, landed: (await readCheckpointName(doc, table, record.name_pk)) !== undefined };
}

/** Puts the key's record (once, while the session is open), or finds a twin's. */
function settleCopy(copy: CheckpointCopy, store: IntakeStore): Promise<CopyIdemRecord> {
  const { source } = copy;
  const contentId = checkpointContentId(copy.requestId);
  const [sourceBlob] = checkpointObjectKeys(source);
  const record: CopyIdemRecord = {
    pk: registryKey.copyIdem(copy.sessionId, copy.modelSeqId),
    tenant: copy.tenant,
    payload_digest: copy.digest,
    tinker_path: issuedPath({ model_id: copy.modelId, kind: source.kind, name: source.name }),
    name_pk: registryKey.checkpointName(copy.modelId, source.kind, source.name),
    content_id: contentId,
    // No worker run writes a copy, so its run segment is the fixed COPY_RUN (the GC finds no save
    // request for the content id and leaves the object to the name record's collection,
    // services/sweeper/checkpoint-gc.ts).
    blob_key: storageKeys.checkpoint(copy.modelId, contentId, COPY_RUN),
    source_blob_key: sourceBlob as string,
    created_at: copy.now,
  };
  const items = [
    putOnce(store.tables.registry, record),
    sessionOpenCheckItem(store.tables.registry, copy.sessionId),
  ];
  return runIntake<CopyIdemRecord>(
    {
      requestId: copy.requestId,
      plan: async (contended) => {
        if (!contended) return { answer: record, items };
        // A twin settled the key first (finish its copy), or it was used with other parameters (400).
        const twin = await findCopy(store, copy, { tenant: copy.tenant, digest: copy.digest });
        if (twin !== undefined) return { answer: twin.record };
        // Else the session may have finished since it was read: 410 (W9).
        await requireOpenSession(store, copy.sessionId, copy.tenant);
        return { answer: record, items };
      },
    },
    store,
  );
}

export async function copyCheckpoint(
  copy: CheckpointCopy,
  store: IntakeStore,
): Promise<{ tinker_path: string }> {
  const { source } = copy;
  const { doc, s3 } = store.clients;
  const table = store.tables.registry;
  let settled = copy.settled;
  if (settled === undefined && (await readModelRow(doc, store.tables.models, copy.modelId)) !== undefined) {
    // A twin settled the key and made the model since this request looked (answer its copy); else a
    // run of this key from before copies kept a record: its parameters are unknown, so it cannot be
    // answered as a retry.
    const twin = await findCopy(store, copy, { tenant: copy.tenant, digest: copy.digest });
    if (twin === undefined) {
      throw new IdempotencyConflictError(
        `model_seq_id ${copy.modelSeqId} of session ${copy.sessionId} was already used`,
        { context: { field: 'model_seq_id' } },
      );
    }
    settled = twin.record;
  }
  settled ??= await settleCopy(copy, store);
  const answer = { tinker_path: settled.tinker_path };
  // Server side, in parts above one CopyObject's 5 GiB (a large training checkpoint).
  await copyObject(s3, store.bucket, settled.source_blob_key, settled.blob_key);
  const listing = checkpointListingKeys({ ...source, tenant: copy.tenant, model_id: copy.modelId }, copy.now);
  const expiresAt = expiryOf(copy.now, copy.ttlSeconds);
  const record: CheckpointNameRecord = {
    pk: settled.name_pk,
    tenant: copy.tenant,
    model_id: copy.modelId,
    kind: source.kind,
    name: source.name,
    path: settled.tinker_path,
    request_id: settled.content_id,
    status: 'committed',
    content_id: settled.content_id,
    blob_key: settled.blob_key,
    ...listing,
    ...(expiresAt === undefined ? {} : { expires_at: expiresAt }),
    ...(source.size_bytes === undefined ? {} : { size_bytes: source.size_bytes }),
    ...(source.user_metadata === undefined ? {} : { user_metadata: source.user_metadata }),
  };
  const counter: SeqCounterRecord = { ...newSeqCounter(copy, 0), unloaded: true };
  const items: TransactItem[] = [
    putOnce(table, record),
    putOnce(table, counter),
    modelCreateItem(store.tables.models, newModelRow(copy, 'unloaded')),
  ];
  if (expiresAt !== undefined) items.push(gcEntryPutItem(table, gcEntry(record, expiresAt)));
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
    // Unique per request and attempt: twins' transactions differ in their items (times), so a token
    // they shared would be refused as the same token with other parameters.
    const outcome = await transactWrite(items, `${copy.requestId}.c${attempt}`, doc);
    if (outcome.ok) return answer;
    // A twin's or an earlier retry's commit landed the copy.
    if (outcome.conditionFailed && (await readCheckpointName(doc, table, settled.name_pk)) !== undefined) {
      return answer;
    }
    await realSleep(backoffDelay(attempt, BACKOFF, Math.random));
  }
  throw new InfrastructureError(`copy to ${settled.tinker_path} met too much contention; retry`);
}
