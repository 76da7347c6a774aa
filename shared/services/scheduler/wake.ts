import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import type { DynamoDBRecord } from 'aws-lambda';

/**
 * What a tick reads (R5): the whole pool's `live` index, or only the pending rows of the models its
 * trigger names, through `live_by_model`. A base-model pool key (`base:<model>`) is a model here
 * like any other: naming it reads that base model's pending samples.
 */
export type WakeScope =
  | { readonly kind: 'all' }
  | { readonly kind: 'models'; readonly modelIds: ReadonlySet<string> };

export const WAKE_ALL: WakeScope = { kind: 'all' };

/**
 * Above this many named models a tick takes the full look instead: one query per model costs more
 * calls than the pool's few index shards once a batch names this many (a stream batch holds at most
 * 100 records, so only a burst across many models gets here).
 */
export const MAX_WOKEN_MODELS = 64;

export function wakeModels(modelIds: Iterable<string>): WakeScope {
  const ids = new Set(modelIds);
  return ids.size === 0 || ids.size > MAX_WOKEN_MODELS ? WAKE_ALL : { kind: 'models', modelIds: ids };
}

/**
 * The models a stream batch names, pure: a futures record's new image `model_id` (a pending row,
 * or a sample put back to pending), a models record's key `model_id` (a commit or re-plan that
 * cleared `inflight`). Anything else (the registry's drain record, a record without those fields,
 * an empty batch) names no model, and the tick takes the full look, as the schedule's does.
 */
export function wokenBy(records: readonly DynamoDBRecord[]): WakeScope {
  const ids = new Set<string>();
  for (const record of records) {
    const modelId = modelOf(record);
    if (modelId === undefined) return WAKE_ALL;
    ids.add(modelId);
  }
  return wakeModels(ids);
}

function modelOf(record: DynamoDBRecord): string | undefined {
  const keys = record.dynamodb?.Keys;
  if (keys === undefined) return undefined;
  if (keys.request_id !== undefined) {
    const image = record.dynamodb?.NewImage;
    if (image === undefined) return undefined;
    const modelId = unmarshall(image as Record<string, AttributeValue>).model_id;
    return typeof modelId === 'string' && modelId !== '' ? modelId : undefined;
  }
  const modelId = keys.model_id?.S;
  return modelId !== undefined && modelId !== '' && Object.keys(keys).length === 1 ? modelId : undefined;
}
