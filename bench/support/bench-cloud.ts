import { randomBytes } from 'node:crypto';
import {
  CreateTableCommand,
  DeleteTableCommand,
  DynamoDBClient,
  UpdateTimeToLiveCommand,
} from '@aws-sdk/client-dynamodb';
import { ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import { type CloudEndpoints, startLocalCloud } from '../../local/cloud/cloud.js';
import {
  createTableInputs,
  envFor,
  LOCAL_CREDENTIALS,
  LOCAL_REGION,
  type ProvisionedResources,
  provisionResources,
} from '../../local/cloud/resources.js';
import { type AwsClients, dynamoClientSettings } from '../../shared/aws/clients.js';
import { physicalName, type TableId, topology } from '../../shared/base/topology.js';

/**
 * The local cloud as a benchmark uses it: started once per benchmark, with fresh resources per
 * measured run (so no run reads what an earlier one left), and always stopped, also on Ctrl-C.
 */

export interface BenchTable {
  readonly tableName: string;
  /** Deletes the table (DynamoDB Local then frees its memory). */
  drop(): Promise<void>;
}

export interface BenchCloud {
  readonly endpoints: CloudEndpoints;
  /** Pid of the DynamoDB Local JVM (to read the CPU time the emulator spends). */
  readonly dynamodbPid: number;
  /** Unmetered clients for setup and cleanup. */
  readonly admin: AwsClients;
  /** A new DynamoDB client for measured work (callers attach meters and delays to it). */
  newDynamoClient(): DynamoDBClient;
  /** One table of the topology, created under a new prefix with its TTL attribute. */
  freshTable(id: TableId): Promise<BenchTable>;
  /** The whole topology under a new prefix, and the environment a function would get for it. */
  provisionAll(): Promise<{ readonly names: ProvisionedResources; readonly env: Record<string, string> }>;
  stop(): Promise<void>;
}

function uniquePrefix(): string {
  return `b${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
}

export async function startBenchCloud(): Promise<BenchCloud> {
  const cloud = await startLocalCloud();
  const admin = localAwsClients(cloud.endpoints);
  return {
    endpoints: cloud.endpoints,
    dynamodbPid: cloud.dynamodbPid,
    admin,
    newDynamoClient: () =>
      new DynamoDBClient({
        ...dynamoClientSettings,
        region: LOCAL_REGION,
        credentials: LOCAL_CREDENTIALS,
        endpoint: cloud.endpoints.dynamodb,
      }),
    freshTable: async (id) => {
      const prefix = uniquePrefix();
      const tableName = physicalName(prefix, topology.tables[id].name);
      const input = createTableInputs(topology, prefix).find(
        (candidate) => candidate.TableName === tableName,
      );
      if (input === undefined) throw new Error(`topology declares no table ${id}`);
      await admin.dynamo.send(new CreateTableCommand(input));
      const ttlAttribute = topology.tables[id].timeToLiveAttribute;
      if (ttlAttribute !== undefined) {
        await admin.dynamo.send(
          new UpdateTimeToLiveCommand({
            TableName: tableName,
            TimeToLiveSpecification: { Enabled: true, AttributeName: ttlAttribute },
          }),
        );
      }
      return {
        tableName,
        drop: async () => {
          await admin.dynamo.send(new DeleteTableCommand({ TableName: tableName }));
        },
      };
    },
    provisionAll: async () => {
      const names = await provisionResources(topology, uniquePrefix(), admin);
      return { names, env: envFor(topology, names, cloud.endpoints) };
    },
    stop: () => cloud.stop(),
  };
}

/**
 * Runs `body` with a started bench cloud and stops the cloud however `body` ends, including on
 * SIGINT/SIGTERM (the JVM's watchdog would also stop it once this process is gone).
 */
export async function withBenchCloud<T>(body: (cloud: BenchCloud) => Promise<T>): Promise<T> {
  const cloud = await startBenchCloud();
  const onSignal = (signal: NodeJS.Signals): void => {
    void cloud.stop().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    return await body(cloud);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cloud.stop();
  }
}

/** How many work items the scheduler has written (`work/` objects in the data bucket). */
export async function countWorkItems(s3: S3Client, bucket: string): Promise<number> {
  let count = 0;
  let token: string | undefined;
  do {
    const page = await s3.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: 'work/', ContinuationToken: token }),
    );
    count += page.KeyCount ?? 0;
    token = page.NextContinuationToken;
  } while (token !== undefined);
  return count;
}
