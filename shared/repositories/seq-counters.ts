import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { awsClients } from '../aws/clients.js';
import { registryKey, type SeqCounterRecord } from '../domain/records.js';
import { NotFoundError } from '../errors.js';
import { readRegistryItem } from './registry.js';

export function modelNotFound(modelId: string, why = 'not found'): NotFoundError {
  return new NotFoundError(`model ${modelId} ${why}`, { context: { field: 'model_id' } });
}

/**
 * The model's seq counter item, read strongly: what intake knows about a model (tenant, base model,
 * last seq, last client seq_id, unloaded). 404 when unknown or another tenant's.
 */
export async function requireSeqCounter(
  modelId: string,
  tenant: string,
  doc: DynamoDBDocumentClient = awsClients().doc,
): Promise<SeqCounterRecord> {
  const record = await readRegistryItem<SeqCounterRecord>(registryKey.seqCounter(modelId), doc);
  if (record === undefined || record.tenant !== tenant) throw modelNotFound(modelId);
  return record;
}
