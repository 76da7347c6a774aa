import { ConfigError } from './errors.js';
import { type QueueId, type TableId, topology } from './topology.js';

/**
 * All settings, read in one place. Resource names are required only by the functions that use
 * them: each accessor throws a `ConfigError` naming the missing variable the first time it is read.
 * Endpoints are never configured here: the AWS SDK reads `AWS_ENDPOINT_URL` and
 * `AWS_ENDPOINT_URL_<SERVICE>` itself, so the same code runs on AWS, LocalStack and the local cloud.
 */
export interface Config {
  table(id: TableId): string;
  readonly bucket: string;
  readonly workQueueUrl: string;
  /**
   * The URL of a queue, from the variable the topology declares for it (a function gets it only for
   * a queue it is granted). Required: throws naming the variable when unset. The status picture reads
   * the dead-letter queues' depths this way, so a reader of it (the api function, `npm start`'s page,
   * the CLI) must be given WORK_DLQ_URL and STREAM_DLQ_URL.
   */
  queueUrl(id: QueueId): string;
  /** Scheduling pool this deployment serves; one tick at a time per pool. */
  readonly pool: string;
  /** Number of `live` index partitions per pool (spreads index writes, see docs/design.md#limits). */
  readonly liveShards: number;
  /** Path-style S3 addressing, needed by fauxqs and LocalStack. */
  readonly s3ForcePathStyle: boolean;
  /**
   * Write custom metrics as EMF lines on stdout: on by default inside Lambda (CloudWatch turns them
   * into metrics), off elsewhere unless EMIT_METRICS=true (they would only be noise locally).
   */
  readonly emitMetrics: boolean;
  /**
   * X-Ray tracing of the handlers and their AWS SDK calls (POWERTOOLS_TRACE_ENABLED, default true;
   * the stack sets it false under `-c tracing=false`), and only inside Lambda's execution environment
   * (AWS_EXECUTION_ENV set, AWS_SAM_LOCAL not), as Powertools' Tracer decides: off for `npm start`,
   * the tests and a GPU host, which then never load the X-Ray SDK (`shared/aws/tracer.ts`).
   */
  readonly tracing: boolean;
  /**
   * `get_info`'s `model_data.tokenizer_id` (REFERENCE_TOKENIZER_ID): what the client's
   * `AutoTokenizer.from_pretrained` loads for the reference model, so it must be loadable on the
   * client's machine (a Hub id, or a folder path there). Optional: unset, the answer omits it. The
   * local runtime sets it to the shipped folder (shared/backend/reference/tokenizer/); on AWS the
   * stack passes the `tokenizerId` context value.
   */
  readonly tokenizerId: string | undefined;
  /**
   * The pool's base models (BASE_MODELS, G6): what `get_server_capabilities` lists, the only names
   * create_model and create_sampling_session accept, and each one's `get_info` tokenizer_id. Unset:
   * the reference model alone (`DEFAULT_BASE_MODEL`, tokenizer `tokenizerId`). Throws naming the
   * variable when it is not a JSON list of `{ "name", "tokenizer_id"?, "max_context_length"?,
   * "vocab_size"?, "max_num_samples"? }`.
   */
  readonly baseModels: readonly BaseModelConfig[];
  readonly tunables: Tunables;
}

/** One base model the pool serves (an entry of BASE_MODELS). */
export interface BaseModelConfig {
  /** What clients name as `base_model`: a Hub id or a path on the engine's host. */
  readonly name: string;
  /** `get_info`'s tokenizer_id: what the client's `AutoTokenizer.from_pretrained` loads. */
  readonly tokenizer_id?: string;
  /**
   * Tokens a sequence may hold (prompt plus generated): advertised by `get_server_capabilities` and
   * `get_info`, and refused past at submit (B2). Default: the reference model's context.
   */
  readonly max_context_length?: number;
  /**
   * The model's vocabulary (the width of its logits, what the engine's `hello` reports): token ids and
   * top-k counts past it are refused at submit (B2). Default: the reference model's for it, else
   * unchecked until execution.
   */
  readonly vocab_size?: number;
  /** Samples one request may ask for (default: the engines' bound, 256); more is refused at submit (B2). */
  readonly max_num_samples?: number;
}

/** The reference backend's model, served when BASE_MODELS is unset (the demo and the docs use it). */
export const DEFAULT_BASE_MODEL = 'reference/byte-lm';

