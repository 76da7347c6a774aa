import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { type FileHandle, open, rm } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  type S3Client,
  UploadPartCommand,
  UploadPartCopyCommand,
} from '@aws-sdk/client-s3';
import { isAwsError } from '../base/errors.js';
import { type BackoffPolicy, backoffDelay, type Clock, realClock } from './backoff.js';
import { TRANSIENT_AWS_ERROR_NAMES } from './transient-errors.js';

/**
 * Objects of any size to and from S3 with bounded memory (S3 of docs/design.md#s1): an upload reads
 * its body part by part from a `PartSource` (a file, or bytes already in memory) and sends each as an
 * UploadPart, at most `concurrency` parts at once, so at most `concurrency x partBytes` of the body is
 * in this process at any time; a download streams the body to a file. A body of at most one part goes
 * up as one PutObject.
 *
 * Part size: S3 wants at least 5 MiB per part but the last, and at most 10,000 parts; the local S3
 * (fauxqs) refuses request bodies above 11 MiB. The default, 8 MiB, suits both (80 GB at most in
 * 10,000 parts; a larger body raises the part size to fit). A copy (`copyObject`) is server side, in
 * parts above CopyObject's 5 GiB. A failed upload is aborted, so its parts stop costing storage (the
 * bucket's lifecycle rule collects any an abort missed, cdk/constructs/bucket.ts).
 */

export const DEFAULT_PART_BYTES = 8 * 1024 * 1024;
export const DEFAULT_PART_CONCURRENCY = 4;
/** S3's bound on the parts of one upload. */
export const MAX_PARTS = 10_000;

/** A body of known size, read in ranges; each read answers exactly `length` bytes at `offset`. */
export interface PartSource {
  readonly size: number;
  read(offset: number, length: number): Promise<Uint8Array>;
}

export function bytesSource(bytes: Uint8Array): PartSource {
  return {
    size: bytes.length,
    read: (offset, length) => Promise.resolve(bytes.subarray(offset, offset + length)),
  };
}

/** A file's bytes, read through one open handle (closed by `withFileSource`). */
export async function withFileSource<T>(path: string, use: (source: PartSource) => Promise<T>): Promise<T> {
  const handle = await open(path, 'r');
  try {
    const { size } = await handle.stat();
    return await use({ size, read: (offset, length) => readRange(handle, offset, length) });
  } finally {
    await handle.close();
  }
}

async function readRange(handle: FileHandle, offset: number, length: number): Promise<Uint8Array> {
  const buffer = new Uint8Array(length);
  let filled = 0;
  while (filled < length) {
    const { bytesRead } = await handle.read(buffer, filled, length - filled, offset + filled);
    if (bytesRead === 0) throw new Error(`file ended at byte ${offset + filled}, ${length - filled} short`);
    filled += bytesRead;
  }
  return buffer;
}

export interface TransferOptions {
  /** Bytes per part (default DEFAULT_PART_BYTES); raised when the body would need more than MAX_PARTS. */
  readonly partBytes?: number;
  /** Parts uploading at once (default DEFAULT_PART_CONCURRENCY). */
  readonly concurrency?: number;
  readonly contentType?: string;
  /** Retries of each request on a transient error (the SDK's own retries come first). */
  readonly backoff?: BackoffPolicy;
  readonly clock?: Clock;
}

const TRANSFER_BACKOFF: BackoffPolicy = { baseMs: 100, capMs: 2_000, maxRetries: 4 };

/** What an upload did: its size and how many parts it took (0: one PutObject). */
export interface Uploaded {
  readonly size: number;
  readonly parts: number;
}

/** The part size an upload of `size` bytes uses: `partBytes`, or larger if the body needs more parts than S3 takes. */
export function partSizeFor(size: number, partBytes: number = DEFAULT_PART_BYTES): number {
  if (!Number.isSafeInteger(partBytes) || partBytes <= 0) throw new RangeError(`part size ${partBytes}`);
  return Math.max(partBytes, Math.ceil(size / MAX_PARTS));
}

/**
 * Writes `source` to `key`: one PutObject when it fits one part, else a multipart upload whose parts
 * are read from the source only when their upload starts. The object appears whole or not at all.
 */
