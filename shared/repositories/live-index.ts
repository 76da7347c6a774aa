import { type DynamoDBDocumentClient, QueryCommand } from '@aws-sdk/lib-dynamodb';
import { Limiter } from '../aws/limiter.js';
import { liveKey, liveKeyPrefix } from '../base/ids.js';
import { LIVE_BY_MODEL_INDEX, LIVE_INDEX, LIVE_PROJECTION } from '../base/topology.js';
import type { FutureStatus, LiveRow, RequestType } from '../domain/records.js';

/** The index's key plus what it projects (R6): the tick asks for these and nothing else. */
const ATTRIBUTES = ['request_id', ...LIVE_PROJECTION] as const;

export interface LiveIndexScan {
  readonly rows: LiveRow[];
  /** Query calls made (pages over all shards). */
  readonly pages: number;
}

/**
 * One scan of GSI `live` for a pool: every shard `<pool>#<0..shards-1>`, each paged through
 * LastEvaluatedKey (a page stops at 1 MB). Shards are read in parallel. Eventually consistent, like
 * every GSI read: it may miss rows that were just written (R5 copes with that).
 */
export async function scanLiveIndex(
  doc: DynamoDBDocumentClient,
  table: string,
  pool: string,
  shards: number,
): Promise<LiveIndexScan> {
  const perShard = await Promise.all(
    Array.from({ length: shards }, (_, shard) => queryShard(doc, table, liveKey(pool, shard))),
  );
  return {
    rows: perShard.flatMap((shard) => shard.rows),
    pages: perShard.reduce((sum, shard) => sum + shard.pages, 0),
  };
}

/** Model partitions of `live_by_model` queried at once by one incremental read. */
const MODEL_QUERY_CONCURRENCY = 8;

/**
 * The pending rows of the named models in a pool, through GSI `live_by_model` (R5's incremental
 * read): one paged query per model, whatever else is pending. Base-model samples are read by naming
 * their `base:<model>` id. Eventually consistent like `scanLiveIndex`, and projecting the same fields.
 */
export async function queryLiveOfModels(
  doc: DynamoDBDocumentClient,
  table: string,
  pool: string,
  modelIds: Iterable<string>,
): Promise<LiveIndexScan> {
  const limiter = new Limiter(MODEL_QUERY_CONCURRENCY);
  const perModel = await Promise.all(
    [...new Set(modelIds)].map((modelId) =>
      limiter.run(() =>
        queryPages(doc, {
          TableName: table,
          IndexName: LIVE_BY_MODEL_INDEX,
          KeyConditionExpression: '#model = :model AND begins_with(#live, :pool)',
          names: { '#model': 'model_id', '#live': 'live' },
          values: { ':model': modelId, ':pool': liveKeyPrefix(pool) },
        }),
      ),
    ),
  );
  return {
    rows: perModel.flatMap((model) => model.rows),
    pages: perModel.reduce((sum, model) => sum + model.pages, 0),
  };
}

function queryShard(doc: DynamoDBDocumentClient, table: string, key: string): Promise<LiveIndexScan> {
  return queryPages(doc, {
    TableName: table,
    IndexName: LIVE_INDEX,
    KeyConditionExpression: '#live = :key',
    names: { '#live': 'live' },
    values: { ':key': key },
  });
}

interface IndexQuery {
  readonly TableName: string;
  readonly IndexName: string;
  readonly KeyConditionExpression: string;
  readonly names: Record<string, string>;
  readonly values: Record<string, string>;
}

/** Every page of one index partition, asking for the projected fields only (R6). */
async function queryPages(doc: DynamoDBDocumentClient, query: IndexQuery): Promise<LiveIndexScan> {
  const rows: LiveRow[] = [];
  let pages = 0;
  let start: Record<string, unknown> | undefined;
  do {
    const page = await doc.send(
      new QueryCommand({
        TableName: query.TableName,
        IndexName: query.IndexName,
        KeyConditionExpression: query.KeyConditionExpression,
        ProjectionExpression: ATTRIBUTES.map((_, index) => `#p${index}`).join(', '),
        ExpressionAttributeNames: {
          ...query.names,
          ...Object.fromEntries(ATTRIBUTES.map((name, index) => [`#p${index}`, name])),
        },
        ExpressionAttributeValues: query.values,
        ExclusiveStartKey: start,
      }),
    );
    pages++;
    for (const item of page.Items ?? []) {
      const row = toLiveRow(item);
      if (row !== undefined) rows.push(row);
    }
    start = page.LastEvaluatedKey;
  } while (start !== undefined);
  return { rows, pages };
}

/** Keeps exactly the projected fields; an entry without its ids is not a row the planner can use. */
function toLiveRow(item: Record<string, unknown>): LiveRow | undefined {
  const { request_id, model_id, tenant, seq, request_type, checkpoint_id, status, tokens } = item;
  if (typeof request_id !== 'string' || typeof model_id !== 'string') return undefined;
  if (typeof request_type !== 'string' || typeof status !== 'string') return undefined;
  return {
    request_id,
    model_id,
    request_type: request_type as RequestType,
    status: status as FutureStatus,
    ...(typeof tenant === 'string' ? { tenant } : {}),
    ...(typeof seq === 'number' ? { seq } : {}),
    ...(typeof checkpoint_id === 'string' ? { checkpoint_id } : {}),
    ...(typeof tokens === 'number' ? { tokens } : {}),
  };
}