/** The variable listing the pool's base models (see `Config.baseModels`). */
export const BASE_MODELS_VAR = 'BASE_MODELS';

/** Tunables with documented defaults (docs/configuration.md#environment-variables). */
export interface Tunables {
  readonly longPollSeconds: number;
  readonly leaseSeconds: number;
  readonly maxAttempts: number;
  readonly maxBodyBytes: number;
  readonly maxDatums: number;
  readonly maxTokensPerRequest: number;
  readonly maxStepsPerModel: number;
  readonly maxWorkItemRequests: number;
  readonly maxWorkItemTokens: number;
  readonly prefixGroupRows: number;
  readonly prefixGroupTokens: number;
  /** Requests that store something (submits, sessions) per tenant per second; 429 above. */
  readonly submitsPerSecond: number;
  /** Long polls one tenant may hold open at once (each holds an api invocation); 429 above. */
  readonly longPollsPerTenant: number;
  /** Authenticated reads of the status page's data per second, shared by all operators; 429 above. */
  readonly operatorReadsPerSecond: number;
  /** Lifetime of a checkpoint archive's presigned URL (C2), seconds. */
  readonly archiveUrlSeconds: number;
  /**
   * How long a container keeps a key's successful lookup (API_KEY_CACHE_SECONDS, 0: off), so a
   * request from a warm container skips the registry read. The price is revocation: a revoked key
   * keeps working on a container that looked it up before, for at most this long (docs/configuration.md#key-lookups).
   */
  readonly apiKeyCacheSeconds: number;
  /**
   * A retrieve_future poll takes one of its tenant's LONG_POLLS_PER_TENANT slots only once it has
   * waited this long (POLL_SLOT_AFTER_MS, 0: at once): most polls end sooner and write nothing.
   */
  readonly pollSlotAfterMs: number;
  /**
   * Models whose state a worker process keeps resident in its engine between work items (S1;
   * RESIDENT_MODELS, 0: none, every commit writes the whole state as the Lambda worker does).
   */
  readonly residentModels: number;
  /** A resident model's state is snapshotted at the commit that brings its replay log to this many steps (S3). */
  readonly snapshotEverySteps: number;
  /** ... or at the first commit this long after its oldest step not in a snapshot (S3). */
  readonly snapshotEverySeconds: number;
  /** A resident model not used for this long is snapshotted (if needed) and let go (S3). */
  readonly holdIdleSeconds: number;
  /** `holder_until` is set this far ahead by each commit and renewal; past it, the holder is gone (S1, S2). */
  readonly holdSeconds: number;
  /**
   * S5's coalescing window (COALESCE_WINDOW_MS, default 0: off, at most `MAX_COALESCE_WINDOW_MS`;
   * engine pools run with `ENGINE_COALESCE_WINDOW_MS`): a model whose run ends with a forward_backward
   * submitted less than this long ago waits for the optim_step the SDK sends once that submit is
   * answered, so both run in one work item (docs/configuration.md#coalescing).
   */
  readonly coalesceWindowMs: number;
  /**
   * Part size of the worker's streamed state and checkpoint uploads (BLOB_PART_BYTES; S3 takes 5 MiB
   * to 5 GiB per part, the local S3 at most 11 MiB), and parts uploading at once (BLOB_PART_CONCURRENCY):
   * an upload holds at most their product in memory (shared/aws/s3-streams.ts).
   */
  readonly blobPartBytes: number;
  readonly blobPartConcurrency: number;
}

export type Env = Readonly<Record<string, string | undefined>>;

/** The variable of S5's coalescing window (see `Tunables.coalesceWindowMs`). */
export const COALESCE_WINDOW_VAR = 'COALESCE_WINDOW_MS';

