import { GetObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { backoffDelay, realSleep } from '../../aws/backoff.js';
import { Limiter } from '../../aws/limiter.js';
import { TRANSIENT_AWS_ERROR_NAMES } from '../../aws/transient-errors.js';
import { isAwsError } from '../../base/errors.js';
import { sha256Hex } from '../../base/ids.js';
import { logger } from '../../base/logger.js';
import { storageKeys } from '../../base/storage-keys.js';
import { payloadFromObject } from '../../repositories/payloads.js';

/** S3 GETs in flight at once per tick. */
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
