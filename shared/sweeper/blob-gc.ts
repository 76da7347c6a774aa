import { DeleteObjectsCommand, ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { batchGetByKey } from '../aws/batch-get.js';
import { logger } from '../logger.js';
import { readModels } from '../repositories/models.js';
import { checkpointContentId, storageKeys } from '../storage-keys.js';

/**
 * E5: only the sweeper deletes blobs, and only blobs no committed row references. Ages are judged
 * from the object's LastModified, so a blob written just now is never taken for an orphan.
 */
export interface BlobGcPolicy {
  /** Work items are read once by their worker; kept this long after they were written. */
  readonly workItemRetentionMs: number;
  /**
   * A model state object that is neither the committed `state_ref` nor the in-flight epoch's is
   * deleted after this long (longer than any worker takes between writing state and committing).
   */
  readonly stateGraceMs: number;
  /**
   * A payload or result whose future row is gone is deleted after this long (intake writes the
   * payload before the row's transaction, so a young payload may belong to a row not written yet).
   */
  readonly orphanGraceMs: number;
  /**
   * A checkpoint blob whose save request ended `failed` is deleted after this long. A failed future
   * never changes again, so no commit can come to reference the blob: this is not a race window but
   * time to inspect what a failed save wrote, and it can be tuned apart from the windows above.
   */
  readonly checkpointGraceMs: number;
}

export const DEFAULT_BLOB_GC_POLICY: BlobGcPolicy = {
  workItemRetentionMs: 24 * 3600_000,
  stateGraceMs: 3600_000,
  orphanGraceMs: 3600_000,
  checkpointGraceMs: 24 * 3600_000,
};

export interface BlobGcCounters {
  objects_listed: number;
  work_items_deleted: number;
  states_deleted: number;
  payloads_deleted: number;
  results_deleted: number;
  checkpoints_deleted: number;
  delete_errors: number;
}

interface ListedObject {
  readonly key: string;
  readonly lastModified: number;
}

/** DeleteObjects takes at most 1000 keys a call. */
const DELETE_BATCH = 1000;

/** Pages of a prefix's listing (ListObjectsV2, 1000 keys a page), so a large bucket is never held whole. */
async function* listPages(s3: S3Client, bucket: string, prefix: string): AsyncGenerator<ListedObject[]> {
  let token: string | undefined;
  do {
    const page = await s3.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }),
    );
    const objects: ListedObject[] = [];
    for (const object of page.Contents ?? []) {
      if (object.Key === undefined) continue;
      objects.push({ key: object.Key, lastModified: object.LastModified?.getTime() ?? 0 });
    }
    yield objects;
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token !== undefined);
}

/** Deletes in batches of 1000; returns how many were deleted and how many S3 refused. */
async function deleteKeys(
  s3: S3Client,
  bucket: string,
  keys: readonly string[],
): Promise<{ deleted: number; errors: number }> {
  let deleted = 0;
  let errors = 0;
  for (let start = 0; start < keys.length; start += DELETE_BATCH) {
    const batch = keys.slice(start, start + DELETE_BATCH);
    const answer = await s3.send(
      new DeleteObjectsCommand({
        Bucket: bucket,
        Delete: { Objects: batch.map((Key) => ({ Key })), Quiet: true },
      }),
    );
    const failed = answer.Errors?.length ?? 0;
    if (failed > 0) {
      logger.warn('some blobs were not deleted; the next sweep tries again', {
        count: failed,
        code: answer.Errors?.[0]?.Code,
      });
    }
    errors += failed;
    deleted += batch.length - failed;
  }
  return { deleted, errors };
}

export interface BlobGcTarget {
  readonly s3: S3Client;
  readonly doc: DynamoDBDocumentClient;
  readonly bucket: string;
  readonly futuresTable: string;
  readonly modelsTable: string;
}

const STATE_KEY = /^state\/(.+)\/(\d+)\.bin$/;
const REQUEST_BLOB_KEY = /^(payloads|results)\/(.+)\.json$/;
const CHECKPOINT_KEY = /^checkpoints\/([^/]+)\/c-([^/]+)\.bin$/;
const SAVE_REQUEST_TYPES: ReadonlySet<unknown> = new Set(['save_weights', 'save_weights_for_sampler']);

export async function collectGarbage(
  target: BlobGcTarget,
  now: number,
  policy: BlobGcPolicy = DEFAULT_BLOB_GC_POLICY,
): Promise<BlobGcCounters> {
  const counters: BlobGcCounters = {
    objects_listed: 0,
    work_items_deleted: 0,
    states_deleted: 0,
    payloads_deleted: 0,
    results_deleted: 0,
    checkpoints_deleted: 0,
    delete_errors: 0,
  };
  const remove = async (keys: readonly string[]): Promise<number> => {
    if (keys.length === 0) return 0;
    const outcome = await deleteKeys(target.s3, target.bucket, keys);
    counters.delete_errors += outcome.errors;
    return outcome.deleted;
  };

  for await (const page of listPages(target.s3, target.bucket, 'work/')) {
    counters.objects_listed += page.length;
    const old = page.filter((object) => object.lastModified + policy.workItemRetentionMs <= now);
    counters.work_items_deleted += await remove(old.map((object) => object.key));
  }

  for await (const page of listPages(target.s3, target.bucket, 'state/')) {
    counters.objects_listed += page.length;
    counters.states_deleted += await remove(await unreferencedStates(target, page, now, policy));
  }

  for (const prefix of ['payloads/', 'results/'] as const) {
    for await (const page of listPages(target.s3, target.bucket, prefix)) {
      counters.objects_listed += page.length;
      const deleted = await remove(await orphanRequestBlobs(target, page, now, policy));
      if (prefix === 'payloads/') counters.payloads_deleted += deleted;
      else counters.results_deleted += deleted;
    }
  }

  for await (const page of listPages(target.s3, target.bucket, 'checkpoints/')) {
    counters.objects_listed += page.length;
    counters.checkpoints_deleted += await remove(await failedSaveCheckpoints(target, page, now, policy));
  }
  return counters;
}

