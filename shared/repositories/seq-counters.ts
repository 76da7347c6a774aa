import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { TransactItem } from '../aws/transact.js';
import { NotFoundError } from '../base/errors.js';
import { registryKey, type SeqCounterRecord } from '../domain/records.js';
import { requireOwnItem } from './registry.js';

export function modelNotFound(modelId: string, why = 'not found'): NotFoundError {
  return new NotFoundError(`model ${modelId} ${why}`, { context: { field: 'model_id' } });
}

/**
 * The model's seq counter item, read strongly: what intake knows about a model (tenant, base model,
 * last seq, last client seq_id, unloaded). 404 when unknown or another tenant's.
 */
export function requireSeqCounter(
  doc: DynamoDBDocumentClient,
  table: string,
  modelId: string,
  tenant: string,
): Promise<SeqCounterRecord> {
  return requireOwnItem(doc, table, registryKey.seqCounter(modelId), tenant, () => modelNotFound(modelId));
}

/** A new run's counter at `seq`, before any client seq_id of its own. */
export function newSeqCounter(
  run: {
    readonly modelId: string;
    readonly tenant: string;
    readonly sessionId: string;
    readonly baseModel: string;
    readonly now: number;
  },
  seq: number,
): SeqCounterRecord {
  return {
    pk: registryKey.seqCounter(run.modelId),
    model_id: run.modelId,
    tenant: run.tenant,
    session_id: run.sessionId,
    base_model: run.baseModel,
    seq,
    last_seq_id: 0,
    updated_at: run.now,
  };
}

interface CounterStep {
  readonly modelId: string;
  readonly tenant: string;
  /** The seq the submit takes. */
  readonly seq: number;
  readonly now: number;
}

/**
 * A training submit takes the next seq (R1), as a transaction item: only from the counter it read,
 * for a client seq_id above the last one, of its tenant's model, while the model is not unloaded.
 */
export function seqCounterAdvanceItem(
  table: string,
  counter: Pick<SeqCounterRecord, 'seq'>,
  step: CounterStep & { readonly seqId: number },
): TransactItem {
  return {
    Update: {
      TableName: table,
      Key: { pk: registryKey.seqCounter(step.modelId) },
      UpdateExpression: 'SET #seq = :next, last_seq_id = :seq_id, updated_at = :now',
      ConditionExpression:
        '#seq = :prev AND last_seq_id < :seq_id AND tenant = :tenant AND attribute_not_exists(unloaded)',
      ExpressionAttributeNames: { '#seq': 'seq' },
      ExpressionAttributeValues: {
        ':next': step.seq,
        ':prev': counter.seq,
        ':seq_id': step.seqId,
        ':tenant': step.tenant,
        ':now': step.now,
      },
    },
  };
}

/** unload_model takes the last seq and marks the counter unloaded, once. */
export function seqCounterUnloadItem(
  table: string,
  counter: Pick<SeqCounterRecord, 'seq'>,
  step: CounterStep,
): TransactItem {
  return {
    Update: {
      TableName: table,
      Key: { pk: registryKey.seqCounter(step.modelId) },
      UpdateExpression: 'SET #seq = :next, unloaded = :true, updated_at = :now',
      ConditionExpression: '#seq = :prev AND tenant = :tenant AND attribute_not_exists(unloaded)',
      ExpressionAttributeNames: { '#seq': 'seq' },
      ExpressionAttributeValues: {
        ':next': step.seq,
        ':prev': counter.seq,
        ':tenant': step.tenant,
        ':true': true,
        ':now': step.now,
      },
    },
  };
}
