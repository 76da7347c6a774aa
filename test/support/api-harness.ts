import { ScanCommand } from '@aws-sdk/client-dynamodb';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { type LocalRuntime, startLocalRuntime } from '../../local/runtime/lambda-runtime.js';
import { type FunctionId, type TableId, topology } from '../../shared/base/topology.js';
import { TinkerClient } from '../../shared/client/tinker-client.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import { setupTestCloud, type TestCloud } from './cloud.js';

/**
 * The API over real HTTP for integration suites: a fresh set of resources on the local cloud and the
 * local runtime serving the `api` function only (no scheduler or worker, so futures stay pending
 * unless a test ends them with the futures repository).
 */
export interface ApiHarness {
  readonly cloud: TestCloud;
  readonly runtime: LocalRuntime;
  readonly url: string;
  client(apiKey?: string): TinkerClient;
  /** A new tenant with its own key and client. */
  tenant(name: string): Promise<{ readonly key: string; readonly client: TinkerClient }>;
  /** Items per table and objects in the bucket: what "nothing was stored" is checked against. */
  counts(): Promise<Counts>;
  stop(): Promise<void>;
}

export type Counts = Record<TableId | 'objects', number>;

const QUOTA_RECORDS_FILTER = {
  FilterExpression: 'NOT (begins_with(pk, :rate) OR begins_with(pk, :polls))',
  ExpressionAttributeValues: { ':rate': { S: 'rate#' }, ':polls': { S: 'polls#' } },
};

/**
 * `functions`: the api alone by default; a suite that needs futures to run adds the scheduler and the
 * worker. `wakeUps: false` leaves the commit signal out, so polls re-read as they do on AWS.
 */
export async function startApiHarness(
  env: Record<string, string> = {},
  options: { readonly functions?: readonly FunctionId[]; readonly wakeUps?: boolean } = {},
): Promise<ApiHarness> {
  const cloud = await setupTestCloud();
  const runtime = await startLocalRuntime({
    topology,
    env: { ...cloud.env, LONG_POLL_SECONDS: '1', ...env },
    functions: options.functions ?? ['api'],
    ...(options.wakeUps === undefined ? {} : { wakeUps: options.wakeUps }),
    ...(options.functions === undefined
      ? {}
      : { queueUrls: cloud.names.queueUrls, streamPollIntervalMs: 50 }),
  });
  const url = runtime.apiUrl;
  if (url === undefined) throw new Error('the api function has no http trigger');
  const client = (apiKey?: string) => new TinkerClient({ baseUrl: url, ...(apiKey ? { apiKey } : {}) });
  return {
    cloud,
    runtime,
    url,
    client,
    tenant: async (name) => {
      const key = await createApiKey(cloud.clients.doc, cloud.names.tables.registry, name);
      return { key, client: client(key) };
    },
    counts: async () => {
      const counts: Partial<Counts> = {};
      for (const id of Object.keys(topology.tables) as TableId[]) {
        let total = 0;
        let start: Record<string, never> | undefined;
        do {
          const page = await cloud.clients.dynamo.send(
            new ScanCommand({
              TableName: cloud.names.tables[id],
              Select: 'COUNT',
              ExclusiveStartKey: start,
              // Quota counters (shared/repositories/quotas.ts) count every authenticated submit,
              // refused or not: bookkeeping of the edge, not something a request stored.
              ...(id === 'registry' ? QUOTA_RECORDS_FILTER : {}),
            }),
          );
          total += page.Count ?? 0;
          start = page.LastEvaluatedKey as Record<string, never> | undefined;
        } while (start);
        counts[id] = total;
      }
      let objects = 0;
      let token: string | undefined;
      do {
        const page = await cloud.clients.s3.send(
          new ListObjectsV2Command({ Bucket: cloud.names.bucket, ContinuationToken: token }),
        );
        objects += page.KeyCount ?? page.Contents?.length ?? 0;
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (token);
      counts.objects = objects;
      return counts as Counts;
    },
    stop: () => runtime.stop(),
  };
}
