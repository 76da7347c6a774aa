/**
 * The one declaration of what the system is made of: tables, the `live` index, streams, the bucket,
 * the queues, the functions, their triggers and exactly what each function may touch.
 *
 * The CDK stack (`cdk/`) builds from this object and the local cloud and runtime (`local/`) read it,
 * so the deployed system and the one that runs on a laptop cannot drift apart. Pure data: no AWS
 * construct and no SDK client is imported here.
 */

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
 * `write` also covers a TransactWriteItems' puts, updates and deletes (IAM authorises its items one by
 * one); `transact` adds its condition checks (ConditionCheckItem), which no function sends today, so
 * none is granted it. `scan`: a Scan of the whole table (never its index); only a sweep needs it.
 */
export type TableAction = 'read' | 'write' | 'query-index' | 'transact' | 'scan';
export type BucketAction = 'get' | 'put' | 'delete' | 'list';
/** `depth`: read the queue's message counts (GetQueueAttributes) and nothing else. */
export type QueueAction = 'send' | 'consume' | 'depth';

export interface FunctionGrants {
  readonly tables: Partial<Record<TableId, readonly TableAction[]>>;
  /** Object actions per key prefix (see `shared/storage-keys.ts`); `list` applies to the bucket. */
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
export type QueueId = 'work' | 'workDlq' | 'streamDlq';
export type FunctionId = 'api' | 'scheduler' | 'worker' | 'sweeper';

export interface Topology {
  /** Settings every function receives as environment variables (see `shared/config.ts`). */
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
  // Fairness across tenants (shared/scheduling/planner.ts): a sample's tenant is on no row a tick reads.
  'tenant',
  'seq',
  'request_type',
  'checkpoint_id',
  'status',
  'tokens',
] as const;

const WORKER_TIMEOUT_SECONDS = 300;

export const topology: Topology = {
  settings: {
    POOL: 'default',
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
        {
          name: LIVE_INDEX,
          partitionKey: { name: 'live', type: 'S' },
          sortKey: { name: 'request_id', type: 'S' },
          projection: { type: 'INCLUDE', nonKeyAttributes: LIVE_PROJECTION },
        },
      ],
    },
    models: {
      name: 'models',
      envVar: 'MODELS_TABLE',
      partitionKey: { name: 'model_id', type: 'S' },
      stream: 'NEW_AND_OLD_IMAGES',
      indexes: [],
    },
    registry: {
      // Small records keyed by a typed prefix: API keys, sessions, sampling sessions, per-model seq
      // counters, idempotency records and checkpoint names. Kept off the models table so submits
      // never conflict with the scheduler's claims and never wake its stream (E1).
      name: 'registry',
      envVar: 'REGISTRY_TABLE',
      partitionKey: { name: 'pk', type: 'S' },
      timeToLiveAttribute: 'ttl',
      indexes: [],
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
  },
  functions: {
    api: {
      entry: 'functions/api/handler.ts',
      description: 'Tinker-compatible HTTP API: intake of futures, sessions, retrieve_future; status page',
      memoryMb: 1024,
      timeoutSeconds: 29,
      // Caps the api too: long polls hold an invocation up to 25 s, and without a cap a flood of them
      // takes the account's whole concurrency from the worker and the scheduler. Deploy-time
      // `-c apiReservedConcurrency=N` (shared/config.ts DEPLOY_LIMIT_DEFAULTS).
      reservedConcurrency: 500,
      grants: {
        tables: {
          // query-index: the status page's data reads the live index as a tick does (operator keys only).
          futures: ['read', 'write', 'query-index'],
          models: ['read', 'write'],
          registry: ['read', 'write'],
        },
        bucket: [
          // delete: only a payload whose intake transaction definitively failed (a 4xx must store
          // nothing); blobs a committed row may reference are deleted by the sweeper alone (E5).
          { prefix: 'payloads/', actions: ['put', 'get', 'delete'] },
          { prefix: 'results/', actions: ['get'] },
        ],
        // The status page shows the depths of the work queue and of both dead-letter queues; the API
        // never sends, receives or deletes a message.
        queues: { work: ['depth'], workDlq: ['depth'], streamDlq: ['depth'] },
      },
      triggers: [
        {
          kind: 'http',
          basePath: '/',
          // The status page (shared/status-page, shared/api/status-routes.ts). Its data route reads
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
      bundledAssets: ['shared/status-page/assets'],
    },
    scheduler: {
      entry: 'functions/scheduler/handler.ts',
      description: 'Plans from the live index, claims models, dispatches work items',
      memoryMb: 1024,
      timeoutSeconds: 60,
      reservedConcurrency: 4,
      grants: {
        tables: {
          futures: ['query-index', 'read'],
          models: ['read', 'write'],
          // write: the tick lock `tick#<pool>` (put, renew, release) and sample claims `claim#<request_id>`
          // (put, and delete when a failed pass gives them back): shared/scheduler/tick-lock.ts, samples.ts.
          registry: ['read', 'write'],
        },
        bucket: [
          { prefix: 'payloads/', actions: ['get'] },
          { prefix: 'work/', actions: ['put'] },
          // list (the bucket, unconditioned): S3 answers a GET of a missing object with 404 only to a
          // caller that may list the bucket, 403 otherwise; a missing payload must read as missing so the
          // tick fails that one step (R5) instead of failing every pass (shared/scheduler/payloads.ts).
          { prefix: '', actions: ['list'] },
        ],
        queues: { work: ['send'] },
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
          futures: ['read', 'write'],
          models: ['read', 'write'],
          registry: ['read', 'write'],
          prefixes: ['read', 'write'],
        },
        bucket: [
          { prefix: 'work/', actions: ['get'] },
          { prefix: 'payloads/', actions: ['get'] },
          { prefix: 'state/', actions: ['get', 'put'] },
          { prefix: 'results/', actions: ['put'] },
          { prefix: 'checkpoints/', actions: ['get', 'put'] },
        ],
        queues: { work: ['consume'] },
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
          futures: ['query-index', 'read', 'write'],
          // scan: expired leases are found by a filtered Scan of the models table (shared/sweeper/replan.ts).
          models: ['read', 'write', 'scan'],
          registry: ['read', 'write'],
          prefixes: ['read', 'write'],
        },
        bucket: [{ prefix: '', actions: ['get', 'put', 'delete', 'list'] }],
        queues: { work: ['send'] },
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
