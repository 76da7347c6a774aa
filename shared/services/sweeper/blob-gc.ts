import { DeleteObjectsCommand, ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { logger } from '../../base/logger.js';
import { checkpointContentId, parseRunKey, storageKeys } from '../../base/storage-keys.js';
import { readFutureMembers } from '../../repositories/futures.js';
import { readModels } from '../../repositories/models.js';

/**
 * E5: only the sweeper deletes blobs, and only blobs no committed row references. Ages are judged
 * from the object's LastModified, so a blob written just now is never taken for an orphan.
 *
 * Worker keys are unique per run (E3): `state/<model>/<epoch>/<run>.bin`, `results/<request>/<run>.json`,
 * `checkpoints|archives/<model>/c-<request>/<run>.*`. A run that did not commit (a duplicate
 * delivery's loser, a zombie, a run that failed) leaves objects no row names; each prefix below is
 * listed, and its objects judged against the row its key names: the model row for states, the
 * request's future (its `result_key`, and `run`, the run whose commit ended it) for the rest. Keys
 * of the layouts before runs (`state/<model>/<epoch>.bin`, `results/<request>.json`,
 * `checkpoints/<model>/c-<request>.bin`) are judged by the rules of their time.
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
  archives_deleted: number;
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

const LEGACY_STATE_KEY = /^state\/([^/]+)\/(\d+)\.bin$/;
const LEGACY_REQUEST_BLOB_KEY = /^(payloads|results)\/([^/]+)\.json$/;
const LEGACY_CHECKPOINT_KEY = /^checkpoints\/([^/]+)\/c-([^/]+)\.bin$/;
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
    archives_deleted: 0,
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

  for (const prefix of ['checkpoints/', 'archives/'] as const) {
    for await (const page of listPages(target.s3, target.bucket, prefix)) {
      counters.objects_listed += page.length;
      const deleted = await remove(await unsavedCheckpointObjects(target, page, now, policy));
      if (prefix === 'checkpoints/') counters.checkpoints_deleted += deleted;
      else counters.archives_deleted += deleted;
    }
  }
  return counters;
}

function stateKeyParts(key: string): { modelId: string; epoch: number } | undefined {
  const parsed = parseRunKey(key);
  if (parsed?.kind === 'state') return { modelId: parsed.modelId, epoch: parsed.epoch };
  const legacy = LEGACY_STATE_KEY.exec(key);
  return legacy === null ? undefined : { modelId: legacy[1]!, epoch: Number(legacy[2]) };
}

/** The objects of `page` older than `graceMs` whose key `parse` reads, each with what it read. */
function pastGrace<T>(
  page: readonly ListedObject[],
  graceMs: number,
  now: number,
  parse: (key: string) => T | undefined,
): (T & { readonly key: string })[] {
  return page.flatMap((object) => {
    if (object.lastModified + graceMs > now) return [];
    const parts = parse(object.key);
    return parts === undefined ? [] : [{ key: object.key, ...parts }];
  });
}

/**
 * The keys of `candidates` that `unreferenced` judges so from their request's future row: its
 * `members`, read strongly; undefined when the row does not exist.
 */
async function keysJudgedByFuture<C extends { readonly key: string; readonly requestId: string }>(
  target: BlobGcTarget,
  candidates: readonly C[],
  members: readonly string[],
  unreferenced: (candidate: C, row: Readonly<Record<string, unknown>> | undefined) => boolean,
): Promise<string[]> {
  if (candidates.length === 0) return [];
  const requestIds = candidates.map((candidate) => candidate.requestId);
  const rows = await readFutureMembers(target.doc, target.futuresTable, requestIds, [
    'request_id',
    ...members,
  ]);
  return candidates
    .filter((candidate) => unreferenced(candidate, rows.get(candidate.requestId)))
    .map((candidate) => candidate.key);
}

/**
 * State objects past their grace that the model row (read strongly, after the listing) does not
 * name: not the committed `state_ref`, and not of the epoch of the work item in flight, whose commit
 * may still land (any of its runs). A losing run of a committed epoch is unreferenced like any other.
 * Objects of models that no longer exist are unreferenced too.
 */
async function unreferencedStates(
  target: BlobGcTarget,
  page: readonly ListedObject[],
  now: number,
  policy: BlobGcPolicy,
): Promise<string[]> {
  const candidates = pastGrace(page, policy.stateGraceMs, now, stateKeyParts);
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

/**
 * The request a payload or result key belongs to, and whether it is a run's result (`ofRun`); the
 * layout before runs names only the request.
 */
function requestBlobKeyParts(key: string): { requestId: string; ofRun: boolean } | undefined {
  const parsed = parseRunKey(key);
  if (parsed?.kind === 'result') return { requestId: parsed.requestId, ofRun: true };
  const legacy = LEGACY_REQUEST_BLOB_KEY.exec(key);
  return legacy === null ? undefined : { requestId: legacy[2]!, ofRun: false };
}

/**
 * Payloads and results past their grace whose future row (read strongly) no longer exists, and
 * results of a run whose future ended without naming them (`result_key` is another run's, or the
 * result is inline, or the step failed): a terminal future never changes again (E4). A pending
 * future keeps every result of its request: a run may still commit one.
 */
async function orphanRequestBlobs(
  target: BlobGcTarget,
  page: readonly ListedObject[],
  now: number,
  policy: BlobGcPolicy,
): Promise<string[]> {
  const candidates = pastGrace(page, policy.orphanGraceMs, now, requestBlobKeyParts);
  return keysJudgedByFuture(target, candidates, ['status', 'result_key'], ({ key, ofRun }, row) => {
    if (row === undefined) return true;
    return ofRun && row.status !== 'pending' && row.result_key !== key;
  });
}

/**
 * The model, save request and run (undefined: the layout before runs) a checkpoint blob or archive
 * key belongs to; undefined for a key the worker never writes.
 */
function checkpointKeyParts(key: string): { modelId: string; requestId: string; run?: string } | undefined {
  const parsed = parseRunKey(key);
  if (parsed?.kind === 'checkpoint' || parsed?.kind === 'archive') {
    return { modelId: parsed.modelId, requestId: parsed.requestId, run: parsed.run };
  }
  const legacy = LEGACY_CHECKPOINT_KEY.exec(key);
  if (legacy === null) return undefined;
  const modelId = legacy[1]!;
  const requestId = legacy[2]!;
  // Only keys that the storage layout gives back unchanged: anything else is not ours to judge.
  if (storageKeys.legacyCheckpoint(modelId, checkpointContentId(requestId)) !== key) return undefined;
  return { modelId, requestId };
}

/**
 * Checkpoint blobs and archives past their grace that no save's commit names: their save request
 * (its future, read strongly) ended `failed`, or ended `completed` by another run than the key's.
 * A save's name record is committed in the same transaction that ends its future with its run, on
 * condition the future is still pending (E4); a terminal status is final (every terminal write is
 * conditional on `pending`, and a retried submit answers the original future, R7). So such an object
 * is referenced by nothing and never will be. Anything less certain keeps it: a row that is missing
 * or pending, a completed row without a run (ended before runs were recorded) or with this key's
 * run, or a row that does not describe a save of this key's model. Deleting a referenced checkpoint
 * cannot be undone. The committed objects go with their content (services/sweeper/checkpoint-gc.ts).
 */
async function unsavedCheckpointObjects(
  target: BlobGcTarget,
  page: readonly ListedObject[],
  now: number,
  policy: BlobGcPolicy,
): Promise<string[]> {
  const candidates = pastGrace(page, policy.checkpointGraceMs, now, checkpointKeyParts);
  const members = ['status', 'model_id', 'request_type', 'run'];
  return keysJudgedByFuture(target, candidates, members, ({ modelId, run }, row) => {
    if (row === undefined || row.model_id !== modelId || !SAVE_REQUEST_TYPES.has(row.request_type)) {
      return false;
    }
    if (row.status === 'failed') return true;
    return row.status === 'completed' && run !== undefined && typeof row.run === 'string' && row.run !== run;
  });
}
