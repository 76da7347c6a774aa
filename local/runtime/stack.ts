import type { AwsClients } from '../../shared/aws/clients.js';
import { topology } from '../../shared/base/topology.js';
import { localAwsClients } from '../cloud/aws-clients.js';
import { type LocalCloud, startLocalCloud } from '../cloud/cloud.js';
import { envFor, type ProvisionedResources, provisionResources } from '../cloud/resources.js';
import { type LocalRuntime, type LocalRuntimeOptions, startLocalRuntime } from './lambda-runtime.js';
import type { ListenPort } from './port-choice.js';

/**
 * The whole local stack in one call, as `npm start` and `npm run demo` bring it up: DynamoDB Local
 * and fauxqs, the topology's resources under one prefix, and every handler behind its triggers.
 */

export interface LocalStackOptions {
  /** Resource name prefix (`npm start` uses `local`). */
  readonly prefix: string;
  /** Port of the HTTP API (default: a free one). */
  readonly httpPort?: ListenPort;
  /** Pause between empty stream reads, in ms (the runtime's default when not given). */
  readonly streamPollIntervalMs?: number;
  /** Extra variables for the functions' environment (for example POWERTOOLS_LOG_LEVEL). */
  readonly extraEnv?: Readonly<Record<string, string>>;
  /** Keep the cloud's data here across starts (see `startLocalCloud`); default: in memory. */
  readonly dataDir?: string;
  /** Passed to the runtime as is (handler overrides, a subset of functions). */
  readonly runtime?: Pick<
    LocalRuntimeOptions,
    'handlers' | 'functions' | 'onInvocation' | 'wakeUps' | 'streamLanes' | 'onSdkClient'
  >;
}

export interface LocalStack {
  readonly cloud: LocalCloud;
  /** Clients bound to the cloud by explicit endpoints (independent of process.env). */
  readonly clients: AwsClients;
  readonly resources: ProvisionedResources;
  /** The functions' environment; the runtime has written it into process.env. */
  readonly env: Readonly<Record<string, string>>;
  readonly runtime: LocalRuntime;
  /** Base URL of the HTTP API (no `/api/v1`). */
  readonly apiUrl: string;
  /** Stops the runtime, then the cloud; safe to call more than once. */
  stop(): Promise<void>;
}

export async function startLocalStack(options: LocalStackOptions): Promise<LocalStack> {
  const cloud = await startLocalCloud(options.dataDir === undefined ? {} : { dataDir: options.dataDir });
  const clients = localAwsClients(cloud.endpoints);
  let runtime: LocalRuntime | undefined;
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      try {
        await runtime?.stop();
      } finally {
        for (const client of [clients.dynamo, clients.s3, clients.sqs]) client.destroy();
        await cloud.stop();
      }
    })();
    return stopping;
  };
  try {
    const resources = await provisionResources(topology, options.prefix, clients);
    const env = { ...envFor(topology, resources, cloud.endpoints), ...options.extraEnv };
    runtime = await startLocalRuntime({
      topology,
      env,
      queueUrls: resources.queueUrls,
      httpPort: options.httpPort,
      streamPollIntervalMs: options.streamPollIntervalMs,
      ...options.runtime,
    });
    const apiUrl = runtime.apiUrl;
    if (apiUrl === undefined) throw new Error('no function has an http trigger');
    return { cloud, clients, resources, env, runtime, apiUrl, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** The two lines that point any Tinker client (the SDK, curl) at a running stack. */
export function clientExportLines(apiUrl: string, apiKey: string): string[] {
  return [`export TINKER_BASE_URL=${apiUrl}`, `export TINKER_API_KEY=${apiKey}`];
}