const TUNABLE_DEFAULTS: Record<keyof Tunables, [envVar: string, fallback: number]> = {
  longPollSeconds: ['LONG_POLL_SECONDS', 25],
  leaseSeconds: ['LEASE_SECONDS', 60],
  maxAttempts: ['MAX_ATTEMPTS', 3],
  maxBodyBytes: ['MAX_BODY_BYTES', 5 * 1024 * 1024],
  maxDatums: ['MAX_DATUMS', 1024],
  maxTokensPerRequest: ['MAX_TOKENS_PER_REQUEST', 1_048_576],
  maxStepsPerModel: ['MAX_STEPS_PER_MODEL', 90],
  maxWorkItemRequests: ['MAX_WORK_ITEM_REQUESTS', 256],
  maxWorkItemTokens: ['MAX_WORK_ITEM_TOKENS', 4_194_304],
  prefixGroupRows: ['PREFIX_GROUP_ROWS', 256],
  prefixGroupTokens: ['PREFIX_GROUP_TOKENS', 4_194_304],
  submitsPerSecond: ['SUBMITS_PER_SECOND', 200],
  longPollsPerTenant: ['LONG_POLLS_PER_TENANT', 256],
  operatorReadsPerSecond: ['OPERATOR_READS_PER_SECOND', 5],
  // 60 s: an issued archive URL outlives an unpublish or delete by this much (C4), and a download
  // need only start within it (S3 checks the expiry when a GET starts, not while it streams).
  archiveUrlSeconds: ['ARCHIVE_URL_SECONDS', 60],
  // 10 s: a warm container looks a busy key up about once per 10 s instead of on every request, and
  // a revoked key stops working everywhere within 10 s (docs/configuration.md#key-lookups).
  apiKeyCacheSeconds: ['API_KEY_CACHE_SECONDS', 10],
  // 1 s: a closed-loop step's poll ends within a few hundred ms (bench/README.md#e2e), so
  // nearly every poll ends before it would take a slot; a poll held longer still takes one.
  pollSlotAfterMs: ['POLL_SLOT_AFTER_MS', 1_000],
  // 32: below the engine backend's 64 live state handles, so residency never makes it release one.
  residentModels: ['RESIDENT_MODELS', 32],
  // 64 steps or 10 minutes: a killed holder's model is rebuilt by replaying at most about that much
  // (S4), while a snapshot (16 B per trainable parameter) is written at most once per 64 steps.
  snapshotEverySteps: ['SNAPSHOT_EVERY_STEPS', 64],
  snapshotEverySeconds: ['SNAPSHOT_EVERY_SECONDS', 600],
  holdIdleSeconds: ['HOLD_IDLE_SECONDS', 300],
  // 60 s, renewed every 20 s: a killed holder's models go back to the shared queue within a minute.
  holdSeconds: ['HOLD_SECONDS', 60],
  // Off: a pair's optim_step becomes visible 100-250 ms after its forward_backward's submit, and on
  // the reference backend, whose work items cost less than that wait, holding halves the e2e bench's
  // mixed closed loop (docs/configuration.md#coalescing). Engine pools run with
  // `ENGINE_COALESCE_WINDOW_MS` (`engineCoalesceWindowMs`).
  coalesceWindowMs: [COALESCE_WINDOW_VAR, 0],
  // 8 MiB x 4: at most 32 MiB of a blob in flight; parts that both S3 (>= 5 MiB) and fauxqs (< 11 MiB) take.
  blobPartBytes: ['BLOB_PART_BYTES', 8 * 1024 * 1024],
  blobPartConcurrency: ['BLOB_PART_CONCURRENCY', 4],
};

/**
 * The window a pool on a real engine runs with (`npm start -- --engine`, the engine bench): the SDK
 * sends a step's optim_step once its forward_backward's submit is answered, so through the local
 * stack at 32,768-65,536 tokens it is visible 100-250 ms after the pass's submit (the intake of the
 * pass, then of the barrier), and a work item there costs 180-390 ms beside the engine's compute
 * (bench/README.md#engine).
 */
export const ENGINE_COALESCE_WINDOW_MS = 250;

/** COALESCE_WINDOW_MS for an engine pool's local stack: the variable when set, else `ENGINE_COALESCE_WINDOW_MS`. */
export function engineCoalesceWindowMs(env: Env = process.env): number {
  return positiveInteger(env, COALESCE_WINDOW_VAR, ENGINE_COALESCE_WINDOW_MS, true, MAX_COALESCE_WINDOW_MS);
}

/**
 * The longest coalescing window: a tick waits it out inside its invocation, and a forward_backward
 * no barrier follows pays it in latency.
 */
export const MAX_COALESCE_WINDOW_MS = 1_000;

/** Upper bounds of tunables that have one. */
const TUNABLE_MAX: Partial<Record<keyof Tunables, number>> = { coalesceWindowMs: MAX_COALESCE_WINDOW_MS };

