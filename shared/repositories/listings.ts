import { type DynamoDBDocumentClient, QueryCommand } from '@aws-sdk/lib-dynamodb';
import { batchGetByKey } from '../aws/batch-get.js';
import { getItem } from '../aws/get-item.js';
import { Limiter } from '../aws/limiter.js';
import { BY_OWNER_INDEX, BY_PARENT_INDEX, BY_TENANT_INDEX } from '../base/topology.js';
import { isLiveCheckpoint } from '../domain/checkpoint-life.js';
import { ownerKey, parentKey } from '../domain/listing-keys.js';
import {
  type CheckpointRow,
  type LatestCheckpoints,
  latestOfEachKind,
  type RunFacts,
} from '../domain/listing-views.js';
import { type CheckpointKind, type ModelRow, registryKey, registryPrefix } from '../domain/records.js';
import type { Tables } from './tables.js';

/**
 * The listing reads (C1, docs/design.md#c1): Queries of the registry's `by_owner` and `by_parent`
 * indexes and of the models table's `by_tenant`, and reads by key of the rows a page names. Never a
 * Scan. Index reads are eventually consistent (GSIs offer nothing else): a commit may show up in a
 * listing a moment after its future completes.
 */

type Item = Record<string, unknown>;

/** One partition of an index a listing reads: the index, its partition key's name and the key. */
interface IndexPartition {
  readonly index: string;
  readonly keyName: string;
  readonly key: string;
}

const byOwner = (key: string): IndexPartition => ({ index: BY_OWNER_INDEX, keyName: 'owner_key', key });
const byParent = (key: string): IndexPartition => ({ index: BY_PARENT_INDEX, keyName: 'parent_key', key });
const byTenant = (key: string): IndexPartition => ({ index: BY_TENANT_INDEX, keyName: 'tenant', key });

interface QueryOptions {
  /** Sort order: newest first unless asked otherwise. */
  readonly oldestFirst?: boolean;
  /** Items a call may read; the query goes on until `enough` says so or the partition ends. */
  readonly pageSize?: number;
  readonly enough?: (items: readonly Item[]) => boolean;
}

/** Every item of one index partition in sort order, page by page (1 MB or `pageSize` each). */
async function queryPartition(
  doc: DynamoDBDocumentClient,
  table: string,
  partition: IndexPartition,
  options: QueryOptions = {},
): Promise<Item[]> {
  const items: Item[] = [];
  let start: Item | undefined;
  do {
    const page = await doc.send(
      new QueryCommand({
        TableName: table,
        IndexName: partition.index,
        KeyConditionExpression: '#p = :p',
        ExpressionAttributeNames: { '#p': partition.keyName },
        ExpressionAttributeValues: { ':p': partition.key },
        ScanIndexForward: options.oldestFirst === true,
        ExclusiveStartKey: start,
        ...(options.pageSize === undefined ? {} : { Limit: options.pageSize }),
      }),
    );
    items.push(...(page.Items ?? []));
    start = page.LastEvaluatedKey;
  } while (start !== undefined && !(options.enough?.(items) ?? false));
  return items;
}

const KINDS: ReadonlySet<string> = new Set<CheckpointKind>(['weights', 'sampler']);

/** A projected checkpoint item as a row, when it is one and is live (C5: expired ones never show). */
function liveCheckpointRow(item: Item, now: number): CheckpointRow | undefined {
  const { model_id, kind, name, created_at, status, expires_at, size_bytes } = item;
  if (typeof model_id !== 'string' || typeof name !== 'string' || typeof created_at !== 'number') {
    return undefined;
  }
  if (typeof kind !== 'string' || !KINDS.has(kind) || typeof status !== 'string') return undefined;
  const expiresAt = typeof expires_at === 'number' ? expires_at : undefined;
  if (
    !isLiveCheckpoint(
      { status: status as 'committed', ...(expiresAt === undefined ? {} : { expires_at: expiresAt }) },
      now,
    )
  ) {
    return undefined;
  }
  return {
    model_id,
    kind: kind as CheckpointKind,
    name,
    created_at,
    ...(expiresAt === undefined ? {} : { expires_at: expiresAt }),
    ...(item.public === true ? { public: true } : {}),
    ...(typeof size_bytes === 'number' ? { size_bytes } : {}),
  };
}

function liveRows(items: readonly Item[], now: number): CheckpointRow[] {
  return items.flatMap((item) => liveCheckpointRow(item, now) ?? []);
}

/**
 * The rows with each one's `user_metadata`, read by key from the name records (BatchGetItem, 100
 * rows a call, eventually consistent): the listing indexes leave metadata out (up to 16 KB a
 * record), so only the rows a page answers are read for it.
 */
