import { DeleteObjectCommand, GetObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { backoffDelay, realSleep } from '../aws/backoff.js';
import { Limiter } from '../aws/limiter.js';
import { TRANSIENT_AWS_ERROR_NAMES } from '../aws/transient-errors.js';
import { InfrastructureError, isAwsError } from '../base/errors.js';
import { sha256Hex } from '../base/ids.js';
import { logger } from '../base/logger.js';
import {
  isPayloadCompression,
  isPayloadFormat,
  PAYLOAD_CONTENT_TYPES,
  PayloadBytes,
  type PayloadCompression,
  type PayloadFormat,
} from '../base/payload-bytes.js';
import { storageKeys } from '../base/storage-keys.js';

/**
 * Request payloads in S3, under a key derived from the request id. Two digests: `digest`, the
 * fingerprint the idempotency records compare (R7), is the sha256 of the payload's canonical form
 * (JSON with sorted keys, or the canonical protobuf encoding of a pass), derived only from the
 * validated request and its idempotency key, so a retry gives the same one whichever wire it came
 * by; `storedDigest`, the sha256 of the stored bytes, is the integrity check readers run. They
 * differ only for a body stored as received in compressed form.
 */

export interface SerializedPayload {
  readonly body: string | Uint8Array;
  /** Stored bytes. */
  readonly bytes: number;
  readonly digest: string;
  readonly storedDigest: string;
  readonly format: PayloadFormat;
  readonly compression?: PayloadCompression;
}

/**
 * JSON with object keys in sorted order at every level; `undefined` members are left out. Arrays of
 * numbers (token ids, tensor data: nearly all of a payload's bytes) go to the native serializer whole.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) {
    if (value.every((member) => typeof member === 'number')) return JSON.stringify(value);
    return `[${value.map((member) => (member === undefined ? 'null' : canonicalJson(member))).join(',')}]`;
  }
  const members: string[] = [];
  for (const key of Object.keys(value).sort()) {
    const member = (value as Record<string, unknown>)[key];
    if (member !== undefined) members.push(`${JSON.stringify(key)}:${canonicalJson(member)}`);
  }
  return `{${members.join(',')}}`;
}

export function serializePayload(payload: unknown): SerializedPayload {
  const body = canonicalJson(payload);
  const digest = sha256Hex(body);
  return { body, bytes: Buffer.byteLength(body), digest, storedDigest: digest, format: 'json' };
}

/**
 * A protobuf pass payload: `canonical` is its canonical encoding (the fingerprint); `stored`, when
 * given, is what is kept instead (the client's compressed body, smaller to store and to move).
 */
export function serializeBinaryPayload(
  canonical: Uint8Array,
  stored?: { readonly bytes: Uint8Array; readonly compression: PayloadCompression },
): SerializedPayload {
  const digest = sha256Hex(canonical);
  if (stored === undefined) {
    return { body: canonical, bytes: canonical.length, digest, storedDigest: digest, format: 'tinker-pb' };
  }
  return {
    body: stored.bytes,
    bytes: stored.bytes.length,
    digest,
    storedDigest: sha256Hex(stored.bytes),
    format: 'tinker-pb',
    compression: stored.compression,
  };
}

/** S3 metadata of a stored payload: its integrity digest, format and compression. */
export function payloadMetadata(serialized: SerializedPayload): Record<string, string> {
  return {
    sha256: serialized.storedDigest,
    format: serialized.format,
    ...(serialized.compression === undefined ? {} : { compression: serialized.compression }),
  };
}

/** The stored bytes with what their metadata says of them; objects from before formats were recorded are JSON. */
export function payloadFromObject(
  bytes: Uint8Array,
  metadata: Record<string, string> | undefined,
): PayloadBytes {
  const format = metadata?.format;
  const compression = metadata?.compression;
  return new PayloadBytes(
    bytes,
    isPayloadFormat(format) ? format : 'json',
    isPayloadCompression(compression) ? compression : undefined,
  );
}

export async function putPayload(
  s3: S3Client,
  bucket: string,
  requestId: string,
  serialized: SerializedPayload,
): Promise<string> {
  const key = storageKeys.payload(requestId);
  await s3.send(
    new PutObjectCommand({
      Bucket: bucket,
      Key: key,
      Body: serialized.body,
      ContentType: PAYLOAD_CONTENT_TYPES[serialized.format],
      Metadata: payloadMetadata(serialized),
    }),
  );
  return key;
}

/** Reads a payload and checks it against its stored digest; a mismatch or a missing object is an infrastructure error. */
export async function readStoredPayload(s3: S3Client, bucket: string, key: string): Promise<PayloadBytes> {
  const answer = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
  const bytes = await answer.Body?.transformToByteArray();
  if (bytes === undefined) throw new InfrastructureError(`payload ${key} has no body`, { context: { key } });
  const expected = answer.Metadata?.sha256;
  if (expected !== undefined && sha256Hex(bytes) !== expected) {
    throw new InfrastructureError(`payload ${key} does not match its digest`, { context: { key } });
  }
  return payloadFromObject(bytes, answer.Metadata);
}

/** Best-effort delete of a payload no row will ever reference (the sweeper collects what this misses). */
export async function deletePayloadQuietly(s3: S3Client, bucket: string, key: string): Promise<void> {
  try {
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }));
  } catch (error) {
    logger.warn('orphan payload not deleted; the sweeper will collect it', {
      key,
      error: error instanceof Error ? error.name : String(error),
    });
  }
}