/** Tunables for which 0 means "off" (any other tunable must be positive). */
const ZERO_ALLOWED: ReadonlySet<keyof Tunables> = new Set([
  'apiKeyCacheSeconds',
  'pollSlotAfterMs',
  'residentModels',
  'coalesceWindowMs',
]);

/**
 * What only the stack can enforce, set at deploy time with `-c <context key>=<value>` (cdk/app.ts):
 * API Gateway's stage throttle and the reserved concurrency of the api and worker functions. The
 * per-tenant quotas above are the api function's variables; the stack passes them from the context
 * keys in `QUOTA_CONTEXT_KEYS`, so a deployer sets every limit in one way.
 */
export interface DeployLimits {
  /** Stage default: steady requests per second over all routes and clients (API Gateway). */
  readonly apiRatePerSecond: number;
  readonly apiBurst: number;
  /** Reserved (and so capped) concurrency of the api function: long polls cannot take the rest. */
  readonly apiReservedConcurrency: number;
  /** Of the reference worker; at least its queue trigger's maxConcurrency (cdk/stack.ts checks). */
  readonly workerReservedConcurrency: number;
}

export const DEPLOY_LIMIT_DEFAULTS: Record<keyof DeployLimits, [contextKey: string, fallback: number]> = {
  apiRatePerSecond: ['apiRatePerSecond', 500],
  apiBurst: ['apiBurst', 1000],
  // The declaration's values (shared/base/topology.ts), which a context value overrides.
  apiReservedConcurrency: ['apiReservedConcurrency', topology.functions.api.reservedConcurrency ?? 500],
  workerReservedConcurrency: [
    'workerReservedConcurrency',
    topology.functions.worker.reservedConcurrency ?? 8,
  ],
};

/** Context keys of the api function's quotas, beside their variables (see `TUNABLE_DEFAULTS`). */
export const QUOTA_CONTEXT_KEYS = {
  submitsPerSecond: 'submitsPerSecond',
  longPollsPerTenant: 'longPollsPerTenant',
  operatorReadsPerSecond: 'operatorReadsPerSecond',
  apiKeyCacheSeconds: 'apiKeyCacheSeconds',
  pollSlotAfterMs: 'pollSlotAfterMs',
} as const satisfies Partial<Record<keyof Tunables, string>>;

function contextInteger(
  context: (key: string) => unknown,
  key: string,
  fallback: number,
  zeroAllowed = false,
): number {
  const raw = context(key);
  if (raw === undefined || raw === null || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0 || (value === 0 && !zeroAllowed)) {
    const wanted = zeroAllowed ? 'an integer of 0 or more' : 'a positive integer';
    throw new ConfigError(`Context value ${key} must be ${wanted}, got "${String(raw)}"`, {
      context: { variable: key },
    });
  }
  return value;
}

/** What the stack reads from its CDK context: its own limits and the api function's quota variables. */
export interface DeployContext {
  readonly limits: DeployLimits;
  /** Variables for the api function: only the quotas the context sets (the rest keep their defaults). */
  readonly apiQuotaEnv: Readonly<Record<string, string>>;
}

export function readDeployContext(context: (key: string) => unknown): DeployContext {
  const limits = Object.fromEntries(
    Object.entries(DEPLOY_LIMIT_DEFAULTS).map(([key, [contextKey, fallback]]) => [
      key,
      contextInteger(context, contextKey, fallback),
    ]),
  ) as unknown as DeployLimits;
  const apiQuotaEnv: Record<string, string> = {};
  for (const [key, contextKey] of Object.entries(QUOTA_CONTEXT_KEYS)) {
    const tunable = key as keyof typeof QUOTA_CONTEXT_KEYS;
    const [envVar, fallback] = TUNABLE_DEFAULTS[tunable];
    const value = contextInteger(context, contextKey, fallback, ZERO_ALLOWED.has(tunable));
    if (value !== fallback) apiQuotaEnv[envVar] = String(value);
  }
  return { limits, apiQuotaEnv };
}

function required(env: Env, name: string): string {
  const value = env[name];
  if (value === undefined || value === '') {
    throw new ConfigError(`Missing required environment variable ${name}`, { context: { variable: name } });
  }
  return value;
}

/** An optional setting: unset and empty both mean absent (never a default that looks like a value). */
function optional(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value === '' ? undefined : value;
}

/** The variable naming get_info's tokenizer_id (see `Config.tokenizerId`). */
export const TOKENIZER_ID_VAR = 'REFERENCE_TOKENIZER_ID';

