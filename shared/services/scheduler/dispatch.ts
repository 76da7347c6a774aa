import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  PutObjectCommand,
  type S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { storageKeys } from '../../base/storage-keys.js';
import { type WorkItem, type WorkManifest, workItemSchema } from '../../domain/planning/work-item.js';
import { encodeWorkItemFile } from '../../domain/planning/work-item-file.js';

/**
 * Bodies above this go up in parts. A work item of 256 passes of ~76 KiB is ~20 MB: one PUT takes
 * that on AWS, but request bodies are capped lower elsewhere (fauxqs: 11 MiB), and parts upload in
 * parallel. S3 parts are at least 5 MiB (except the last).
 */
export const MULTIPART_PART_BYTES = 8 * 1024 * 1024;
const PART_CONCURRENCY = 4;
const WORK_ITEM_CONTENT_TYPE = 'application/octet-stream';

/**
 * Writes the work item to S3 (`work/<id>.json`, in the layout of work-item-file.ts: payload bytes
 * copied in as read) and returns its size. Checked against the schema first, so a malformed item
 * (a gapped run, a missing payload) never reaches a worker.
 */
export async function writeWorkItem(s3: S3Client, bucket: string, workItem: WorkItem): Promise<number> {
  workItemSchema.parse(workItem);
  const body = encodeWorkItemFile(workItem);
  const key = storageKeys.workItem(workItem.work_item_id);
  if (body.length <= MULTIPART_PART_BYTES) {
    await s3.send(
      new PutObjectCommand({ Bucket: bucket, Key: key, Body: body, ContentType: WORK_ITEM_CONTENT_TYPE }),
    );
  } else {
    await putInParts(s3, bucket, key, body);
  }
  return body.length;
}

/** Uploads `body` in `MULTIPART_PART_BYTES` parts (exported for the scheduler bench's pre-W4 baseline). */
export async function putInParts(s3: S3Client, bucket: string, key: string, body: Uint8Array): Promise<void> {
  const created = await s3.send(
    new CreateMultipartUploadCommand({ Bucket: bucket, Key: key, ContentType: WORK_ITEM_CONTENT_TYPE }),
  );
  const uploadId = created.UploadId;
  if (uploadId === undefined) throw new Error(`S3 gave no upload id for ${key}`);
  try {
    const count = Math.ceil(body.length / MULTIPART_PART_BYTES);
    const etags: string[] = new Array(count);
    for (let first = 0; first < count; first += PART_CONCURRENCY) {
      const batch = Array.from(
        { length: Math.min(PART_CONCURRENCY, count - first) },
        (_, offset) => first + offset,
      );
      await Promise.all(
        batch.map(async (index) => {
          const part = await s3.send(
            new UploadPartCommand({
              Bucket: bucket,
              Key: key,
              UploadId: uploadId,
              PartNumber: index + 1,
              Body: body.subarray(index * MULTIPART_PART_BYTES, (index + 1) * MULTIPART_PART_BYTES),
            }),
          );
          if (part.ETag === undefined) throw new Error(`S3 gave no ETag for part ${index + 1} of ${key}`);
          etags[index] = part.ETag;
        }),
      );
    }
    await s3.send(
      new CompleteMultipartUploadCommand({
        Bucket: bucket,
        Key: key,
        UploadId: uploadId,
        MultipartUpload: { Parts: etags.map((ETag, index) => ({ ETag, PartNumber: index + 1 })) },
      }),
    );
  } catch (error) {
    // Parts of an abandoned upload cost storage until aborted; the item itself is never visible.
    await s3
      .send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId: uploadId }))
      .catch(() => undefined);
    throw error;
  }
}

/** Sends the small manifest naming a written work item: queues carry names, S3 carries batches. */
export async function sendManifest(sqs: SQSClient, queueUrl: string, manifest: WorkManifest): Promise<void> {
  await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: JSON.stringify(manifest) }));
}
