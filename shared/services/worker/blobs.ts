import { GetObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { InfrastructureError, isAwsError } from '../../base/errors.js';

/**
 * Binary and JSON objects the worker reads and writes (states, checkpoints, large results, work
 * items), in the bucket the worker's runtime resolved (`RunContext.bucket`).
 */

export async function getBytes(s3: S3Client, bucket: string, key: string): Promise<Uint8Array> {
  try {
    const answer = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    const bytes = await answer.Body?.transformToByteArray();
    if (bytes === undefined) throw new Error('empty body');
    return bytes;
  } catch (error) {
    const missing = isAwsError(error, 'NoSuchKey', 'NotFound');
    throw new InfrastructureError(`object ${key} is ${missing ? 'missing' : 'unreadable'}`, {
      cause: error,
      context: { key },
    });
  }
}

export async function putBytes(
  s3: S3Client,
  bucket: string,
  key: string,
  body: Uint8Array | string,
  json = false,
): Promise<void> {
  await s3.send(
    new PutObjectCommand({
      Bucket: bucket,
      Key: key,
      Body: body,
      ContentType: json ? 'application/json' : 'application/octet-stream',
    }),
  );
}