function baseModels(env: Env): BaseModelConfig[] {
  const raw = optional(env, BASE_MODELS_VAR);
  if (raw === undefined) {
    const tokenizer = optional(env, TOKENIZER_ID_VAR);
    return [{ name: DEFAULT_BASE_MODEL, ...(tokenizer === undefined ? {} : { tokenizer_id: tokenizer }) }];
  }
  const fail = (problem: string): never => {
    throw new ConfigError(
      `Environment variable ${BASE_MODELS_VAR} ${problem}; want a JSON list of {"name", "tokenizer_id"?, "max_context_length"?, "vocab_size"?, "max_num_samples"?}`,
      { context: { variable: BASE_MODELS_VAR } },
    );
  };
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return fail('is not JSON');
  }
  if (!Array.isArray(parsed) || parsed.length === 0) return fail('is not a non-empty list');
  const names = new Set<string>();
  return parsed.map((entry: unknown, index): BaseModelConfig => {
    const model = (entry ?? {}) as {
      name?: unknown;
      tokenizer_id?: unknown;
      max_context_length?: unknown;
      vocab_size?: unknown;
      max_num_samples?: unknown;
    };
    if (typeof model.name !== 'string' || model.name === '') return fail(`entry ${index} has no name`);
    if (names.has(model.name)) return fail(`names ${model.name} twice`);
    names.add(model.name);
    if (
      model.tokenizer_id !== undefined &&
      (typeof model.tokenizer_id !== 'string' || model.tokenizer_id === '')
    ) {
      return fail(`entry ${index} has a tokenizer_id that is not a non-empty string`);
    }
    const limits: Record<string, number> = {};
    for (const limit of ['max_context_length', 'vocab_size', 'max_num_samples'] as const) {
      const value = model[limit];
      if (value === undefined) continue;
      if (!Number.isSafeInteger(value) || (value as number) < 1) {
        return fail(`entry ${index} has a ${limit} that is not a positive integer`);
      }
      limits[limit] = value as number;
    }
    return {
      name: model.name,
      ...(model.tokenizer_id === undefined ? {} : { tokenizer_id: model.tokenizer_id as string }),
      ...limits,
    };
  });
}

function positiveInteger(
  env: Env,
  name: string,
  fallback?: number,
  allowZero = false,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const raw = env[name];
  if (raw === undefined || raw === '') {
    if (fallback === undefined) return positiveInteger({ [name]: required(env, name) }, name);
    return fallback;
  }
  const value = Number(raw);
  if (!Number.isInteger(value) || value < (allowZero ? 0 : 1) || value > max) {
    const wanted =
      (allowZero ? 'a non-negative integer' : 'a positive integer') +
      (max < Number.MAX_SAFE_INTEGER ? ` of at most ${max}` : '');
    throw new ConfigError(`Environment variable ${name} must be ${wanted}, got "${raw}"`, {
      context: { variable: name },
    });
  }
  return value;
}

function booleanFlag(env: Env, name: string): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '' || raw === 'false' || raw === '0') return false;
  if (raw === 'true' || raw === '1') return true;
  throw new ConfigError(`Environment variable ${name} must be true or false, got "${raw}"`, {
    context: { variable: name },
  });
}

export function readConfig(env: Env = process.env): Config {
  const tunables = Object.fromEntries(
    Object.entries(TUNABLE_DEFAULTS).map(([key, [name, fallback]]) => [
      key,
      positiveInteger(
        env,
        name,
        fallback,
        ZERO_ALLOWED.has(key as keyof Tunables),
        TUNABLE_MAX[key as keyof Tunables],
      ),
    ]),
  ) as unknown as Tunables;
  let served: BaseModelConfig[] | undefined;
  return {
    table: (id) => required(env, topology.tables[id].envVar),
    get bucket() {
      return required(env, topology.bucket.envVar);
    },
    get workQueueUrl() {
      return required(env, topology.queues.work.envVar ?? 'WORK_QUEUE_URL');
    },
    queueUrl: (id) => {
      const envVar = topology.queues[id].envVar;
      if (envVar === undefined) {
        throw new ConfigError(`Queue ${id} declares no environment variable: no function may read its URL`, {
          context: { queue: id },
        });
      }
      return required(env, envVar);
    },
    get pool() {
      return required(env, 'POOL');
    },
    get liveShards() {
      return positiveInteger(env, 'LIVE_SHARDS');
    },
    s3ForcePathStyle: booleanFlag(env, 'S3_FORCE_PATH_STYLE'),
    emitMetrics: booleanFlag(env, 'EMIT_METRICS') || env.AWS_LAMBDA_FUNCTION_NAME !== undefined,
    // Where Powertools' Tracer would trace: Lambda's execution environment, not SAM's local one.
    tracing:
      (optional(env, 'POWERTOOLS_TRACE_ENABLED') === undefined ||
        booleanFlag(env, 'POWERTOOLS_TRACE_ENABLED')) &&
      optional(env, 'AWS_EXECUTION_ENV') !== undefined &&
      optional(env, 'AWS_SAM_LOCAL') === undefined,
    tokenizerId: optional(env, TOKENIZER_ID_VAR),
    get baseModels() {
      served ??= baseModels(env);
      return served;
    },
    tunables,
  };
}

