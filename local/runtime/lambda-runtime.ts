import type { LogLevel } from '@aws-lambda-powertools/logger/types';
import { DescribeTableCommand, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DynamoDBStreamsClient } from '@aws-sdk/client-dynamodb-streams';
import { GetQueueAttributesCommand, SQSClient } from '@aws-sdk/client-sqs';
import { onAwsClientsCreated, resetAwsClients } from '../../shared/aws/clients.js';
import { REFERENCE_TOKENIZER_DIR } from '../../shared/backend/reference/byte-tokenizer.js';
import {
  InProcessCommitSignal,
  installCommitSignal,
  NO_COMMIT_SIGNAL,
} from '../../shared/base/commit-signal.js';
import { resetConfig, TOKENIZER_ID_VAR } from '../../shared/base/config.js';
import { logger } from '../../shared/base/logger.js';
import { FUNCTION_IDS, type FunctionId, type QueueId, type Topology } from '../../shared/base/topology.js';
import { LOCAL_REGION } from '../cloud/resources.js';
import { installConfigScope } from './env-scope.js';
import { AccessPolicy, enforceGrantsOn, runAsFunction } from './grant-enforcement.js';
import { resourceIndex } from './iam-requests.js';
import type { ListenPort } from './port-choice.js';
import { type HttpTrigger, startHttpTrigger } from './triggers/http-trigger.js';
import { type HandlerOverrides, type InvocationObserver, Invoker } from './triggers/invoker.js';
import { startQueueTrigger } from './triggers/queue-trigger.js';
import { type ScheduleTrigger, startScheduleTrigger } from './triggers/schedule-trigger.js';
import { sqsFailureDestination } from './triggers/stream-failure-report.js';
import { type RunningTrigger, startStreamTrigger } from './triggers/stream-trigger.js';
import { TableWrites, watchWritesOn } from './write-wakes.js';

export type {
  HandlerOverrides,
  InvocationObserver,
  InvocationTrace,
  LocalHandler,
} from './triggers/invoker.js';

export interface LocalRuntimeOptions {
  readonly topology: Topology;
  /** The functions' environment (see `envFor`); written into process.env before handlers load. */
  readonly env: Readonly<Record<string, string>>;
  /**
   * Every provisioned queue's URL. The runtime itself writes to a stream mapping's on-failure queue,
   * which no function may send to, so it does not look for that URL in the functions' env. Required
   * when a wired function has a stream trigger.
   */
  readonly queueUrls?: Readonly<Record<QueueId, string>>;
  /** Handlers to use instead of importing `topology.functions[id].entry`. */
  readonly handlers?: HandlerOverrides;
  /** Wire the triggers of these functions only (default: every function). */
  readonly functions?: readonly FunctionId[];
  /** Port of the HTTP API (default: a free one). */
  readonly httpPort?: ListenPort;
  /** Pause between empty stream reads, in ms (default 250), cut short by the handlers' own writes. */
  readonly streamPollIntervalMs?: number;
  /**
   * Wake-ups (default on): commits wake waiting retrieve_future polls in process, and the handlers'
   * DynamoDB writes wake the stream triggers. Off, both wait on their timers, as on AWS for retrieve
   * (the e2e bench measures either way).
   */
  readonly wakeUps?: boolean;
  /**
   * Stream triggers deliver a shard's batches side by side as their `parallelizationFactor` declares
   * (default off: one batch per shard at a time). Here every function shares this process and the
   * machine's cores, so a side-by-side scheduler invocation, which runs a whole look before it finds
   * the tick lock held, slows the tick it runs beside; the e2e bench measured it slower
   * (docs/architecture.md#the-wake-up-path). On AWS each invocation has its own CPU, and only the
   * look's reads are extra.
   */
  readonly streamLanes?: boolean;
  /** Told of every invocation once it settles (the e2e bench's per-hop breakdown); nothing is written. */
  readonly onInvocation?: InvocationObserver;
  /**
   * Shown each SDK client before its first call: the handlers' (`createAwsClients`, DynamoDB, S3 and
   * SQS) and the runtime's own (`triggers`: stream reads, queue receives and deletes, failure reports,
   * start-up lookups), so a middleware can count calls (the e2e bench's calls per request).
   */
  readonly onSdkClient?: (client: SdkClient, user: 'handlers' | 'triggers') => void;
}

