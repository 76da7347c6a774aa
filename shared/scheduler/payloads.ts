import { GetObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { isAwsError } from '../errors.js';
import { sha256Hex } from '../ids.js';
import { logger } from '../logger.js';
import { Limiter } from '../prefix/limiter.js';
import { storageKeys } from '../storage-keys.js';

/** S3 GETs in flight at once per tick. */
const PAYLOAD_READ_CONCURRENCY = 32;

export interface PayloadReads {
  /** Parsed payloads by request id; a request left out has no readable payload. */
  readonly payloads: Map<string, unknown>;
  readonly gets: number;
  readonly bytes: number;
  /** Missing objects, or bodies that do not match the digest stored with them. */
  readonly unreadable: string[];
}

/**
 * GETs exactly the payloads of `requestIds` (R6: call it with the dispatched requests only). A
 * missing object, or one whose body does not match the sha256 the API stored in its metadata, is
 * reported as unreadable: the caller dispatches that step as a server-error fail step (R5). Any
 * other S3 error is thrown; the tick then fails and its claims expire.
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
        let body: string | undefined;
        let digest: string | undefined;
        try {
          const answer = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
          body = await answer.Body?.transformToString('utf8');
          digest = answer.Metadata?.sha256;
        } catch (error) {
          if (!isAwsError(error, 'NoSuchKey', 'NotFound')) throw error;
        }
        if (body === undefined) {
          unreadable.push(requestId);
          return;
        }
        bytes += Buffer.byteLength(body);
        if (digest !== undefined && sha256Hex(body) !== digest) {
          logger.error('payload does not match its stored digest', { request_id: requestId });
          unreadable.push(requestId);
          return;
        }
        payloads.set(requestId, JSON.parse(body) as unknown);
      }),
    ),
  );
  return { payloads, gets: requestIds.length, bytes, unreadable };
}