let cached: Config | undefined;
let scopedEnv: (() => Env | undefined) | undefined;
let scoped = new WeakMap<Env, Config>();

/**
 * Local only: the local runtime runs every function in one process, so it hands `config()` the
 * environment of the function now running (local/runtime/env-scope.ts), which holds only the resource
 * variables that function's grants give it on AWS. Nothing sets it on AWS, and outside a function
 * the hook answers `undefined`: `config()` then reads process.env as above.
 */
export function setConfigScope(scope: (() => Env | undefined) | undefined): void {
  scopedEnv = scope;
}

/**
 * The configuration, read once per container (locally: once per function scope's environment).
 *
 * Who may call it: the edges only. Each resolves its table names, bucket and clients once (per
 * invocation, work item or command) and passes them down (`repositories/tables.ts`): the api
 * (`services/api/deps.ts`, built in `handleApiRequest`), the scheduler (`services/scheduler/settings.ts`), the
 * sweeper, the worker's runtime (`services/worker/runtime.ts`), the CLI (`bin/cli.ts`) and `npm start`'s
 * status page. Repositories, `services/ops/`, `repositories/payloads.ts` and `services/worker/blobs.ts` take them as
 * parameters. The global seams that remain, and why:
 * - `config()` itself: the one place settings are read, cached per container (locally per function
 *   scope), so an edge pays one object read;
 * - `awsClients()` (aws/clients.ts): SDK clients are expensive to build and hold connection pools,
 *   so one set per container is the point; edges call it (and `schedulerAdapters` defaults to it),
 *   tests pass their own;
 * - the prefix store's defaults (`repositories/prefix/table.ts`): its table and client, read once when the store
 *   is built (by the worker's runtime, per work item), which is already the edge;
 * - settings read where they are used: the pool and shard count of a new future's `live` key
 *   (`repositories/futures.ts`), the metrics switch (`services/ops/metrics.ts`, `services/api/quotas.ts`), the tracing
 *   switch (`aws/tracer.ts`), the base models and their tokenizer ids (`services/api/capabilities.ts`:
 *   capabilities, intake, get_info).
 * Each is a read of a cached object: none changes behaviour between calls.
 */
export function config(): Config {
  const env = scopedEnv?.();
  if (env !== undefined) {
    let forScope = scoped.get(env);
    if (forScope === undefined) {
      forScope = readConfig(env);
      scoped.set(env, forScope);
    }
    return forScope;
  }
  cached ??= readConfig();
  return cached;
}

/** For tests and the local runtime, which set the environment after import. */
export function resetConfig(): void {
  cached = undefined;
  scoped = new WeakMap();
}

/** The CDK context key of the GPU worker fleet (`-c gpuWorkers=...`, docs/configuration.md#cdk-context). */
export const GPU_WORKERS_CONTEXT = 'gpuWorkers';

