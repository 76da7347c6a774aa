/**
 * The one declaration of what the system is made of: tables, the `live` index, streams, the bucket,
 * the queues, the functions, their triggers and exactly what each function may touch.
 *
 * The CDK stack (`cdk/`) builds from this object and the local cloud and runtime (`local/`) read it,
 * so the deployed system and the one that runs on a laptop cannot drift apart. Pure data: no AWS
 * construct and no SDK client is imported here.
 */

import { registryPrefix as key, registryKey } from './registry-keys.js';

export type AttributeType = 'S' | 'N' | 'B';

export interface KeyAttribute {
  readonly name: string;
  readonly type: AttributeType;
}

export type Projection =
  | { readonly type: 'KEYS_ONLY' }
  | { readonly type: 'ALL' }
  | { readonly type: 'INCLUDE'; readonly nonKeyAttributes: readonly string[] };

export interface IndexDecl {
  readonly name: string;
  readonly partitionKey: KeyAttribute;
  readonly sortKey?: KeyAttribute;
  readonly projection: Projection;
}

export type StreamView = 'NEW_IMAGE' | 'OLD_IMAGE' | 'NEW_AND_OLD_IMAGES' | 'KEYS_ONLY';

export interface TableDecl {
  /** Base name; the physical name is `<prefix>-<name>` (see `physicalName`). */
  readonly name: string;
  /** Environment variable that carries the physical name to the functions granted this table. */
  readonly envVar: string;
  readonly partitionKey: KeyAttribute;
  readonly sortKey?: KeyAttribute;
  readonly timeToLiveAttribute?: string;
  readonly stream?: StreamView;
  readonly indexes: readonly IndexDecl[];
}

export interface BucketDecl {
  readonly name: string;
  readonly envVar: string;
}

export interface QueueDecl {
  readonly name: string;
  readonly envVar?: string;
  readonly visibilityTimeoutSeconds: number;
  readonly retentionSeconds: number;
  readonly deadLetter?: { readonly queue: QueueId; readonly maxReceiveCount: number };
}

/**
 * A DynamoDB Streams event filter pattern (the Lambda event-filtering JSON grammar). The local
 * runtime evaluates the same patterns, for the subset used here: value lists and `{exists: bool}`.
 */
export type FilterPattern = { readonly [key: string]: FilterPattern | readonly FilterValue[] };
export type FilterValue = string | number | { readonly exists: boolean };

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'HEAD' | 'OPTIONS';

/**
 * A route of its own in front of an `http` trigger's catch-all base path: the same function answers
 * it, but it has its own route key (so its own metrics and access-log lines) and may have its own
 * throttle. It must lie under the trigger's base path, which is all the local runtime routes by.
 */
export interface HttpRouteDecl {
  readonly method: HttpMethod;
  /** API Gateway path syntax, e.g. `/status/{asset}`. */
  readonly path: string;
  /** Steady requests per second and burst for this route (API Gateway stage route settings). */
  readonly throttle?: { readonly ratePerSecond: number; readonly burst: number };
}

export type Trigger =
  | { readonly kind: 'http'; readonly basePath: string; readonly routes?: readonly HttpRouteDecl[] }
  | {
      readonly kind: 'stream';
      readonly table: TableId;
      readonly batchSize: number;
      readonly maxBatchingWindowSeconds: number;
      readonly startingPosition: 'LATEST' | 'TRIM_HORIZON';
      readonly retryAttempts: number;
      /** On a handler error, split the batch and retry the halves, isolating a bad record. */
      readonly bisectBatchOnError: boolean;
      /**
       * Batches of one shard delivered concurrently (Lambda's ParallelizationFactor, 1-10; default 1),
       * records of one key still in order: a record then need not wait behind a running invocation.
       */
      readonly parallelizationFactor?: number;
      readonly reportBatchItemFailures: true;
      readonly filters: readonly FilterPattern[];
      /**
       * Where the mapping reports a batch it gives up on after its retries: the shard and sequence
       * range to inspect, not the records (read them from the stream within its 24 hours).
       */
      readonly onFailure: QueueId;
    }
  | {
      readonly kind: 'queue';
      readonly queue: QueueId;
      readonly batchSize: number;
      readonly maxBatchingWindowSeconds: number;
      /** Bounds the worker through the event source mapping, not reserved concurrency (E7). */
      readonly maxConcurrency: number;
      readonly reportBatchItemFailures: true;
    }
  | { readonly kind: 'schedule'; readonly rateMinutes: number };

