import type { S3Client } from '@aws-sdk/client-s3';
import { awsClients } from '../../shared/aws/clients.js';
import { config } from '../../shared/base/config.js';
import { InfrastructureError } from '../../shared/base/errors.js';
import { sha256Hex } from '../../shared/base/ids.js';
import { readStoredPayload } from '../../shared/repositories/payloads.js';

// Tests read back what the API stored; production reads payloads as bytes (readStoredPayload).

/** A JSON payload, parsed, whose bytes must match `expectedDigest` (the row's fingerprint). */
export async function readPayload<T = unknown>(
  key: string,
  expectedDigest: string,
  s3: S3Client = awsClients().s3,
): Promise<T> {
  const payload = await readStoredPayload(s3, config().bucket, key);
  if (payload.format !== 'json' || sha256Hex(payload.bytes) !== expectedDigest) {
    throw new InfrastructureError(`payload ${key} is not the JSON payload its row names`, {
      context: { key },
    });
  }
  return JSON.parse(new TextDecoder().decode(payload.bytes)) as T;
}