/** The GPU worker fleet `cdk deploy` brings up (cdk/constructs/gpu-workers.ts): opt-in by context. */
export interface GpuWorkersConfig {
  /** EC2 instance types the hosts may be (the first that has capacity; all with `gpusPerHost` GPUs). */
  readonly instanceTypes: readonly string[];
  /** GPUs of each host: one worker process (ECS task) per GPU. */
  readonly gpusPerHost: number;
  readonly minHosts: number;
  readonly maxHosts: number;
  /** Spot hosts (their interruption notice drains them like a scale-in). */
  readonly spot: boolean;
  /** Minutes with no message queued or in flight before the fleet goes to zero. */
  readonly idleMinutes: number;
  /** The base model the workers load; unset, the pool's single BASE_MODELS entry. */
  readonly baseModel: string | undefined;
  /** A prebuilt worker image; unset, CDK builds cdk/gpu-worker/Dockerfile at deploy. */
  readonly image: string | undefined;
  /** Memory reserved per worker process (MiB). */
  readonly memoryMiB: number;
  /** Root volume of each host (GiB): the image, with its base model, lives there. */
  readonly volumeGiB: number;
  /** Seconds work may wait in the shared queue before the work-waiting alarm fires. */
  readonly waitingAlarmSeconds: number;
}

export const GPU_WORKERS_DEFAULTS: GpuWorkersConfig = {
  instanceTypes: ['g5.xlarge'],
  gpusPerHost: 1,
  minHosts: 0,
  maxHosts: 2,
  spot: false,
  idleMinutes: 15,
  baseModel: undefined,
  image: undefined,
  memoryMiB: 12_288,
  volumeGiB: 200,
  waitingAlarmSeconds: 900,
};

/**
 * The fleet's settings from the context: unset or `false` is no fleet, `true` the defaults, else a
 * JSON object (or an object in cdk.json) overriding any of `GPU_WORKERS_DEFAULTS`. Unknown keys and
 * bad values throw naming the key.
 */
export function readGpuWorkersContext(context: (key: string) => unknown): GpuWorkersConfig | undefined {
  const raw = context(GPU_WORKERS_CONTEXT);
  if (raw === undefined || raw === null || raw === '' || raw === false || raw === 'false') return undefined;
  if (raw === true || raw === 'true') return GPU_WORKERS_DEFAULTS;
  const fail = (problem: string): never => {
    throw new ConfigError(`Context value ${GPU_WORKERS_CONTEXT} ${problem}`, {
      context: { variable: GPU_WORKERS_CONTEXT },
    });
  };
  let parsed: unknown = raw;
  if (typeof raw === 'string') {
    try {
      parsed = JSON.parse(raw);
    } catch {
      return fail('is neither true nor a JSON object');
    }
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    return fail('must be an object');
  const given = parsed as Record<string, unknown>;
  const unknown = Object.keys(given).filter((key) => !(key in GPU_WORKERS_DEFAULTS));
  if (unknown.length > 0) fail(`has unknown keys ${unknown.join(', ')}`);
  const integer = (key: keyof GpuWorkersConfig, min: number): number => {
    const value = given[key] ?? GPU_WORKERS_DEFAULTS[key];
    if (typeof value !== 'number' || !Number.isInteger(value) || value < min) {
      return fail(`.${key} must be an integer of ${min} or more, got ${JSON.stringify(value)}`);
    }
    return value;
  };
  const text = (key: 'baseModel' | 'image'): string | undefined => {
    const value = given[key];
    if (value === undefined) return undefined;
    if (typeof value !== 'string' || value === '') return fail(`.${key} must be a non-empty string`);
    return value;
  };
  const instanceTypes = given.instanceTypes ?? GPU_WORKERS_DEFAULTS.instanceTypes;
  if (
    !Array.isArray(instanceTypes) ||
    instanceTypes.length === 0 ||
    !instanceTypes.every((type) => typeof type === 'string' && /^[a-z0-9-]+\.[a-z0-9]+$/.test(type))
  ) {
    fail('.instanceTypes must be a non-empty list of EC2 instance types such as "g5.xlarge"');
  }
  const spot = given.spot ?? GPU_WORKERS_DEFAULTS.spot;
  if (typeof spot !== 'boolean') fail('.spot must be true or false');
  const config: GpuWorkersConfig = {
    instanceTypes: instanceTypes as string[],
    gpusPerHost: integer('gpusPerHost', 1),
    minHosts: integer('minHosts', 0),
    maxHosts: integer('maxHosts', 1),
    spot: spot as boolean,
    idleMinutes: integer('idleMinutes', 1),
    baseModel: text('baseModel'),
    image: text('image'),
    memoryMiB: integer('memoryMiB', 512),
    volumeGiB: integer('volumeGiB', 30),
    waitingAlarmSeconds: integer('waitingAlarmSeconds', 60),
  };
  if (config.minHosts > config.maxHosts) fail('.minHosts must not exceed .maxHosts');
  return config;
}