/**
 * One DynamoDB operation each, so a grant lists exactly what a function sends. A TransactWriteItems
 * is authorised item by item (its puts, updates, deletes and condition checks as `put`, `update`,
 * `delete`, `condition-check`), a TransactGetItems as `get`. `query` is a Query of the table itself
 * and never reaches an index; `query-index`, a Query of one of its declared indexes; `scan`, a Scan
 * of the whole table. Their IAM actions are in `shared/base/grants.ts`.
 */
export type TableAction =
  | 'get'
  | 'batch-get'
  | 'query'
  | 'put'
  | 'update'
  | 'delete'
  | 'batch-write'
  | 'condition-check'
  | 'query-index'
  | 'scan';

/** Actions a key condition can limit: each names the partition keys of the items it touches. */
export type KeyedTableAction = Exclude<TableAction, 'query-index' | 'scan'>;

/**
 * Actions on only the items whose partition key starts with one of `keyPrefixes`: one IAM statement
 * conditioned on `dynamodb:LeadingKeys` (`ForAllValues:StringLike` on `<prefix>*`, every key of a
 * batch must match). A Scan or an index Query names no partition key of the table, so neither can
 * be limited this way.
 */
export interface KeyedTableGrant {
  readonly keyPrefixes: readonly string[];
  readonly actions: readonly KeyedTableAction[];
}

/** A bare action is on every item of the table; a `KeyedTableGrant` on the items of its prefixes. */
export type TableGrant = TableAction | KeyedTableGrant;

export type BucketAction = 'get' | 'put' | 'delete' | 'list';
/** `depth`: read the queue's message counts (GetQueueAttributes) and nothing else. */
export type QueueAction = 'send' | 'consume' | 'depth';

export interface FunctionGrants {
  readonly tables: Partial<Record<TableId, readonly TableGrant[]>>;
  /** Object actions per key prefix (see `shared/base/storage-keys.ts`); `list` applies to the bucket. */
  readonly bucket: readonly { readonly prefix: string; readonly actions: readonly BucketAction[] }[];
  readonly queues: Partial<Record<QueueId, readonly QueueAction[]>>;
}

export interface FunctionDecl {
  /** Handler module, relative to the repository root; it exports `handler`. */
  readonly entry: string;
  readonly description: string;
  readonly memoryMb: number;
  readonly timeoutSeconds: number;
  /** Reserved so long polls elsewhere can never starve this function. */
  readonly reservedConcurrency?: number;
  readonly grants: FunctionGrants;
  readonly triggers: readonly Trigger[];
  /**
   * Directories (relative to the repository root) the function reads at run time, copied beside its
   * bundle under their own name: a module reads `new URL('./<name>/...', import.meta.url)` from the
   * source tree and from the bundle alike.
   */
  readonly bundledAssets?: readonly string[];
}

export type TableId = 'futures' | 'models' | 'registry' | 'prefixes';
export type QueueId = 'work' | 'workDlq' | 'streamDlq' | LaneQueueId;
/** A work lane: the queue of the worker process holding the lane (S2), one per lane of `WORK_LANES`. */
export type LaneQueueId = `lane${0 | 1 | 2 | 3 | 4 | 5 | 6 | 7}`;
export type FunctionId = 'api' | 'scheduler' | 'worker' | 'sweeper';

