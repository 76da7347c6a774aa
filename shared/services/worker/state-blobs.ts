import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { S3Client } from '@aws-sdk/client-s3';
import {
  bytesSource,
  getObjectToFile,
  type PartSource,
  putObjectFrom,
  type TransferOptions,
  withFileSource,
} from '../../aws/s3-streams.js';
import type {
  Backend,
  BackendState,
  BlobFile,
  FileBlobs,
  SamplerModel,
  WeightsKind,
} from '../../backend/backend.js';
import { config } from '../../base/config.js';
import { InfrastructureError, isAwsError } from '../../base/errors.js';
import { logger } from '../../base/logger.js';
import { type ArchivePlan, checkpointArchivePlan } from '../../wire/archive/archive.js';
import { getBytes } from './blobs.js';
import { DEFAULT_STATE_CACHE_BYTES, type StateCache } from './state-cache.js';

/**
 * Model states and checkpoints between the backend and S3, streamed (S3 of docs/design.md#s1): when
 * the backend writes and reads blobs as files (`Backend.fileBlobs`, the torch engine), a blob goes
 * through a spool file in the OS temp folder (deleted once used) and up in parts (shared/aws/s3-streams.ts),
 * so this process holds at most the upload's parts in flight, whatever the blob's size. A backend
 * without files (the reference backend, an engine without the feature) hands bytes as before; they go
 * up in parts too, so no single PUT limit applies.
 */

/** A blob held for a while: bytes in memory, or a spool file (removed by `discardBlob`). */
export type LocalBlob = { readonly bytes: Uint8Array } | { readonly path: string; readonly file: BlobFile };

export function blobSize(blob: LocalBlob): number {
  return 'bytes' in blob ? blob.bytes.length : blob.file.size;
}

/** The part size and parallelism of uploads (BLOB_PART_BYTES, BLOB_PART_CONCURRENCY). */
export function blobTransfer(): TransferOptions {
  const { tunables } = config();
  return { partBytes: tunables.blobPartBytes, concurrency: tunables.blobPartConcurrency };
}

/** A new file path in a folder of its own under the OS temp folder (the folder goes with the file). */
async function spoolPath(name: string): Promise<string> {
  return join(await mkdtemp(join(tmpdir(), 'tinker-blob-')), name);
}

async function removeSpool(path: string): Promise<void> {
  await rm(dirname(path), { recursive: true, force: true });
}

/** Removes a spool file; bytes need nothing. Safe to call twice; never throws (a failure is logged). */
export async function discardBlob(blob: LocalBlob | undefined): Promise<void> {
  if (blob === undefined || !('path' in blob)) return;
  await removeSpool(blob.path).catch((error: unknown) =>
    logger.warn('a spool file could not be removed', {
      path: blob.path,
      error: error instanceof Error ? error.message : String(error),
    }),
  );
}

/** Reads a blob's bytes in ranges (a file through one open handle). */
async function withBlobSource<T>(blob: LocalBlob, use: (source: PartSource) => Promise<T>): Promise<T> {
  return 'bytes' in blob ? use(bytesSource(blob.bytes)) : withFileSource(blob.path, use);
}

/** Writes a blob under `key`: one PUT up to a part, else multipart. */
export async function putBlob(
  s3: S3Client,
  bucket: string,
  key: string,
  blob: LocalBlob,
  transfer: TransferOptions = blobTransfer(),
): Promise<void> {
  await withBlobSource(blob, (source) => putObjectFrom(s3, bucket, key, source, transfer));
}

/**
 * Downloads `key`: to a spool file when `asFile`, else into memory. A missing or unreadable object
 * is an `InfrastructureError` whose cause is S3's error (NoSuchKey when missing), as `getBytes`'s.
 */
