import { type DynamoDBDocumentClient, GetCommand } from '@aws-sdk/lib-dynamodb';
import { batchGetByKey } from '../aws/batch-get.js';
import { awsClients } from '../aws/clients.js';
import { config } from '../config.js';
import type { ModelRow } from '../domain/records.js';
import { modelNotFound } from './seq-counters.js';

/** What the API reads of a model row: who owns it and how it was created (fixed at create_model). */
export type ModelSummary = Pick<ModelRow, 'model_id' | 'tenant' | 'base_model' | 'lora_config'>;

/**
 * The tenant's model as create_model wrote it, or 404 (unknown and other tenants' look the same). A
 * plain GetItem of the attributes that never change after creation: it takes part in no transaction,
 * so it never contends with the scheduler's claims on the row. Unloaded models answer too: their
 * checkpoints and metadata outlive them.
 */
export async function requireModel(
  modelId: string,
  tenant: string,
  doc: DynamoDBDocumentClient = awsClients().doc,
): Promise<ModelSummary> {
  const answer = await doc.send(
    new GetCommand({
      TableName: config().table('models'),
      Key: { model_id: modelId },
      ProjectionExpression: 'model_id, tenant, base_model, lora_config',
    }),
  );
  const row = answer.Item as ModelSummary | undefined;
  if (row === undefined || row.tenant !== tenant) throw modelNotFound(modelId);
  return row;
}

/** The model rows of `modelIds`, read strongly (R5): one BatchGetItem per 100 models. */
export async function readModels(
  doc: DynamoDBDocumentClient,
  table: string,
  modelIds: Iterable<string>,
): Promise<Map<string, ModelRow>> {
  const items = await batchGetByKey(doc, modelIds, { table, keyName: 'model_id', consistent: true });
  return items as unknown as Map<string, ModelRow>;
}