export interface Topology {
  /** Settings every function receives as environment variables (see `shared/base/config.ts`). */
  readonly settings: Readonly<Record<string, string>>;
  readonly tables: Readonly<Record<TableId, TableDecl>>;
  readonly bucket: BucketDecl;
  readonly queues: Readonly<Record<QueueId, QueueDecl>>;
  readonly functions: Readonly<Record<FunctionId, FunctionDecl>>;
}

/** Name of the sparse index the scheduler reads: ids and model/checkpoint keys, nothing else (R6). */
export const LIVE_INDEX = 'live';

/** Attributes the `live` index projects besides its keys. Planning needs these and only these. */
export const LIVE_PROJECTION = [
  'model_id',
  // Fairness across tenants (shared/domain/planning/planner.ts): a sample's tenant is on no row a tick reads.
  'tenant',
  'seq',
  'request_type',
  'checkpoint_id',
  'status',
  'tokens',
] as const;

/**
 * The registry's listing indexes (C1), both sparse: only records that carry the partition attribute
 * are in them. `by_owner` holds a tenant's committed checkpoints (`ckpt#<tenant>`) and sessions
 * (`session#<tenant>`), the published-checkpoint markers (`public`) and the collections due (`gc`,
 * by due time: the sweeper's one Query); `by_parent` a run's
 * checkpoints (`run#<model_id>`) and a session's training runs and sampling sessions
 * (`session#<session_id>`). Keys are built in shared/domain/listing-keys.ts.
 */
export const BY_OWNER_INDEX = 'by_owner';
export const BY_PARENT_INDEX = 'by_parent';
/** The models table's index of a tenant's training runs, newest first by `created_at` (C1). */
export const BY_TENANT_INDEX = 'by_tenant';

/**
 * What a listing row needs besides the keys, for both registry indexes: a checkpoint's identity,
 * status, time and lifecycle fields (`expires_at`, `public`, `size_bytes`: C3-C5), a session's or sampling session's
 * id, a training run's model id. Changing a projection rebuilds the index, so the lifecycle's fields
 * are projected from the start.
 */
export const LISTING_PROJECTION = [
  'tenant',
  'status',
  'model_id',
  'kind',
  'name',
  'created_at',
  'session_id',
  'sampling_session_id',
  'expires_at',
  'public',
  'size_bytes',
  // The sweeper's round over the `gc` partition (C3, C5): what is due, and whose content.
  'content_id',
  'due',
] as const;

/**
 * The sparse index an incremental tick reads (R5): a model's pending rows, keyed by `model_id` and
 * sorted by `live`, so only rows that carry `live` (pending ones) are in it and a query names its
 * pool with `begins_with(live, '<pool>#')`. Base-model samples sit under `base:<model>`.
 */
export const LIVE_BY_MODEL_INDEX = 'live_by_model';

/** What `live_by_model` projects: the `live` index's attributes, less `model_id`, its own key. */
export const LIVE_BY_MODEL_PROJECTION = LIVE_PROJECTION.filter((name) => name !== 'model_id');

const WORKER_TIMEOUT_SECONDS = 300;

/**
 * Work lanes (S2 of docs/design.md#s1): one queue per worker process that holds models, so the work
 * of a model whose state a worker holds goes to that worker and no other. A worker process leases a
 * free lane at start (a `lane#` registry record) and polls it beside the shared `work` queue; workers
 * beyond this many get no lane and hold nothing. An idle queue costs nothing.
 */
export const WORK_LANES = 8;

export const LANE_QUEUE_IDS: readonly LaneQueueId[] = Array.from(
  { length: WORK_LANES },
  (_, lane) => `lane${lane}` as LaneQueueId,
);

/** The queue of lane `lane`; throws for a lane the topology does not declare. */
export function laneQueueId(lane: number): LaneQueueId {
  const id = LANE_QUEUE_IDS[lane];
  if (id === undefined) throw new RangeError(`lane ${lane} is not one of the ${WORK_LANES} work lanes`);
  return id;
}