export async function fetchBlob(
  s3: S3Client,
  bucket: string,
  key: string,
  asFile: boolean,
): Promise<LocalBlob> {
  if (!asFile) return { bytes: await getBytes(s3, bucket, key) };
  const path = await spoolPath('blob');
  try {
    return { path, file: await getObjectToFile(s3, bucket, key, path) };
  } catch (error) {
    await removeSpool(path);
    const missing = isAwsError(error, 'NoSuchKey', 'NotFound');
    throw new InfrastructureError(`object ${key} is ${missing ? 'missing' : 'unreadable'}`, {
      cause: error,
      context: { key },
    });
  }
}

/** A state written: its key and size, and its bytes when this process may keep them (StateCache). */
export interface StoredState {
  readonly key: string;
  readonly size: number;
  readonly bytes?: Uint8Array;
}

/**
 * Serializes `state` and writes it under `key`. Through a spool file when the backend has files; the
 * bytes come back only when the state is at most `keepBytesUpTo` (read back from the file), else
 * (the bytes form) always, as the backend answered them.
 */
export async function writeStateBlob(
  backend: Backend,
  s3: S3Client,
  bucket: string,
  key: string,
  state: BackendState,
  options: { readonly keepBytesUpTo?: number; readonly transfer?: TransferOptions } = {},
): Promise<StoredState> {
  const transfer = options.transfer ?? blobTransfer();
  const files = await backend.fileBlobs?.();
  if (files === undefined) {
    const bytes = await backend.serializeState(state);
    await putObjectFrom(s3, bucket, key, bytesSource(bytes), transfer);
    return { key, size: bytes.length, bytes };
  }
  const path = await spoolPath('state');
  try {
    const file = await files.serializeStateTo(state, path);
    const keep = file.size <= (options.keepBytesUpTo ?? DEFAULT_STATE_CACHE_BYTES);
    return await withFileSource(path, async (source) => {
      if (source.size !== file.size) {
        throw new InfrastructureError(`the backend wrote ${source.size} bytes of a ${file.size}-byte state`);
      }
      await putObjectFrom(s3, bucket, key, source, transfer);
      return { key, size: file.size, ...(keep ? { bytes: await source.read(0, file.size) } : {}) };
    });
  } finally {
    await removeSpool(path);
  }
}

/** Loads a fetched state into the backend, then discards the blob. */
export async function loadStateBlob(backend: Backend, blob: LocalBlob): Promise<BackendState> {
  try {
    if ('bytes' in blob) return await backend.deserializeState(blob.bytes);
    const files = await requireFiles(backend);
    return await files.deserializeStateFrom(blob.path, blob.file);
  } finally {
    await discardBlob(blob);
  }
}

/**
 * The state under `key`: from this process's committed states when `cache` holds it, else from S3
 * (to a spool file when the backend has files).
 */
export async function readStateBlob(
  backend: Backend,
  s3: S3Client,
  bucket: string,
  key: string,
  cache?: StateCache,
): Promise<BackendState> {
  return loadStateBlob(backend, await fetchStateBlob(backend, s3, bucket, key, cache));
}

async function fetchStateBlob(
  backend: Backend,
  s3: S3Client,
  bucket: string,
  key: string,
  cache: StateCache | undefined,
): Promise<LocalBlob> {
  const kept = cache?.get(key);
  if (kept !== undefined) return { bytes: kept };
  return fetchBlob(s3, bucket, key, (await backend.fileBlobs?.()) !== undefined);
}

/**
 * A state fetched ahead of its use (the worker reads it while it reads the model's row): `load` loads
 * it (once) or throws the fetch's error; `discard` removes its spool file if it was never loaded.
 */
export interface PrefetchedState {
  load(): Promise<BackendState>;
  discard(): void;
}

export function prefetchStateBlob(
  backend: Backend,
  s3: S3Client,
  bucket: string,
  key: string,
  cache?: StateCache,
): PrefetchedState {
  const fetched = fetchStateBlob(backend, s3, bucket, key, cache).then(
    (blob) => ({ blob }),
    (error: unknown) => ({ error }),
  );
  let used = false;
  return {
    load: async () => {
      used = true;
      const base = await fetched;
      if ('error' in base) throw base.error;
      return loadStateBlob(backend, base.blob);
    },
    discard: () => {
      if (used) return;
      used = true;
      void fetched.then((base) => ('blob' in base ? discardBlob(base.blob) : undefined));
    },
  };
}