export async function putObjectFrom(
  s3: S3Client,
  bucket: string,
  key: string,
  source: PartSource,
  options: TransferOptions = {},
): Promise<Uploaded> {
  const partBytes = partSizeFor(source.size, options.partBytes);
  const contentType = options.contentType ?? 'application/octet-stream';
  const retry = retrier(options);
  if (source.size <= partBytes) {
    const body = await source.read(0, source.size);
    await retry(() =>
      s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body, ContentType: contentType })),
    );
    return { size: source.size, parts: 0 };
  }
  const created = await retry(() =>
    s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key, ContentType: contentType })),
  );
  const uploadId = created.UploadId;
  if (uploadId === undefined) throw new Error(`S3 gave no upload id for ${key}`);
  const count = Math.ceil(source.size / partBytes);
  try {
    const etags = await forEachBounded(
      count,
      options.concurrency ?? DEFAULT_PART_CONCURRENCY,
      async (index) => {
        const offset = index * partBytes;
        const body = await source.read(offset, Math.min(partBytes, source.size - offset));
        const part = await retry(() =>
          s3.send(
            new UploadPartCommand({
              Bucket: bucket,
              Key: key,
              UploadId: uploadId,
              PartNumber: index + 1,
              Body: body,
              ContentLength: body.length,
            }),
          ),
        );
        if (part.ETag === undefined) throw new Error(`S3 gave no ETag for part ${index + 1} of ${key}`);
        return part.ETag;
      },
    );
    await retry(() =>
      s3.send(
        new CompleteMultipartUploadCommand({
          Bucket: bucket,
          Key: key,
          UploadId: uploadId,
          MultipartUpload: { Parts: etags.map((ETag, index) => ({ ETag, PartNumber: index + 1 })) },
        }),
      ),
    );
    return { size: source.size, parts: count };
  } catch (error) {
    await s3
      .send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId: uploadId }))
      .catch(() => undefined);
    throw error;
  }
}

/** The largest object one CopyObject copies (S3: 5 GiB); larger ones are copied in parts. */
export const MAX_COPY_BYTES = 5 * 1024 ** 3;
/** Parts of a copy in parts: S3 copies them server side, so they cost no memory here. */
const COPY_PART_BYTES = 512 * 1024 ** 2;

/**
 * Copies `sourceKey` to `targetKey` in `bucket`, server side: one CopyObject up to MAX_COPY_BYTES,
 * else a multipart upload of UploadPartCopy ranges (aborted on failure). Answers the object's size.
 */
export async function copyObject(
  s3: S3Client,
  bucket: string,
  sourceKey: string,
  targetKey: string,
  options: Pick<TransferOptions, 'backoff' | 'clock' | 'concurrency'> & {
    readonly maxCopyBytes?: number;
  } = {},
): Promise<number> {
  const retry = retrier(options);
  const copySource = `${bucket}/${encodeURIComponent(sourceKey).replaceAll('%2F', '/')}`;
  const head = await retry(() => s3.send(new HeadObjectCommand({ Bucket: bucket, Key: sourceKey })));
  const size = head.ContentLength ?? 0;
  const maxCopyBytes = options.maxCopyBytes ?? MAX_COPY_BYTES;
  if (size <= maxCopyBytes) {
    await retry(() =>
      s3.send(new CopyObjectCommand({ Bucket: bucket, Key: targetKey, CopySource: copySource })),
    );
    return size;
  }
  const partBytes = partSizeFor(size, Math.min(COPY_PART_BYTES, maxCopyBytes));
  const created = await retry(() =>
    s3.send(
      new CreateMultipartUploadCommand({
        Bucket: bucket,
        Key: targetKey,
        ...(head.ContentType === undefined ? {} : { ContentType: head.ContentType }),
      }),
    ),
  );
  const uploadId = created.UploadId;
  if (uploadId === undefined) throw new Error(`S3 gave no upload id for ${targetKey}`);
  try {
    const count = Math.ceil(size / partBytes);
    const etags = await forEachBounded(
      count,
      options.concurrency ?? DEFAULT_PART_CONCURRENCY,
      async (index) => {
        const first = index * partBytes;
        const last = Math.min(size, first + partBytes) - 1;
        const part = await retry(() =>
          s3.send(
            new UploadPartCopyCommand({
              Bucket: bucket,
              Key: targetKey,
              UploadId: uploadId,
              PartNumber: index + 1,
              CopySource: copySource,
              CopySourceRange: `bytes=${first}-${last}`,
            }),
          ),
        );
        const etag = part.CopyPartResult?.ETag;
        if (etag === undefined)
          throw new Error(`S3 gave no ETag for copied part ${index + 1} of ${targetKey}`);
        return etag;
      },
    );
    await retry(() =>
      s3.send(
        new CompleteMultipartUploadCommand({
          Bucket: bucket,
          Key: targetKey,
          UploadId: uploadId,
          MultipartUpload: { Parts: etags.map((ETag, index) => ({ ETag, PartNumber: index + 1 })) },
        }),
      ),
    );
    return size;
  } catch (error) {
    await s3
      .send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: targetKey, UploadId: uploadId }))
      .catch(() => undefined);
    throw error;
  }
}

