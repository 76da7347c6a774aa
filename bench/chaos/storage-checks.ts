import { GetObjectCommand, HeadObjectCommand, ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { FutureRow, ModelRow } from '../../shared/domain/records.js';
import { isAwsError } from '../../shared/errors.js';
import { checkpointContentId } from '../../shared/storage-keys.js';
import { type BlobGcCounters, collectGarbage, DEFAULT_BLOB_GC_POLICY } from '../../shared/sweeper/blob-gc.js';

/**
 * Orphans (E5: only the sweeper deletes blobs, only blobs no committed row references). The
 * sweeper's blob GC is run as of a time past every retention and grace period; then nothing may be
 * left that no row references (payloads, results, work items, model states, checkpoints of saves
 * that ended failed), and nothing a row references may be gone. Every future is terminal by then, so
 * a checkpoint blob no completed save names is one the GC should have collected.
 */

export interface StorageReport {
  readonly gc: BlobGcCounters;
  readonly objects_after_gc: number;
  readonly orphan_payloads: readonly string[];
  readonly orphan_results: readonly string[];
  readonly orphan_work_items: readonly string[];
  readonly orphan_states: readonly string[];
  /** Blobs a row references that are gone. */
  readonly dangling: readonly string[];
  /** Checkpoint blobs no completed save names (e.g. written by an attempt later failed by E2). */
  readonly orphan_checkpoints: readonly string[];
}

async function listAll(s3: S3Client, bucket: string): Promise<string[]> {
  const keys: string[] = [];
  let token: string | undefined;
  do {
    const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket, ContinuationToken: token }));
    for (const object of page.Contents ?? []) if (object.Key !== undefined) keys.push(object.Key);
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token !== undefined);
  return keys;
}

export async function readBlob(s3: S3Client, bucket: string, key: string): Promise<Uint8Array | undefined> {
  try {
    const answer = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    return answer.Body === undefined ? undefined : await answer.Body.transformToByteArray();
  } catch (error) {
    if (isAwsError(error, 'NoSuchKey', 'NotFound')) return undefined;
    throw error;
  }
}

async function exists(s3: S3Client, bucket: string, key: string): Promise<boolean> {
  try {
    await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
    return true;
  } catch (error) {
    if (isAwsError(error, 'NoSuchKey', 'NotFound')) return false;
    throw error;
  }
}

/** Later than every retention and grace period of the GC policy. */
const PAST_EVERY_GRACE_MS =
  Math.max(
    DEFAULT_BLOB_GC_POLICY.workItemRetentionMs,
    DEFAULT_BLOB_GC_POLICY.stateGraceMs,
    DEFAULT_BLOB_GC_POLICY.orphanGraceMs,
    DEFAULT_BLOB_GC_POLICY.checkpointGraceMs,
  ) + 3600_000;

export async function checkStorage(input: {
  readonly s3: S3Client;
  readonly doc: DynamoDBDocumentClient;
  readonly bucket: string;
  readonly tables: { readonly futures: string; readonly models: string };
  readonly futures: ReadonlyMap<string, FutureRow>;
  readonly models: ReadonlyMap<string, ModelRow>;
}): Promise<StorageReport> {
  const { s3, bucket, futures, models } = input;
  const gc = await collectGarbage(
    { s3, doc: input.doc, bucket, futuresTable: input.tables.futures, modelsTable: input.tables.models },
    Date.now() + PAST_EVERY_GRACE_MS,
  );
  const keys = await listAll(s3, bucket);
  const states = new Set([...models.values()].flatMap((model) => (model.state_ref ? [model.state_ref] : [])));
  const completedSaves = new Set(
    [...futures.values()]
      .filter(
        (row) =>
          row.status === 'completed' &&
          (row.request_type === 'save_weights' || row.request_type === 'save_weights_for_sampler'),
      )
      .map((row) => `checkpoints/${row.model_id}/${checkpointContentId(row.request_id)}.bin`),
  );
  const requestOf = (key: string) => /^(?:payloads|results)\/(.+)\.json$/.exec(key)?.[1] ?? '';
  const report = {
    gc,
    objects_after_gc: keys.length,
    orphan_payloads: keys.filter((key) => key.startsWith('payloads/') && !futures.has(requestOf(key))),
    orphan_results: keys.filter((key) => key.startsWith('results/') && !futures.has(requestOf(key))),
    orphan_work_items: keys.filter((key) => key.startsWith('work/')),
    orphan_states: keys.filter((key) => key.startsWith('state/') && !states.has(key)),
    orphan_checkpoints: keys.filter((key) => key.startsWith('checkpoints/') && !completedSaves.has(key)),
    dangling: [] as string[],
  };
  const present = new Set(keys);
  const referenced = [
    ...states,
    ...[...futures.values()].flatMap((row) => (row.result_key ? [row.result_key] : [])),
    ...completedSaves,
  ];
  for (const key of referenced) {
    if (!present.has(key) && !(await exists(s3, bucket, key))) report.dangling.push(key);
  }
  return report;
}
