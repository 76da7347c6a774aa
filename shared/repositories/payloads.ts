import { DeleteObjectCommand, GetObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { InfrastructureError } from '../base/errors.js';
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
