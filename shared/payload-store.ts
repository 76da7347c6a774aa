import { DeleteObjectCommand, GetObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { awsClients } from './aws/clients.js';
import { config } from './config.js';
import { InfrastructureError } from './errors.js';
import { sha256Hex } from './ids.js';
import { logger } from './logger.js';
import { storageKeys } from './storage-keys.js';

/**
 * Request payloads in S3, under a key derived from the request id, with the sha256 digest of their
 * bytes. Payloads are serialized canonically (object keys sorted), and the API stores only values
 * derived from the validated request and its idempotency key, so a retried request produces the same
 * bytes and the same digest: the digest is both the integrity check a worker runs and the
 * fingerprint the idempotency records compare (R7).
 */

export interface SerializedPayload {
  readonly body: string;
  readonly bytes: number;
  readonly digest: string;
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
  return { body, bytes: Buffer.byteLength(body), digest: sha256Hex(body) };
}

export async function putPayload(
  requestId: string,
  serialized: SerializedPayload,
  s3: S3Client = awsClients().s3,
): Promise<string> {
  const key = storageKeys.payload(requestId);
  await s3.send(
    new PutObjectCommand({
      Bucket: config().bucket,
      Key: key,
      Body: serialized.body,
      ContentType: 'application/json',
      Metadata: { sha256: serialized.digest },
    }),
  );
  return key;
}

/** Reads a payload and checks its digest; a mismatch or a missing object is an infrastructure error. */
export async function readPayload<T = unknown>(
  key: string,
  expectedDigest: string,
  s3: S3Client = awsClients().s3,
): Promise<T> {
  const answer = await s3.send(new GetObjectCommand({ Bucket: config().bucket, Key: key }));
  const body = await answer.Body?.transformToString('utf8');
  if (body === undefined) throw new InfrastructureError(`payload ${key} has no body`, { context: { key } });
  const digest = sha256Hex(body);
  if (digest !== expectedDigest) {
    throw new InfrastructureError(`payload ${key} does not match its digest`, { context: { key } });
  }
  return JSON.parse(body) as T;
}

/** Best-effort delete of a payload no row will ever reference (the sweeper collects what this misses). */
export async function deletePayloadQuietly(key: string, s3: S3Client = awsClients().s3): Promise<void> {
  try {
    await s3.send(new DeleteObjectCommand({ Bucket: config().bucket, Key: key }));
  } catch (error) {
    logger.warn('orphan payload not deleted; the sweeper will collect it', {
      key,
      error: error instanceof Error ? error.name : String(error),
    });
  }
}