/**
 * Runs `task(0) .. task(count - 1)` with at most `concurrency` running, answers their results in
 * order. The first failure stops new tasks from starting and is thrown once the running ones settle,
 * so nothing is still reading or sending when the caller aborts.
 */
export async function forEachBounded<T>(
  count: number,
  concurrency: number,
  task: (index: number) => Promise<T>,
): Promise<T[]> {
  const results: T[] = new Array(count);
  let next = 0;
  let failed: { error: unknown } | undefined;
  const lane = async (): Promise<void> => {
    while (failed === undefined && next < count) {
      const index = next++;
      try {
        results[index] = await task(index);
      } catch (error) {
        failed ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, count)) }, lane));
  if (failed !== undefined) throw failed.error;
  return results;
}

/** Whether an S3 error is worth another try: a transient name, a 5xx, or a dropped connection. */
export function isTransientS3Error(error: unknown): boolean {
  if (isAwsError(error, ...TRANSIENT_AWS_ERROR_NAMES)) return true;
  const status = (error as { $metadata?: { httpStatusCode?: number } } | undefined)?.$metadata
    ?.httpStatusCode;
  if (status !== undefined && status >= 500) return true;
  const code = (error as { code?: unknown } | undefined)?.code;
  return code === 'ECONNRESET' || code === 'EPIPE' || code === 'ETIMEDOUT' || code === 'ECONNREFUSED';
}

function retrier(options: TransferOptions): <T>(send: () => Promise<T>) => Promise<T> {
  const policy = options.backoff ?? TRANSFER_BACKOFF;
  const clock = options.clock ?? realClock;
  return async (send) => {
    for (let retry = 0; ; retry++) {
      try {
        return await send();
      } catch (error) {
        if (retry >= policy.maxRetries || !isTransientS3Error(error)) throw error;
        await clock.sleep(backoffDelay(retry, policy, clock.random));
      }
    }
  };
}

/**
 * Streams `key` into a new file at `path` (replacing one there); answers its size and SHA-256 (hex),
 * computed on the way. On failure the partial file is removed.
 */
export async function getObjectToFile(
  s3: S3Client,
  bucket: string,
  key: string,
  path: string,
  options: Pick<TransferOptions, 'backoff' | 'clock'> = {},
): Promise<{ readonly size: number; readonly sha256: string }> {
  const retry = retrier(options);
  try {
    return await retry(async () => {
      const answer = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
      const body = answer.Body as Readable | undefined;
      if (body === undefined) throw new Error(`S3 gave no body for ${key}`);
      // A retry rewrites the file from its start, and the digest with it.
      const digest = createHash('sha256');
      let size = 0;
      await pipeline(
        body,
        async function* (source: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
          for await (const chunk of source) {
            digest.update(chunk);
            size += chunk.length;
            yield chunk;
          }
        },
        createWriteStream(path),
      );
      return { size, sha256: digest.digest('hex') };
    });
  } catch (error) {
    await rm(path, { force: true });
    throw error;
  }
}