/**
 * State objects past their grace that the model row (read strongly, after the listing) does not
 * name: not the committed `state_ref`, and not the epoch of the work item in flight, whose commit may
 * still land. Objects of models that no longer exist are unreferenced too.
 */
async function unreferencedStates(
  target: BlobGcTarget,
  page: readonly ListedObject[],
  now: number,
  policy: BlobGcPolicy,
): Promise<string[]> {
  const candidates: { key: string; modelId: string; epoch: number }[] = [];
  for (const object of page) {
    const match = STATE_KEY.exec(object.key);
    if (match === null || object.lastModified + policy.stateGraceMs > now) continue;
    candidates.push({ key: object.key, modelId: match[1]!, epoch: Number(match[2]) });
  }
  if (candidates.length === 0) return [];
  const models = await readModels(target.doc, target.modelsTable, new Set(candidates.map((c) => c.modelId)));
  return candidates
    .filter(({ key, modelId, epoch }) => {
      const model = models.get(modelId);
      if (model === undefined) return true;
      if (model.state_ref === key) return false;
      return !(model.inflight !== undefined && model.epoch === epoch);
    })
    .map((candidate) => candidate.key);
}

/** Payloads and results past their grace whose future row (read strongly) no longer exists. */
async function orphanRequestBlobs(
  target: BlobGcTarget,
  page: readonly ListedObject[],
  now: number,
  policy: BlobGcPolicy,
): Promise<string[]> {
  const candidates: { key: string; requestId: string }[] = [];
  for (const object of page) {
    const match = REQUEST_BLOB_KEY.exec(object.key);
    if (match === null || object.lastModified + policy.orphanGraceMs > now) continue;
    candidates.push({ key: object.key, requestId: match[2]! });
  }
  if (candidates.length === 0) return [];
  const rows = await batchGetByKey(
    target.doc,
    candidates.map((candidate) => candidate.requestId),
    { table: target.futuresTable, keyName: 'request_id', consistent: true, attributes: ['request_id'] },
  );
  return candidates.filter((candidate) => !rows.has(candidate.requestId)).map((candidate) => candidate.key);
}

/** The model and save request a checkpoint key belongs to; undefined for a key the worker never writes. */
function parseCheckpointKey(key: string): { modelId: string; requestId: string } | undefined {
  const match = CHECKPOINT_KEY.exec(key);
  if (match === null) return undefined;
  const modelId = match[1]!;
  const requestId = match[2]!;
  // Only keys that the storage layout gives back unchanged: anything else is not ours to judge.
  if (storageKeys.checkpoint(modelId, checkpointContentId(requestId)) !== key) return undefined;
  return { modelId, requestId };
}

/**
 * Checkpoint blobs past their grace whose save request (its future, read strongly) ended `failed`.
 * Every attempt of a request writes the same key (E3), and a save's name record is committed in the
 * same transaction that completes its future, on condition the future is still pending (E4); the
 * failed status is final (every terminal write is conditional on `pending`, and a retried submit
 * answers the original future, R7). So a failed save's blob is referenced by nothing and never will
 * be. Anything less certain keeps the blob: a row that is missing, pending or completed, or that
 * does not describe a save of this key's model. Deleting a referenced checkpoint cannot be undone.
 */
async function failedSaveCheckpoints(
  target: BlobGcTarget,
  page: readonly ListedObject[],
  now: number,
  policy: BlobGcPolicy,
): Promise<string[]> {
  const candidates: { key: string; modelId: string; requestId: string }[] = [];
  for (const object of page) {
    if (object.lastModified + policy.checkpointGraceMs > now) continue;
    const parsed = parseCheckpointKey(object.key);
    if (parsed !== undefined) candidates.push({ key: object.key, ...parsed });
  }
  if (candidates.length === 0) return [];
  const rows = await batchGetByKey(
    target.doc,
    candidates.map((candidate) => candidate.requestId),
    {
      table: target.futuresTable,
      keyName: 'request_id',
      consistent: true,
      attributes: ['request_id', 'status', 'model_id', 'request_type'],
    },
  );
  return candidates
    .filter(({ modelId, requestId }) => {
      const row = rows.get(requestId);
      return (
        row !== undefined &&
        row.status === 'failed' &&
        row.model_id === modelId &&
        SAVE_REQUEST_TYPES.has(row.request_type)
      );
    })
    .map((candidate) => candidate.key);
}