export async function withCheckpointMetadata(
  doc: DynamoDBDocumentClient,
  registry: string,
  rows: readonly CheckpointRow[],
): Promise<CheckpointRow[]> {
  if (rows.length === 0) return [];
  const pkOf = (row: CheckpointRow) => registryKey.checkpointName(row.model_id, row.kind, row.name);
  const records = await batchGetByKey(doc, rows.map(pkOf), {
    table: registry,
    keyName: 'pk',
    consistent: false,
    attributes: ['pk', 'user_metadata'],
  });
  return rows.map((row) => {
    const metadata = records.get(pkOf(row))?.user_metadata;
    return typeof metadata === 'object' && metadata !== null
      ? { ...row, user_metadata: metadata as Readonly<Record<string, string>> }
      : row;
  });
}

/** The tenant's live checkpoints, newest first: its whole `ckpt#<tenant>` partition of `by_owner`. */
export async function listTenantCheckpoints(
  doc: DynamoDBDocumentClient,
  registry: string,
  tenant: string,
  now: number,
): Promise<CheckpointRow[]> {
  const items = await queryPartition(doc, registry, byOwner(ownerKey.checkpoints(tenant)));
  return liveRows(items, now);
}

/** The run's live checkpoints, newest first, with their metadata: its `run#<model_id>` partition of `by_parent`. */
export async function listRunCheckpoints(
  doc: DynamoDBDocumentClient,
  registry: string,
  modelId: string,
  now: number,
): Promise<CheckpointRow[]> {
  const items = await queryPartition(doc, registry, byParent(parentKey.run(modelId)));
  return withCheckpointMetadata(doc, registry, liveRows(items, now));
}

/** Index items a call reads when looking for a run's newest checkpoints: most runs need one call. */
const LATEST_PAGE = 25;

/**
 * The run's newest live training and sampler checkpoints (only published ones when `publicOnly`):
 * `run#<model_id>` newest first, page by page, until both kinds are found or the run has no more.
 */
export async function latestRunCheckpoints(
  doc: DynamoDBDocumentClient,
  registry: string,
  modelId: string,
  now: number,
  publicOnly = false,
): Promise<LatestCheckpoints> {
  const keep = (items: readonly Item[]) =>
    liveRows(items, now).filter((row) => !publicOnly || row.public === true);
  const items = await queryPartition(doc, registry, byParent(parentKey.run(modelId)), {
    pageSize: LATEST_PAGE,
    enough: (read) => {
      const latest = latestOfEachKind(keep(read));
      return latest.weights !== undefined && latest.sampler !== undefined;
    },
  });
  const { weights, sampler } = latestOfEachKind(keep(items));
  const newest = [weights, sampler].filter((row) => row !== undefined);
  return latestOfEachKind(await withCheckpointMetadata(doc, registry, newest));
}

/** Whether any live checkpoint of the run is published (C4): what makes another tenant's run readable. */
export async function runHasPublishedCheckpoint(
  doc: DynamoDBDocumentClient,
  registry: string,
  modelId: string,
  now: number,
): Promise<boolean> {
  const items = await queryPartition(doc, registry, byParent(parentKey.run(modelId)), {
    enough: (read) => liveRows(read, now).some((row) => row.public === true),
  });
  return liveRows(items, now).some((row) => row.public === true);
}

/** Runs checked at once by `runsWithPublishedCheckpoint`. */
const RUN_CHECKS_AT_ONCE = 8;

/**
 * The runs of `modelIds` that have a live published checkpoint now, in the order given: the test
 * `runHasPublishedCheckpoint` makes for one run, made for each. A `public` marker outlives its
 * checkpoint's expiry until the sweeper collects it (C5), so a marker alone grants nothing.
 */
export async function runsWithPublishedCheckpoint(
  doc: DynamoDBDocumentClient,
  registry: string,
  modelIds: readonly string[],
  now: number,
): Promise<string[]> {
  const limiter = new Limiter(RUN_CHECKS_AT_ONCE);
  const published = await Promise.all(
    modelIds.map((id) => limiter.run(() => runHasPublishedCheckpoint(doc, registry, id, now))),
  );
  return modelIds.filter((_, index) => published[index] === true);
}

/** The tenant's training run ids, newest first: its `by_tenant` partition (keys only). */
export async function listTenantRunIds(
  doc: DynamoDBDocumentClient,
  models: string,
  tenant: string,
): Promise<string[]> {
  const items = await queryPartition(doc, models, byTenant(tenant));
  return items.flatMap((item) => (typeof item.model_id === 'string' ? [item.model_id] : []));
}