/** A checkpoint export (save_weights, save_weights_for_sampler): a spool file when the backend has files. */
export async function exportCheckpoint(
  backend: Backend,
  state: BackendState,
  kind: WeightsKind,
): Promise<LocalBlob> {
  const files = await backend.fileBlobs?.();
  if (files === undefined) return { bytes: await backend.exportWeights(state, kind) };
  const path = await spoolPath('weights');
  try {
    return { path, file: await files.exportWeightsTo(state, kind, path) };
  } catch (error) {
    await removeSpool(path);
    throw error;
  }
}

/** load_weights of a checkpoint blob (the caller discards it). */
export async function importCheckpoint(
  backend: Backend,
  state: BackendState,
  blob: LocalBlob,
  options: { optimizer: boolean },
): Promise<BackendState> {
  if ('bytes' in blob) return backend.importWeights(state, blob.bytes, options);
  return (await requireFiles(backend)).importWeightsFrom(state, blob.path, options);
}

/** A sampler on a checkpoint blob (the caller discards it). */
export async function loadSamplerBlob(
  backend: Backend,
  baseModel: string,
  blob: LocalBlob,
): Promise<SamplerModel> {
  if ('bytes' in blob) return backend.loadSampler(baseModel, blob.bytes);
  return (await requireFiles(backend)).loadSamplerFrom(baseModel, blob.path, blob.file);
}

/** Whether checkpoints for this backend are fetched to files. */
export async function fetchesToFiles(backend: Backend): Promise<boolean> {
  return (await backend.fileBlobs?.()) !== undefined;
}

async function requireFiles(backend: Backend): Promise<FileBlobs> {
  const files = await backend.fileBlobs?.();
  if (files === undefined) throw new InfrastructureError(`backend ${backend.name} reads no blob files`);
  return files;
}

/** A checkpoint's archive (C2): where it goes and how it is made from the checkpoint's blob. */
export interface PlannedArchive {
  readonly key: string;
  readonly plan: ArchivePlan;
}

/** The archive of a checkpoint blob, planned without reading the blob whole (`checkpointArchivePlan`). */
export async function planArchive(blob: LocalBlob, createdAtMs: number): Promise<ArchivePlan> {
  return withBlobSource(blob, (source) =>
    checkpointArchivePlan((offset, length) => source.read(offset, length), source.size, { createdAtMs }),
  );
}

/** Writes a planned archive: its parts assembled from the plan's bytes and ranges of the blob as they go up. */
export async function putArchive(
  s3: S3Client,
  bucket: string,
  archive: PlannedArchive,
  blob: LocalBlob,
  transfer: TransferOptions = blobTransfer(),
): Promise<void> {
  await withBlobSource(blob, (source) =>
    putObjectFrom(s3, bucket, archive.key, planSource(archive.plan, source), {
      ...transfer,
      contentType: 'application/x-tar',
    }),
  );
}

/** The bytes of a plan, read in ranges: its own segments copied, the blob's ranges read from `blob`. */
export function planSource(plan: ArchivePlan, blob: PartSource): PartSource {
  const starts: number[] = [];
  let total = 0;
  for (const segment of plan.segments) {
    starts.push(total);
    total += segment.length;
  }
  if (total !== plan.size) throw new InfrastructureError(`archive plan of ${plan.size} bytes has ${total}`);
  return {
    size: total,
    read: async (offset, length) => {
      const out = new Uint8Array(length);
      for (let i = 0; i < plan.segments.length; i++) {
        const segment = plan.segments[i] as ArchivePlan['segments'][number];
        const start = starts[i] as number;
        const size = segment.length;
        const from = Math.max(offset, start);
        const to = Math.min(offset + length, start + size);
        if (from >= to) continue;
        const piece =
          segment instanceof Uint8Array
            ? segment.subarray(from - start, to - start)
            : await blob.read(segment.offset + (from - start), to - from);
        out.set(piece, from - offset);
      }
      return out;
    },
  };
}