/** The lanes' queue declarations: like `work`'s, and redriven to the same dead-letter queue. */
function laneQueues(): Record<LaneQueueId, QueueDecl> {
  return Object.fromEntries(
    LANE_QUEUE_IDS.map((id, lane) => [
      id,
      {
        name: `work-lane-${lane}`,
        envVar: `WORK_LANE_${lane}_QUEUE_URL`,
        visibilityTimeoutSeconds: WORKER_TIMEOUT_SECONDS * 2,
        retentionSeconds: 4 * 24 * 3600,
        deadLetter: { queue: 'workDlq', maxReceiveCount: 5 },
      } satisfies QueueDecl,
    ]),
  ) as Record<LaneQueueId, QueueDecl>;
}

/** The same actions on every lane's queue. */
function onLanes(actions: readonly QueueAction[]): Partial<Record<LaneQueueId, readonly QueueAction[]>> {
  return Object.fromEntries(LANE_QUEUE_IDS.map((id) => [id, actions]));
}

/** The pool this stack's scheduler serves (the `POOL` setting). */
const POOL = 'default';

/**
 * Batches per shard the scheduler's futures and models mappings run at once. Safe because dispatch is
 * already serialised: an invocation that finds a tick running only looks (reads), asks the holder of
 * the pool's tick lock for one more pass and returns, and overlapping ticks were safe before (E7: the
 * claim condition, not the lock, keeps them apart). It saves a record that lands while a tick runs
 * from waiting for that invocation to end, be read and start a tick of its own. Two per mapping: the
 * futures and models mappings of a one-shard table then run at most four invocations together, the
 * scheduler's reserved concurrency (beyond it Lambda throttles them, and the mapping retries).
 */
const STEP_PATH_STREAM_PARALLELIZATION = 2;

/**
 * The registry a tick touches, the scheduler's and the sweeper's safety tick alike: the tick lock
 * (put, renew, release: shared/services/scheduler/tick-lock.ts), sample claims (read in batches, put, given
 * back: samples.ts) and the pool's drain flag.
 */
const SCHEDULER_REGISTRY: readonly TableGrant[] = [
  { keyPrefixes: [key.tickLock], actions: ['put', 'update', 'delete'] },
  // A claim is an update: an expired one is taken over with its count and cancel mark (R4, E2, W9).
  { keyPrefixes: [key.sampleClaim], actions: ['batch-get', 'update', 'delete'] },
  { keyPrefixes: [key.drain], actions: ['get'] },
];

/** An index keyed by two string attributes that carries `projected` beside its keys. */
function stringKeyedIndex(
  name: string,
  partition: string,
  sort: string,
  projected: readonly string[],
): IndexDecl {
  return {
    name,
    partitionKey: { name: partition, type: 'S' },
    sortKey: { name: sort, type: 'S' },
    projection: { type: 'INCLUDE', nonKeyAttributes: projected },
  };
}

