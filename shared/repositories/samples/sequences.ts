import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { batchGetByKey } from '../../aws/batch-get.js';
import type { TransactItem } from '../../aws/transact.js';
import { registryKey, type SampleSequencesRecord } from '../../domain/records.js';
import { putOnce } from '../intake/run-intake.js';

/**
 * The one module that writes and reads `sample#<request_id>` records (W8): written once, in the
 * sample's intake transaction; read by key when a provenance span names one of its ids.
 */
export function sampleSequencesItem(table: string, record: SampleSequencesRecord): TransactItem {
  return putOnce(table, record);
}

/** The records of these requests that belong to `tenant`, by request id (another tenant's read as absent). */
export async function readSampleSequences(
  doc: DynamoDBDocumentClient,
  table: string,
  requestIds: Iterable<string>,
  tenant: string,
): Promise<Map<string, SampleSequencesRecord>> {
  const keys = [...new Set(requestIds)].map((requestId) => registryKey.sampleSequences(requestId));
  const found = await batchGetByKey(doc, keys, { table, keyName: 'pk', consistent: true });
  const mine = new Map<string, SampleSequencesRecord>();
  for (const item of found.values()) {
    const record = item as unknown as SampleSequencesRecord;
    if (record.tenant === tenant) mine.set(record.request_id, record);
  }
  return mine;
}
