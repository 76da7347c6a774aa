import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import type { DynamoDBRecord } from 'aws-lambda';
import type { RequestType } from '../../domain/records.js';
import type { SchedulerAdapters } from './adapters.js';

/** What a futures stream record says about its row (the stream carries the new image). */
export interface StreamedRow {
  readonly sequenceNumber: string;
  readonly request_id: string;
  readonly model_id: string;
  readonly request_type: RequestType;
  readonly seq?: number;
}

/**
 * The futures-table records of a stream batch whose new image is a pending row. Models-table
 * records (keyed by `model_id`) only wake the tick and are never reported.
 */
export function pendingFutureRecords(records: readonly DynamoDBRecord[]): StreamedRow[] {
  const rows: StreamedRow[] = [];
  for (const record of records) {
    const sequenceNumber = record.dynamodb?.SequenceNumber;
    const image = record.dynamodb?.NewImage;
    if (
      sequenceNumber === undefined ||
      image === undefined ||
      record.dynamodb?.Keys?.request_id === undefined
    )
      continue;
    const row = unmarshall(image as Record<string, AttributeValue>);
    if (row.status !== 'pending' || row.live === undefined) continue;
    if (typeof row.request_id !== 'string' || typeof row.model_id !== 'string') continue;
    rows.push({
      sequenceNumber,
      request_id: row.request_id,
      model_id: row.model_id,
      request_type: row.request_type as RequestType,
      ...(typeof row.seq === 'number' ? { seq: row.seq } : {}),
    });
  }
  return rows;
}

/**
 * R5: the records whose row no scan of this tick showed and that are still waiting to be planned,
 * so the stream retries them instead of leaving them to the schedule. "Still waiting" is checked
 * from strongly consistent reads: a training row whose model's planned_through is below its seq,
 * or a sample with no live claim whose row is still pending. Rows the scan did show are never
 * reported, even when blocked (a barrier, a model in flight): the model's commit wakes the tick.
 */
export async function recordsToRetry(
  rows: readonly StreamedRow[],
  seen: ReadonlySet<string>,
  adapters: Pick<SchedulerAdapters, 'readModels' | 'readSampleClaims' | 'readSampleRows'>,
  now: number,
): Promise<string[]> {
  const unseen = rows.filter((row) => !seen.has(row.request_id));
  if (unseen.length === 0) return [];
  const training = unseen.filter((row) => row.request_type !== 'sample');
  const samples = unseen.filter((row) => row.request_type === 'sample');
  const [models, claims] = await Promise.all([
    training.length === 0 ? new Map() : adapters.readModels(training.map((row) => row.model_id)),
    samples.length === 0
      ? new Set<string>()
      : adapters.readSampleClaims(
          samples.map((row) => row.request_id),
          now,
        ),
  ]);
  const unclaimed = samples.filter((row) => !claims.has(row.request_id));
  const sampleRows =
    unclaimed.length === 0
      ? new Map()
      : await adapters.readSampleRows(unclaimed.map((row) => row.request_id));

  const retry: string[] = [];
  for (const row of training) {
    const model = models.get(row.model_id);
    if (row.seq === undefined) continue;
    if (model === undefined || model.planned_through < row.seq) retry.push(row.sequenceNumber);
  }
  for (const row of unclaimed) {
    if (sampleRows.get(row.request_id)?.status === 'pending') retry.push(row.sequenceNumber);
  }
  return retry;
}
