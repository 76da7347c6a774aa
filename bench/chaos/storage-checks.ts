import { GetObjectCommand, HeadObjectCommand, ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { isAwsError } from '../../shared/base/errors.js';
import type { CheckpointNameRecord, FutureRow, ModelRow } from '../../shared/domain/records.js';
import {
  type BlobGcCounters,
  collectGarbage,
  DEFAULT_BLOB_GC_POLICY,
} from '../../shared/services/sweeper/blob-gc.js';
import { scanAll } from './state-checks.js';

/**
 * Orphans (E5: only the sweeper deletes blobs, only blobs no committed row references). The
 * sweeper's blob GC is run as of a time past every retention and grace period; then nothing may be
 * left that no row references (payloads, results, work items, model states, checkpoints and
 * archives no committed name record names: of saves that ended failed, or of a run whose commit did
 * not land), and nothing a row references may be gone. Every future is terminal by then, so a
 * checkpoint object no committed name record names is one the GC should have collected.
 */

/** Committed checkpoints' objects by save request id: what each name record names (E3: never derived). */
export async function committedCheckpoints(
  doc: DynamoDBDocumentClient,
  registryTable: string,
): Promise<Map<string, { readonly blob_key: string; readonly archive_key?: string }>> {
  const records = await scanAll<Partial<CheckpointNameRecord>>(doc, registryTable);
  const saved = new Map<string, { blob_key: string; archive_key?: string }>();
  for (const record of records) {
    if (record.status !== 'committed' || record.request_id === undefined || record.blob_key === undefined)
      continue;
    saved.set(record.request_id, {
      blob_key: record.blob_key,
      ...(record.archive_key === undefined ? {} : { archive_key: record.archive_key }),
    });
  }
  return saved;
}

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
  /** Archives no committed name record names. */
  readonly orphan_archives: readonly string[];
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
  /** `committedCheckpoints`, read after the run. */
  readonly checkpoints: ReadonlyMap<string, { readonly blob_key: string; readonly archive_key?: string }>;
}): Promise<StorageReport> {
  const { s3, bucket, futures, models } = input;
  const gc = await collectGarbage(
    { s3, doc: input.doc, bucket, futuresTable: input.tables.futures, modelsTable: input.tables.models },
    Date.now() + PAST_EVERY_GRACE_MS,
  );
  const keys = await listAll(s3, bucket);
  const states = new Set([...models.values()].flatMap((model) => (model.state_ref ? [model.state_ref] : [])));
  const savedBlobs = new Set([...input.checkpoints.values()].map((saved) => saved.blob_key));
  const savedArchives = new Set(
    [...input.checkpoints.values()].flatMap((saved) => (saved.archive_key ? [saved.archive_key] : [])),
  );
  const results = new Set([...futures.values()].flatMap((row) => (row.result_key ? [row.result_key] : [])));
  const requestOf = (key: string) => /^payloads\/(.+)\.json$/.exec(key)?.[1] ?? '';
  const report = {
    gc,
    objects_after_gc: keys.length,
    orphan_payloads: keys.filter((key) => key.startsWith('payloads/') && !futures.has(requestOf(key))),
    orphan_results: keys.filter((key) => key.startsWith('results/') && !results.has(key)),
    orphan_work_items: keys.filter((key) => key.startsWith('work/')),
    orphan_states: keys.filter((key) => key.startsWith('state/') && !states.has(key)),
    orphan_checkpoints: keys.filter((key) => key.startsWith('checkpoints/') && !savedBlobs.has(key)),
    orphan_archives: keys.filter((key) => key.startsWith('archives/') && !savedArchives.has(key)),
    dangling: [] as string[],
  };
  const present = new Set(keys);
  const referenced = [...states, ...results, ...savedBlobs, ...savedArchives];
  for (const key of referenced) {
    if (!present.has(key) && !(await exists(s3, bucket, key))) report.dangling.push(key);
  }
  return report;
}
