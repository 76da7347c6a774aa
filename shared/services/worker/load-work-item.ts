import type { S3Client } from '@aws-sdk/client-s3';
import { InfrastructureError } from '../../base/errors.js';
import { PayloadBytes } from '../../base/payload-bytes.js';
import {
  type WorkItem,
  type WorkManifest,
  workItemSchema,
  workManifestSchema,
} from '../../domain/planning/work-item.js';
import { decodeWorkItemFile, entriesOf, type ItemShape } from '../../domain/planning/work-item-file.js';
import { getBytes } from './blobs.js';

/**
 * JSON payloads are parsed here, once per work item; protobuf pass payloads stay bytes until their
 * step decodes them into typed arrays (W4).
 */
function withJsonPayloadsParsed(item: unknown): unknown {
  for (const entry of entriesOf(item as ItemShape)) {
    if (entry.payload !== undefined) entry.payload = stepPayloadOf(entry.payload);
  }
  return item;
}

/** A stored payload as a step takes it: JSON parsed, protobuf left as bytes (also for a replayed step, S4). */
export function stepPayloadOf(payload: unknown): unknown {
  if (payload instanceof PayloadBytes && payload.format === 'json') {
    return JSON.parse(new TextDecoder().decode(payload.bytes)) as unknown;
  }
  return payload;
}

/** A work item by value (tests, a driver that already holds it) or the manifest naming it in S3. */
export type WorkSource = WorkItem | WorkManifest;

function isManifest(source: WorkSource): source is WorkManifest {
  return !('models' in source);
}

/** Parses an SQS message body into a manifest; a malformed one is a poison message (never runnable). */
export function parseManifest(body: string): WorkManifest {
  try {
    return workManifestSchema.parse(JSON.parse(body));
  } catch (error) {
    throw new InfrastructureError('the work message is not a work item manifest', { cause: error });
  }
}

/** The work item, checked against the scheduler's schema (contiguous seqs, one model once, R4). */
export async function loadWorkItem(source: WorkSource, s3: S3Client, bucket: string): Promise<WorkItem> {
  if (!isManifest(source)) return workItemSchema.parse(withJsonPayloadsParsed(source));
  const bytes = await getBytes(s3, bucket, source.key);
  let parsed: unknown;
  try {
    parsed = decodeWorkItemFile(bytes);
  } catch (error) {
    throw new InfrastructureError(`work item ${source.key} is not a work item file`, { cause: error });
  }
  const checked = workItemSchema.safeParse(withJsonPayloadsParsed(parsed));
  if (!checked.success) {
    throw new InfrastructureError(`work item ${source.key} does not match the work item schema`, {
      cause: checked.error,
      context: { key: source.key },
    });
  }
  if (checked.data.work_item_id !== source.work_item_id) {
    throw new InfrastructureError(`work item ${source.key} is not ${source.work_item_id}`);
  }
  return checked.data;
}