/** Any SDK client, as far as adding a middleware needs (local/cloud/client-middleware.ts). */
export interface SdkClient {
  readonly middlewareStack: unknown;
}

export interface LocalRuntime {
  /** Base URL of the HTTP API, when a wired function has an `http` trigger. */
  readonly apiUrl: string | undefined;
  /** Fires a function's schedule now, resolving with the handler's result. */
  runSchedule(functionId: FunctionId): Promise<unknown>;
  /**
   * Runs code outside any trigger as `functionId`'s role and environment would let it run: for a
   * worker process loop (`npm run worker` on a host with `ExternalWorkerPolicyArn`, the worker's
   * grants), so its queue calls are checked like the Lambda's.
   */
  runAs<T>(functionId: FunctionId, run: () => Promise<T>): Promise<T>;
  /** Stops every poller, the schedule timers and the HTTP server; waits briefly for running handlers. */
  stop(): Promise<void>;
}

const STOP_GRACE_MS = 5_000;

/**
 * Runs the topology's Lambda handlers in this process, driven by the triggers the topology declares:
 * an HTTP API (payload format 2.0), DynamoDB stream and SQS pollers behaving like Lambda's event
 * source mappings, and schedules. Handler errors are logged and handled as Lambda would; they never
 * stop the runtime.
 */
export async function startLocalRuntime(options: LocalRuntimeOptions): Promise<LocalRuntime> {
  const { topology, env } = options;
  const wakeUps = options.wakeUps ?? true;
  const writes = wakeUps ? new TableWrites() : undefined;
  applyEnvironment(env, writes, keyNamesOf(topology, env), options.onSdkClient);
  // The api and the worker run in this process, so a commit can wake its waiting polls directly.
  installCommitSignal(wakeUps ? new InProcessCommitSignal() : NO_COMMIT_SIGNAL);
  const region = env.AWS_REGION ?? LOCAL_REGION;
  const wired = options.functions ?? FUNCTION_IDS;
  // Handlers may do locally only what their IAM role lets them do on AWS (see grant-enforcement.ts).
  const access = new AccessPolicy(topology, resourceIndex(topology, env, options.queueUrls, region));
  const invoker = new Invoker(topology, options.handlers, access, options.onInvocation);

  const dynamo = new DynamoDBClient({});
  const sqs = new SQSClient({});
  const streamsEndpoint = env.AWS_ENDPOINT_URL_DYNAMODB_STREAMS ?? env.AWS_ENDPOINT_URL_DYNAMODB;
  const streams = new DynamoDBStreamsClient(
    streamsEndpoint === undefined ? {} : { endpoint: streamsEndpoint },
  );
  for (const client of [dynamo, sqs, streams]) options.onSdkClient?.(client, 'triggers');

  const pollers: RunningTrigger[] = [];
  const schedules = new Map<FunctionId, ScheduleTrigger>();
  let http: HttpTrigger | undefined;

  const stop = async (): Promise<void> => {
    for (const schedule of schedules.values()) schedule.stop();
    const stopping = Promise.allSettled([http?.stop(), ...pollers.map((poller) => poller.stop())]);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([stopping, new Promise((resolve) => (timer = setTimeout(resolve, STOP_GRACE_MS)))]);
    clearTimeout(timer);
    await invoker.drain(STOP_GRACE_MS);
    for (const client of [dynamo, sqs, streams]) client.destroy();
  };

  try {
    // Load every wired handler first: a broken entry fails start-up, not the first event.
    await Promise.all(wired.map((functionId) => invoker.load(functionId)));
    const httpRoutes: { basePath: string; functionId: FunctionId }[] = [];
    for (const functionId of wired) {
      for (const trigger of topology.functions[functionId].triggers) {
        switch (trigger.kind) {
          case 'http':
            httpRoutes.push({ basePath: trigger.basePath, functionId });
            break;
          case 'stream': {
            const table = requiredEnv(env, topology.tables[trigger.table].envVar);
            const described = await dynamo.send(new DescribeTableCommand({ TableName: table }));
            const streamArn = described.Table?.LatestStreamArn;
            if (streamArn === undefined) throw new Error(`table ${table} has no stream for ${functionId}`);
            const onFailureUrl = options.queueUrls?.[trigger.onFailure];
            if (onFailureUrl === undefined) {
              throw new Error(
                `the local runtime needs queueUrls.${trigger.onFailure}: ${functionId}'s stream trigger reports failed batches there`,
              );
            }
            pollers.push(
              await startStreamTrigger({
                functionId,
                trigger: options.streamLanes === true ? trigger : { ...trigger, parallelizationFactor: 1 },
                streamArn,
                client: streams,
                invoker,
                region,
                onFailure: sqsFailureDestination(sqs, onFailureUrl),
                pollIntervalMs: options.streamPollIntervalMs,
                ...(writes === undefined
                  ? {}
                  : { onTableWrite: (listener) => writes.onWrite(table, listener, trigger.filters) }),
              }),
            );
            break;
          }
          case 'queue': {
            const envVar = topology.queues[trigger.queue].envVar;
            if (envVar === undefined)
              throw new Error(`queue ${trigger.queue} has no envVar to find its URL by`);
            const queueUrl = requiredEnv(env, envVar);
            const attributes = await sqs.send(
              new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['QueueArn'] }),
            );
            const queueArn = attributes.Attributes?.QueueArn;
            if (queueArn === undefined) throw new Error(`queue ${queueUrl} reported no ARN`);
            pollers.push(
              startQueueTrigger({ functionId, trigger, queueUrl, queueArn, client: sqs, invoker, region }),
            );
            break;
          }
          case 'schedule':
            schedules.set(functionId, startScheduleTrigger(functionId, trigger.rateMinutes, invoker, region));
            break;
        }
      }
    }
    if (httpRoutes.length > 0) http = await startHttpTrigger(httpRoutes, invoker, options.httpPort);
  } catch (error) {
    await stop();
    throw error;
  }

  return {
    apiUrl: http?.url,
    runSchedule: (functionId) => {
      const schedule = schedules.get(functionId);
      if (schedule === undefined) {
        return Promise.reject(new Error(`${functionId} has no schedule trigger in this runtime`));
      }
      return schedule.fire();
    },
    runAs: (functionId, run) => runAsFunction({ functionId, access }, run),
    stop,
  };
}