export const topology: Topology = {
  settings: {
    POOL,
    LIVE_SHARDS: '4',
  },
  tables: {
    futures: {
      name: 'futures',
      envVar: 'FUTURES_TABLE',
      partitionKey: { name: 'request_id', type: 'S' },
      timeToLiveAttribute: 'ttl',
      stream: 'NEW_IMAGE',
      indexes: [
        stringKeyedIndex(LIVE_INDEX, 'live', 'request_id', LIVE_PROJECTION),
        stringKeyedIndex(LIVE_BY_MODEL_INDEX, 'model_id', 'live', LIVE_BY_MODEL_PROJECTION),
      ],
    },
    models: {
      name: 'models',
      envVar: 'MODELS_TABLE',
      partitionKey: { name: 'model_id', type: 'S' },
      stream: 'NEW_AND_OLD_IMAGES',
      indexes: [
        {
          // Keys only: a page of runs is then read from the rows by key (shared/repositories/listings.ts).
          name: BY_TENANT_INDEX,
          partitionKey: { name: 'tenant', type: 'S' },
          sortKey: { name: 'created_at', type: 'N' },
          projection: { type: 'KEYS_ONLY' },
        },
      ],
    },
    registry: {
      // Small records keyed by a typed prefix: API keys, sessions, sampling sessions, per-model seq
      // counters, idempotency records and checkpoint names. Kept off the models table so submits
      // never conflict with the scheduler's claims and never wake its stream (E1).
      name: 'registry',
      envVar: 'REGISTRY_TABLE',
      partitionKey: { name: 'pk', type: 'S' },
      timeToLiveAttribute: 'ttl',
      // Keys only, for the scheduler's one trigger on it: an operator lifting the pool's drain.
      stream: 'KEYS_ONLY',
      indexes: [
        stringKeyedIndex(BY_OWNER_INDEX, 'owner_key', 'list_sort', LISTING_PROJECTION),
        stringKeyedIndex(BY_PARENT_INDEX, 'parent_key', 'list_sort', LISTING_PROJECTION),
      ],
    },
    prefixes: {
      name: 'prefixes',
      envVar: 'PREFIXES_TABLE',
      partitionKey: { name: 'pk', type: 'S' },
      timeToLiveAttribute: 'ttl',
      indexes: [],
    },
  },
  bucket: { name: 'data', envVar: 'DATA_BUCKET' },
  queues: {
    work: {
      name: 'work',
      envVar: 'WORK_QUEUE_URL',
      // A message stays invisible for longer than one worker invocation can run.
      visibilityTimeoutSeconds: WORKER_TIMEOUT_SECONDS * 2,
      retentionSeconds: 4 * 24 * 3600,
      deadLetter: { queue: 'workDlq', maxReceiveCount: 5 },
    },
    workDlq: {
      name: 'work-dlq',
      // Read by the status page (its depth) only: nothing sends to it but the work queue's redrive.
      envVar: 'WORK_DLQ_URL',
      visibilityTimeoutSeconds: 30,
      retentionSeconds: 14 * 24 * 3600,
    },
    streamDlq: {
      // Failure records of the scheduler's stream mappings: a batch dropped after its retries. The
      // sweeper's safety tick still plans what it would have woken, but a record here means the
      // scheduler keeps failing on some input (alarm `stream-dlq-not-empty`).
      name: 'stream-dlq',
      envVar: 'STREAM_DLQ_URL',
      visibilityTimeoutSeconds: 30,
      retentionSeconds: 14 * 24 * 3600,
    },
    ...laneQueues(),
  },
  functions: {
    api: {
      entry: 'functions/api/handler.ts',
      description: 'Tinker-compatible HTTP API: intake of futures, sessions, retrieve_future; status page',
      memoryMb: 1024,
      timeoutSeconds: 29,
      // Caps the api too: long polls hold an invocation up to 25 s, and without a cap a flood of them
      // takes the account's whole concurrency from the worker and the scheduler. Deploy-time
      // `-c apiReservedConcurrency=N` (shared/base/config.ts DEPLOY_LIMIT_DEFAULTS).
      reservedConcurrency: 500,
      grants: {
        // Exactly what it sends: intake puts rows and records in one transaction (put, and the seq
        // counter's update), reads them back by key, and never deletes or batch-writes anything.
        tables: {
          // query-index: the status page's data reads the live index as a tick does (operator keys only).
          // update: cancel_future ends a queued sample (W9), in one transaction with its log entry.
          // batch-get: re-reads of many waiting polls merged where one process serves them (local).
          futures: ['get', 'batch-get', 'put', 'update', 'query-index'],
          // batch-get: the status page reads the models the live index names, and a page of training
          // runs its rows. query-index: the runs of a tenant (by_tenant, C1).
          models: ['get', 'batch-get', 'put', 'query-index'],
          registry: [
            // Keys are looked up by their hash, never written: the operator CLI mints and revokes them.
            // The pool controls are read for the status page; the CLI sets them.
            {
              keyPrefixes: [key.apiKey, key.operatorKey, key.drain, key.cutRequest],
              actions: ['get'],
            },
            // Written once at intake (names reserved as pending, E4), read by a retry or a lookup.
            { keyPrefixes: [key.samplingSession, key.idempotency], actions: ['get', 'put'] },
            // A sample's sequence ids (W8): put with its future, read by the spans that name them.
            { keyPrefixes: [key.sampleSequences], actions: ['put', 'batch-get'] },
            // Checkpoint names: reserved (put), replaced by an overwrite (put), and the owner's
            // delete, publish, TTL and a legacy archive's key (update, delete) (C2-C5); with them the
            // content's gc entry (put when due, delete when a TTL is cleared) and the public marker.
            // batch-get: a listing page's user_metadata, which the listing indexes leave out (C1).
            { keyPrefixes: [key.checkpointName], actions: ['get', 'batch-get', 'put', 'update', 'delete'] },
            { keyPrefixes: [key.gcEntry, key.publicMarker], actions: ['put', 'delete'] },
            // Also updated: a session's heartbeat, and the seq counter by every training submit.
            { keyPrefixes: [key.session, key.seqCounter], actions: ['get', 'put', 'update'] },
            // A page of training runs reads their seq counters (last request time, C1) in batches.
            { keyPrefixes: [key.seqCounter], actions: ['batch-get'] },
            // Quota counters (repositories/quotas.ts): a conditional update per window or poll, and
            // the put that reaps a tenant's expired poll leases.
            { keyPrefixes: [key.rate, key.polls], actions: ['put', 'update'] },
            // Session futures (W9): a poll reads a gap's log entry and voids a position no commit
            // filled; cancel_future writes a log entry at a position it takes and checks the sample's
            // claim is not held; join_sampling_session takes a clone id.
            { keyPrefixes: [key.sessionLog], actions: ['get', 'put'] },
            { keyPrefixes: [key.sessionLogCounter, key.samplerClones], actions: ['update'] },
            // Condition checks: cancel_future's, that no worker holds the sample's claim; every
            // submit's, that its session has not finished.
            { keyPrefixes: [key.sampleClaim, key.session], actions: ['condition-check'] },
            // cancel_future of a running sample marks its live claim (W9, repositories/samples/claims.ts).
            { keyPrefixes: [key.sampleClaim], actions: ['update'] },
            // The listings (C1): checkpoints, sessions and runs from the by_owner and by_parent
            // indexes; the session futures' logs (W9) from by_parent.
            'query-index',
          ],
        },
        bucket: [
          // delete: only a payload whose intake transaction definitively failed (a 4xx must store
          // nothing); blobs a committed row may reference are deleted by the sweeper alone (E5).
          { prefix: 'payloads/', actions: ['put', 'get', 'delete'] },
          { prefix: 'results/', actions: ['get'] },
          // get: what the archive route's presigned URL is signed for (C2); put, with the checkpoint
          // blob's get, builds once the archive of a checkpoint saved before archives were.
          { prefix: 'archives/', actions: ['get', 'put'] },
          // put: copy_weights copies a checkpoint's blob (an S3 copy: it never passes through the api).
          { prefix: 'checkpoints/', actions: ['get', 'put'] },
        ],
        // The status page shows the depths of the work queue and of both dead-letter queues; the API
        // never sends, receives or deletes a message.
        queues: { work: ['depth'], workDlq: ['depth'], streamDlq: ['depth'] },
      },
      triggers: [
        {
          kind: 'http',
          basePath: '/',
          // The status page (shared/services/status-page, shared/services/api/status-routes.ts). Its data route reads
          // every shard of the live index, so it has a budget of its own (OPERATOR_READS_PER_SECOND),
          // counted by the function once the operator key is valid: an API Gateway route throttle would
          // count unauthenticated requests too and let them use the operators' budget up.
          routes: [
            { method: 'GET', path: '/status' },
            { method: 'GET', path: '/status/{asset}' },
            { method: 'GET', path: '/status/data' },
          ],
        },
      ],
      bundledAssets: ['shared/services/status-page/assets'],
    },
    scheduler: {
      entry: 'functions/scheduler/handler.ts',
      description: 'Plans from the live index, claims models, dispatches work items',
      memoryMb: 1024,
      timeoutSeconds: 60,
      reservedConcurrency: 4,
      grants: {
        tables: {
          // It plans from the live indexes (`live`, `live_by_model`) and reads the named sample rows
          // in batches; it never writes a future (R5).
          futures: ['query-index', 'batch-get'],
          // Claims and releases models by conditional updates on rows it reads in batches.
          models: ['batch-get', 'update'],
          registry: SCHEDULER_REGISTRY,
        },
        bucket: [
          { prefix: 'payloads/', actions: ['get'] },
          { prefix: 'work/', actions: ['put'] },
          // list (the bucket, unconditioned): S3 answers a GET of a missing object with 404 only to a
          // caller that may list the bucket, 403 otherwise; a missing payload must read as missing so the
          // tick fails that one step (R5) instead of failing every pass (shared/repositories/payloads.ts).
          { prefix: '', actions: ['list'] },
        ],
        // A held model's work item goes to its holder's lane (S2).
        queues: { work: ['send'], ...onLanes(['send']) },
      },
      triggers: [
        {
          // New pending rows (and samples returned to pending after a cut) can be planned.
          kind: 'stream',
          table: 'futures',
          batchSize: 100,
          maxBatchingWindowSeconds: 0,
          startingPosition: 'LATEST',
          retryAttempts: 10,
          bisectBatchOnError: true,
          parallelizationFactor: STEP_PATH_STREAM_PARALLELIZATION,
          reportBatchItemFailures: true,
          onFailure: 'streamDlq',
          filters: [{ dynamodb: { NewImage: { live: { S: [{ exists: true }] } } } }],
        },
        {
          // A model whose work item committed or was re-planned may have more work.
          kind: 'stream',
          table: 'models',
          batchSize: 100,
          maxBatchingWindowSeconds: 0,
          startingPosition: 'LATEST',
          retryAttempts: 10,
          bisectBatchOnError: true,
          parallelizationFactor: STEP_PATH_STREAM_PARALLELIZATION,
          reportBatchItemFailures: true,
          onFailure: 'streamDlq',
          filters: [
            {
              eventName: ['MODIFY'],
              dynamodb: {
                OldImage: { inflight: { S: [{ exists: true }] } },
                NewImage: { inflight: { S: [{ exists: false }] } },
              },
            },
          ],
        },
        {
          // `drain --off` deletes the pool's drain record: what waited can be planned now, not at the
          // next safety tick. Every other registry write is filtered out before an invocation.
          kind: 'stream',
          table: 'registry',
          batchSize: 100,
          maxBatchingWindowSeconds: 0,
          startingPosition: 'LATEST',
          retryAttempts: 10,
          bisectBatchOnError: true,
          reportBatchItemFailures: true,
          onFailure: 'streamDlq',
          filters: [{ eventName: ['REMOVE'], dynamodb: { Keys: { pk: { S: [registryKey.drain(POOL)] } } } }],
        },
      ],
    },
    worker: {
      entry: 'functions/worker/handler.ts',
      description: 'Executes work items on the reference CPU backend and commits per model',
      memoryMb: 2048,
      timeoutSeconds: WORKER_TIMEOUT_SECONDS,
      // Reserved so the api cannot starve it; at least its queue trigger's maxConcurrency, or SQS
      // deliveries would be throttled and count towards the DLQ (the stack checks).
      // `-c workerReservedConcurrency=N` at deploy time.
      reservedConcurrency: 8,
      grants: {
        tables: {
          // Its commit ends futures and models by conditional updates (in one transaction, E5).
          futures: ['get', 'batch-get', 'update'],
          // batch-get: a work item's model rows in one read (shared/services/worker/opening-reads.ts).
          models: ['get', 'batch-get', 'update'],
          // A GPU host runs third-party backend code: on the registry it reaches only the records a
          // work item owns, never a key, a session, a counter or a control (ExternalWorkerPolicy too).
          registry: [
            // Sample claims it renews and gives back or deletes at commit (R4); checkpoint names it
            // commits or releases (E4).
            { keyPrefixes: [key.sampleClaim, key.checkpointName], actions: ['get', 'update', 'delete'] },
            // A work item's sample claims in one read (shared/services/worker/opening-reads.ts).
            { keyPrefixes: [key.sampleClaim], actions: ['batch-get'] },
            // The sampling session a save_weights_for_sampler creates, in its commit.
            { keyPrefixes: [key.samplingSession], actions: ['put'] },
            // A sample's commit takes its session log's next position and writes its entry (W9).
            { keyPrefixes: [key.sessionLogCounter], actions: ['update'] },
            { keyPrefixes: [key.sessionLog], actions: ['put'] },
            // It polls its pool's cut request while it runs (P1).
            { keyPrefixes: [key.cutRequest], actions: ['get'] },
            // A worker process leases a work lane, renews and gives it back (S2).
            { keyPrefixes: [key.workLane], actions: ['get', 'put', 'update', 'delete'] },
          ],
          prefixes: ['get', 'batch-get', 'put', 'batch-write'],
        },
        bucket: [
          { prefix: 'work/', actions: ['get'] },
          { prefix: 'payloads/', actions: ['get'] },
          { prefix: 'state/', actions: ['get', 'put'] },
          { prefix: 'results/', actions: ['put'] },
          { prefix: 'checkpoints/', actions: ['get', 'put'] },
          // The checkpoint's archive, built at save (C2).
          { prefix: 'archives/', actions: ['put'] },
        ],
        // A worker process that holds models consumes its lane too (S2; the Lambda never leases one).
        queues: { work: ['consume'], ...onLanes(['consume']) },
      },
      triggers: [
        {
          kind: 'queue',
          queue: 'work',
          batchSize: 1,
          maxBatchingWindowSeconds: 0,
          maxConcurrency: 8,
          reportBatchItemFailures: true,
        },
      ],
    },
    sweeper: {
      entry: 'functions/sweeper/handler.ts',
      description: 'Re-plans expired leases, deletes unreferenced blobs, runs a safety tick',
      memoryMb: 1024,
      timeoutSeconds: 120,
      reservedConcurrency: 1,
      grants: {
        tables: {
          // Its safety tick is the scheduler's; blob collection reads rows in batches and writes none.
          futures: ['query-index', 'batch-get'],
          // scan: expired leases are found by a filtered Scan of the models table (shared/services/sweeper/replan.ts).
          models: ['batch-get', 'update', 'scan'],
          registry: [
            ...SCHEDULER_REGISTRY,
            // Checkpoint collection (C3, C5): one Query of by_owner's `gc` partition, then per due entry
            // its strong read and the name record's, then the deletes of the entry (or its move to a
            // later due time), the expired name record and its public marker.
            'query-index',
            { keyPrefixes: [key.gcEntry], actions: ['get', 'put', 'delete'] },
            { keyPrefixes: [key.checkpointName], actions: ['get', 'delete'] },
            { keyPrefixes: [key.publicMarker], actions: ['delete'] },
          ],
        },
        bucket: [{ prefix: '', actions: ['get', 'put', 'delete', 'list'] }],
        // Its safety tick dispatches as the scheduler does: a held model's work item to its holder's lane (S2).
        queues: { work: ['send'], ...onLanes(['send']) },
      },
      triggers: [{ kind: 'schedule', rateMinutes: 1 }],
    },
  },
};

/** Physical resource name: one naming rule for the stack and the local cloud. */
export function physicalName(prefix: string, baseName: string): string {
  return `${prefix}-${baseName}`;
}

export const TABLE_IDS = Object.keys(topology.tables) as TableId[];
export const QUEUE_IDS = Object.keys(topology.queues) as QueueId[];
export const FUNCTION_IDS = Object.keys(topology.functions) as FunctionId[];
