import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { mintRequestId } from '../../shared/base/ids.js';
import type { ModelRow, RequestType } from '../../shared/domain/records.js';
import { pendingFutureRow } from '../../shared/repositories/futures.js';
import type { TestCloud } from './cloud.js';

/** Rows for the operator view's tests, written straight to a test cloud (after `applyEnv()`). */

export async function putModel(
  cloud: TestCloud,
  modelId: string,
  fields: Partial<ModelRow> = {},
): Promise<ModelRow> {
  const row: ModelRow = {
    model_id: modelId,
    tenant: 'acme',
    session_id: 'sess-ops',
    base_model: 'tiny',
    lora_config: { rank: 4 },
    status: 'active',
    epoch: 1,
    planned_through: 0,
    applied_through: 0,
    attempts: 0,
    created_at: Date.now(),
    ...fields,
  };
  await cloud.clients.doc.send(new PutCommand({ TableName: cloud.names.tables.models, Item: row }));
  return row;
}

/** A pending future in the `live` index, submitted at `submittedAt` (its request id carries the time). */
export async function putPending(
  cloud: TestCloud,
  modelId: string,
  requestType: RequestType,
  seq: number | undefined,
  submittedAt: number,
): Promise<string> {
  const requestId = mintRequestId(submittedAt);
  const row = pendingFutureRow({
    requestId,
    tenant: 'acme',
    modelId,
    ...(seq === undefined ? {} : { seq }),
    requestType,
    tokens: 8,
    payloadKey: `payloads/${requestId}.json`,
    payloadDigest: 'digest',
    now: submittedAt,
  });
  await cloud.clients.doc.send(new PutCommand({ TableName: cloud.names.tables.futures, Item: row }));
  return requestId;
}