/**
 * Points this process (config, SDK clients, log level) at the local cloud before handlers load; the
 * shared SDK clients created from now on carry the grant enforcement, and inside a function `config()`
 * sees only the resource variables that function gets on AWS (env-scope.ts).
 */
function applyEnvironment(
  env: Readonly<Record<string, string>>,
  writes: TableWrites | undefined,
  keyNames: (table: string) => readonly string[] | undefined,
  onSdkClient: LocalRuntimeOptions['onSdkClient'],
): void {
  const level = env.POWERTOOLS_LOG_LEVEL ?? process.env.POWERTOOLS_LOG_LEVEL ?? 'WARN';
  // get_info's tokenizer_id: a local client runs on this machine, so the shipped folder loads there.
  const tokenizer = env[TOKENIZER_ID_VAR] ?? process.env[TOKENIZER_ID_VAR] ?? REFERENCE_TOKENIZER_DIR;
  Object.assign(process.env, env, { POWERTOOLS_LOG_LEVEL: level, [TOKENIZER_ID_VAR]: tokenizer });
  logger.setLogLevel(level as LogLevel);
  resetConfig();
  onAwsClientsCreated((clients) => {
    enforceGrantsOn(clients);
    if (writes !== undefined) watchWritesOn(clients, writes, keyNames);
    for (const client of [clients.dynamo, clients.s3, clients.sqs]) onSdkClient?.(client, 'handlers');
  });
  installConfigScope();
  resetAwsClients();
}

/** A provisioned table's key attribute names, by its name in `env`. */
function keyNamesOf(
  topology: Topology,
  env: Readonly<Record<string, string>>,
): (table: string) => readonly string[] | undefined {
  const names = new Map<string, readonly string[]>();
  for (const declared of Object.values(topology.tables)) {
    const table = env[declared.envVar];
    if (table === undefined) continue;
    names.set(table, [
      declared.partitionKey.name,
      ...(declared.sortKey === undefined ? [] : [declared.sortKey.name]),
    ]);
  }
  return (table) => names.get(table);
}

function requiredEnv(env: Readonly<Record<string, string>>, name: string): string {
  const value = env[name];
  if (value === undefined || value === '') throw new Error(`the local runtime needs ${name} in its env`);
  return value;
}
