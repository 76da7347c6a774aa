import type { S3Client } from '@aws-sdk/client-s3';
import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { bytesSource, DEFAULT_PART_BYTES, putObjectFrom } from '../../aws/s3-streams.js';
import { storageKeys } from '../../base/storage-keys.js';
import { type WorkItem, type WorkManifest, workItemSchema } from '../../domain/planning/work-item.js';
import { encodeWorkItemFile } from '../../domain/planning/work-item-file.js';

/**
 * Bodies above this go up in parts. A work item of 256 passes of ~76 KiB is ~20 MB: one PUT takes
 * that on AWS, but request bodies are capped lower elsewhere (fauxqs: 11 MiB), and parts upload in
 * parallel (shared/aws/s3-streams.ts).
 */
export const MULTIPART_PART_BYTES = DEFAULT_PART_BYTES;
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
  await putInParts(s3, bucket, key, body);
  return body.length;
}

/**
 * Uploads `body`: one PUT up to `MULTIPART_PART_BYTES`, else in parts of that size (exported for the
 * scheduler bench's pre-W4 baseline).
 */
export async function putInParts(s3: S3Client, bucket: string, key: string, body: Uint8Array): Promise<void> {
  await putObjectFrom(s3, bucket, key, bytesSource(body), {
    partBytes: MULTIPART_PART_BYTES,
    contentType: WORK_ITEM_CONTENT_TYPE,
  });
}

/** Sends the small manifest naming a written work item: queues carry names, S3 carries batches. */
export async function sendManifest(sqs: SQSClient, queueUrl: string, manifest: WorkManifest): Promise<void> {
  await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: JSON.stringify(manifest) }));
}