/**
 * The runs of every published-checkpoint marker (`public` partition of `by_owner`, written by the
 * lifecycle, C4), newest publication first, each once.
 */
export async function listPublishedRunIds(doc: DynamoDBDocumentClient, registry: string): Promise<string[]> {
  const items = await queryPartition(doc, registry, byOwner(ownerKey.published));
  const ids = items.flatMap((item) => (typeof item.model_id === 'string' ? [item.model_id] : []));
  return [...new Set(ids)];
}

/** What a TrainingRun needs of the model row: fixed at create_model. */
const RUN_ATTRIBUTES = ['model_id', 'tenant', 'base_model', 'lora_config', 'created_at', 'user_metadata'];

type RunRow = Pick<
  ModelRow,
  'model_id' | 'tenant' | 'base_model' | 'lora_config' | 'created_at' | 'user_metadata'
>;

function runFacts(row: RunRow, lastRequestAt: unknown): RunFacts {
  return {
    model_id: row.model_id,
    tenant: row.tenant,
    base_model: row.base_model,
    lora_rank: row.lora_config.rank,
    created_at: row.created_at,
    ...(typeof lastRequestAt === 'number' ? { last_request_at: lastRequestAt } : {}),
    ...(row.user_metadata === undefined ? {} : { user_metadata: row.user_metadata }),
  };
}

/**
 * The runs of `modelIds` that exist, in the order given: their model rows and seq counters (last
 * request time), read by key in batches, eventually consistent (a listing, not a decision).
 */
export async function readRuns(
  doc: DynamoDBDocumentClient,
  tables: Tables<'models' | 'registry'>,
  modelIds: readonly string[],
): Promise<RunFacts[]> {
  if (modelIds.length === 0) return [];
  const [rows, counters] = await Promise.all([
    batchGetByKey(doc, modelIds, {
      table: tables.models,
      keyName: 'model_id',
      consistent: false,
      attributes: RUN_ATTRIBUTES,
    }),
    batchGetByKey(
      doc,
      modelIds.map((id) => registryKey.seqCounter(id)),
      { table: tables.registry, keyName: 'pk', consistent: false, attributes: ['pk', 'updated_at'] },
    ),
  ]);
  return modelIds.flatMap((id) => {
    const row = rows.get(id) as RunRow | undefined;
    if (row === undefined) return [];
    return [runFacts(row, counters.get(registryKey.seqCounter(id))?.updated_at)];
  });
}

/** One run by id, or undefined when it does not exist. */
export async function readRun(
  doc: DynamoDBDocumentClient,
  tables: Tables<'models' | 'registry'>,
  modelId: string,
): Promise<RunFacts | undefined> {
  const [row, counter] = await Promise.all([
    getItem<RunRow>(doc, tables.models, { model_id: modelId }, false, RUN_ATTRIBUTES),
    getItem<{ updated_at?: number }>(doc, tables.registry, { pk: registryKey.seqCounter(modelId) }, false, [
      'updated_at',
    ]),
  ]);
  return row === undefined ? undefined : runFacts(row, counter?.updated_at);
}

/** The tenant's session ids, newest first: its `session#<tenant>` partition of `by_owner`. */
export async function listTenantSessionIds(
  doc: DynamoDBDocumentClient,
  registry: string,
  tenant: string,
): Promise<string[]> {
  const items = await queryPartition(doc, registry, byOwner(ownerKey.sessions(tenant)));
  return items.flatMap((item) => (typeof item.session_id === 'string' ? [item.session_id] : []));
}

/** A session's training runs and sampling sessions, oldest first: its partition of `by_parent`. */
export async function sessionMembers(
  doc: DynamoDBDocumentClient,
  registry: string,
  sessionId: string,
): Promise<{ training_run_ids: string[]; sampler_ids: string[] }> {
  const items = await queryPartition(doc, registry, byParent(parentKey.session(sessionId)), {
    oldestFirst: true,
  });
  const training_run_ids: string[] = [];
  const sampler_ids: string[] = [];
  for (const item of items) {
    const pk = item.pk;
    if (typeof pk !== 'string') continue;
    if (pk.startsWith(registryPrefix.seqCounter) && typeof item.model_id === 'string') {
      training_run_ids.push(item.model_id);
    } else if (
      pk.startsWith(registryPrefix.samplingSession) &&
      typeof item.sampling_session_id === 'string'
    ) {
      sampler_ids.push(item.sampling_session_id);
    }
  }
  return { training_run_ids, sampler_ids };
}