/** S3 GETs in flight at once per call. */
const PAYLOAD_READ_CONCURRENCY = 32;
/**
 * Tries per GET on a transient error. A tick reads hundreds of payloads after it claimed their
 * models, and one GET that fails fails the pass: it gives its claims back, but every model it claimed
 * waits for the next tick (and, if a release fails too, for its lease and an attempt charged, E2).
 */
const PAYLOAD_GET_ATTEMPTS = 3;
const PAYLOAD_GET_BACKOFF = { baseMs: 25, capMs: 400, maxRetries: PAYLOAD_GET_ATTEMPTS };

/** The object's bytes and metadata; both undefined when it does not exist. */
async function getPayloadObject(
  s3: S3Client,
  bucket: string,
  key: string,
): Promise<{ body?: Uint8Array; metadata?: Record<string, string> }> {
  for (let attempt = 1; ; attempt++) {
    try {
      const answer = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
      return { body: await answer.Body?.transformToByteArray(), metadata: answer.Metadata ?? {} };
    } catch (error) {
      if (isAwsError(error, 'NoSuchKey', 'NotFound')) return {};
      if (attempt >= PAYLOAD_GET_ATTEMPTS || !isAwsError(error, ...TRANSIENT_AWS_ERROR_NAMES)) throw error;
      await realSleep(backoffDelay(attempt, PAYLOAD_GET_BACKOFF, Math.random));
    }
  }
}

export interface PayloadReads {
  /**
   * `PayloadBytes` by request id, undecoded; a request left out has no readable payload. (Values of
   * other kinds are written into the work item as inline JSON: the benchmarks' baselines hand the
   * tick payloads they decoded themselves.)
   */
  readonly payloads: Map<string, unknown>;
  readonly gets: number;
  readonly bytes: number;
  /** Missing objects, or bodies that do not match the digest stored with them. */
  readonly unreadable: string[];
}

/**
 * GETs exactly the payloads of `requestIds` (R6: call it with the dispatched requests only), and
 * keeps their bytes as stored: the worker decodes them (W4). A
 * missing object, or one whose body does not match the sha256 the API stored in its metadata, is
 * reported as unreadable: the caller dispatches that step as a server-error fail step (R5). A
 * transient S3 error is tried again a few times; any other error, or one that persists, is thrown:
 * the pass then fails and gives its claims back.
 */
export async function readPayloads(
  s3: S3Client,
  bucket: string,
  requestIds: readonly string[],
): Promise<PayloadReads> {
  const limiter = new Limiter(PAYLOAD_READ_CONCURRENCY);
  const payloads = new Map<string, unknown>();
  const unreadable: string[] = [];
  let bytes = 0;
  await Promise.all(
    requestIds.map((requestId) =>
      limiter.run(async () => {
        const key = storageKeys.payload(requestId);
        const { body, metadata } = await getPayloadObject(s3, bucket, key);
        if (body === undefined) {
          unreadable.push(requestId);
          return;
        }
        bytes += body.length;
        const digest = metadata?.sha256;
        if (digest !== undefined && sha256Hex(body) !== digest) {
          logger.error('payload does not match its stored digest', { request_id: requestId });
          unreadable.push(requestId);
          return;
        }
        payloads.set(requestId, payloadFromObject(body, metadata));
      }),
    ),
  );
  return { payloads, gets: requestIds.length, bytes, unreadable };
}
