import {
  type AttributeDefinition,
  CreateTableCommand,
  type CreateTableCommandInput,
  DescribeTableCommand,
  DescribeTimeToLiveCommand,
  type DynamoDBClient,
  type KeySchemaElement,
  UpdateTableCommand,
  UpdateTimeToLiveCommand,
} from '@aws-sdk/client-dynamodb';
import { CreateBucketCommand, type S3Client } from '@aws-sdk/client-s3';
import { CreateQueueCommand, GetQueueAttributesCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { isAwsError } from '../../shared/base/errors.js';
import {
  type KeyAttribute,
  type Projection,
  physicalName,
  type QueueId,
  type TableDecl,
  type TableId,
  type Topology,
} from '../../shared/base/topology.js';
import type { CloudEndpoints } from './cloud.js';

/** Physical names of everything the topology declares, under one prefix. */
export interface ResourceNames {
  readonly tables: Readonly<Record<TableId, string>>;
  readonly bucket: string;
  readonly queues: Readonly<Record<QueueId, string>>;
}

/** What provisioning learned from the cloud: queue URLs and ARNs, table stream ARNs. */
export interface ProvisionedResources extends ResourceNames {
  readonly queueUrls: Readonly<Record<QueueId, string>>;
  readonly queueArns: Readonly<Record<QueueId, string>>;
  readonly streamArns: Readonly<Partial<Record<TableId, string>>>;
}

export interface ProvisioningClients {
  readonly dynamo: DynamoDBClient;
  readonly s3: S3Client;
  readonly sqs: SQSClient;
}

function mapRecord<K extends string, V, R>(
  record: Readonly<Record<K, V>>,
  map: (value: V) => R,
): Record<K, R> {
  return Object.fromEntries(Object.entries(record).map(([key, value]) => [key, map(value as V)])) as Record<
    K,
    R
  >;
}

export function resourceNames(topology: Topology, prefix: string): ResourceNames {
  return {
    tables: mapRecord(topology.tables, (table) => physicalName(prefix, table.name)),
    bucket: physicalName(prefix, topology.bucket.name),
    queues: mapRecord(topology.queues, (queue) => physicalName(prefix, queue.name)),
  };
}

function keySchema(partitionKey: KeyAttribute, sortKey: KeyAttribute | undefined): KeySchemaElement[] {
  const schema: KeySchemaElement[] = [{ AttributeName: partitionKey.name, KeyType: 'HASH' }];
  if (sortKey !== undefined) schema.push({ AttributeName: sortKey.name, KeyType: 'RANGE' });
  return schema;
}

/** Every key attribute of the table and its indexes, once each (DynamoDB rejects duplicates). */
function attributeDefinitions(table: TableDecl): AttributeDefinition[] {
  const keys = [
    table.partitionKey,
    table.sortKey,
    ...table.indexes.flatMap((i) => [i.partitionKey, i.sortKey]),
  ];
  const byName = new Map<string, AttributeDefinition>();
  for (const key of keys) {
    if (key === undefined || byName.has(key.name)) continue;
    byName.set(key.name, { AttributeName: key.name, AttributeType: key.type });
  }
  return [...byName.values()];
}

function projection(decl: Projection): { ProjectionType: Projection['type']; NonKeyAttributes?: string[] } {
  if (decl.type === 'INCLUDE')
    return { ProjectionType: 'INCLUDE', NonKeyAttributes: [...decl.nonKeyAttributes] };
  return { ProjectionType: decl.type };
}

/** The CreateTable requests for the topology's tables, in declaration order. Pure. */
export function createTableInputs(topology: Topology, prefix: string): CreateTableCommandInput[] {
  return Object.values<TableDecl>(topology.tables).map((table) => {
    const input: CreateTableCommandInput = {
      TableName: physicalName(prefix, table.name),
      BillingMode: 'PAY_PER_REQUEST',
      KeySchema: keySchema(table.partitionKey, table.sortKey),
      AttributeDefinitions: attributeDefinitions(table),
    };
    if (table.indexes.length > 0) {
      input.GlobalSecondaryIndexes = table.indexes.map((index) => ({
        IndexName: index.name,
        KeySchema: keySchema(index.partitionKey, index.sortKey),
        Projection: projection(index.projection),
      }));
    }
    if (table.stream !== undefined) {
      input.StreamSpecification = { StreamEnabled: true, StreamViewType: table.stream };
    }
    return input;
  });
}

async function createTables(
  topology: Topology,
  prefix: string,
  dynamo: DynamoDBClient,
): Promise<Partial<Record<TableId, string>>> {
  const ids = Object.keys(topology.tables) as TableId[];
  const inputs = createTableInputs(topology, prefix);
  const streamArns: Partial<Record<TableId, string>> = {};
  await Promise.all(
    inputs.map(async (input, position) => {
      const id = ids[position] as TableId;
      const streamArn = await ensureTable(input, dynamo);
      if (streamArn !== undefined) streamArns[id] = streamArn;
      const ttlAttribute = topology.tables[id].timeToLiveAttribute;
      if (ttlAttribute !== undefined && !(await hasTimeToLive(input.TableName, ttlAttribute, dynamo))) {
        await dynamo.send(
          new UpdateTimeToLiveCommand({
            TableName: input.TableName,
            TimeToLiveSpecification: { Enabled: true, AttributeName: ttlAttribute },
          }),
        );
      }
    }),
  );
  return streamArns;
}

/**
 * Creates the table, or reuses the one a persistent local cloud kept from an earlier start. A kept
 * table made before the topology declared its stream or an index gets them; returns the stream's ARN.
 */
async function ensureTable(
  input: CreateTableCommandInput,
  dynamo: DynamoDBClient,
): Promise<string | undefined> {
  try {
    const created = await dynamo.send(new CreateTableCommand(input));
    return created.TableDescription?.LatestStreamArn;
  } catch (error) {
    if (!isAwsError(error, 'ResourceInUseException')) throw error;
  }
  const { Table: table } = await dynamo.send(new DescribeTableCommand({ TableName: input.TableName }));
  await addMissingIndexes(
    input,
    new Set(table?.GlobalSecondaryIndexes?.map((index) => index.IndexName)),
    dynamo,
  );
  const wanted = input.StreamSpecification;
  const current = table?.StreamSpecification;
  if (
    wanted === undefined ||
    (current?.StreamEnabled === true && current.StreamViewType === wanted.StreamViewType)
  ) {
    return table?.LatestStreamArn;
  }
  if (current?.StreamEnabled === true) {
    // A stream's view cannot change in place: turn it off, then on with the declared view.
    await dynamo.send(
      new UpdateTableCommand({ TableName: input.TableName, StreamSpecification: { StreamEnabled: false } }),
    );
  }
  const updated = await dynamo.send(
    new UpdateTableCommand({ TableName: input.TableName, StreamSpecification: wanted }),
  );
  return updated.TableDescription?.LatestStreamArn;
}

/** How long a kept table's new index may take to build before the start gives up. */
const INDEX_BUILD_TIMEOUT_MS = 120_000;

/**
 * One UpdateTable per index, each waited for until it is active: DynamoDB builds one index at a time,
 * and a handler must not query one still backfilling. The index is built from the items already
 * there; records written before their listing keys existed (C1) simply stay out of it.
 */
async function addMissingIndexes(
  input: CreateTableCommandInput,
  existing: ReadonlySet<string | undefined>,
  dynamo: DynamoDBClient,
): Promise<void> {
  for (const index of input.GlobalSecondaryIndexes ?? []) {
    if (existing.has(index.IndexName)) continue;
    const keyNames = new Set(index.KeySchema?.map((key) => key.AttributeName));
    await dynamo.send(
      new UpdateTableCommand({
        TableName: input.TableName,
        AttributeDefinitions: input.AttributeDefinitions?.filter((attribute) =>
          keyNames.has(attribute.AttributeName),
        ),
        GlobalSecondaryIndexUpdates: [{ Create: index }],
      }),
    );
    await waitForIndex(input.TableName, index.IndexName, dynamo);
  }
}

async function waitForIndex(
  tableName: string | undefined,
  indexName: string | undefined,
  dynamo: DynamoDBClient,
): Promise<void> {
  const deadline = Date.now() + INDEX_BUILD_TIMEOUT_MS;
  for (;;) {
    const { Table: table } = await dynamo.send(new DescribeTableCommand({ TableName: tableName }));
    const index = table?.GlobalSecondaryIndexes?.find((candidate) => candidate.IndexName === indexName);
    if (table?.TableStatus === 'ACTIVE' && index?.IndexStatus === 'ACTIVE') return;
    if (Date.now() > deadline) throw new Error(`index ${indexName} of ${tableName} is still not active`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function hasTimeToLive(
  tableName: string | undefined,
  attribute: string,
  dynamo: DynamoDBClient,
): Promise<boolean> {
  const answer = await dynamo.send(new DescribeTimeToLiveCommand({ TableName: tableName }));
  const description = answer.TimeToLiveDescription;
  return description?.TimeToLiveStatus === 'ENABLED' && description.AttributeName === attribute;
}

/** Creates queues so that every dead-letter target exists (and has an ARN) before its source. */
async function createQueues(
  topology: Topology,
  names: ResourceNames,
  sqs: SQSClient,
): Promise<{ urls: Record<QueueId, string>; arns: Record<QueueId, string> }> {
  const ids = Object.keys(topology.queues) as QueueId[];
  const ordered = [
    ...ids.filter((id) => topology.queues[id].deadLetter === undefined),
    ...ids.filter((id) => topology.queues[id].deadLetter !== undefined),
  ];
  const urls: Partial<Record<QueueId, string>> = {};
  const arns: Partial<Record<QueueId, string>> = {};
  for (const id of ordered) {
    const decl = topology.queues[id];
    const attributes: Record<string, string> = {
      VisibilityTimeout: String(decl.visibilityTimeoutSeconds),
      MessageRetentionPeriod: String(decl.retentionSeconds),
    };
    if (decl.deadLetter !== undefined) {
      const targetArn = arns[decl.deadLetter.queue];
      if (targetArn === undefined)
        throw new Error(`dead-letter queue ${decl.deadLetter.queue} of ${id} is undeclared`);
      attributes.RedrivePolicy = JSON.stringify({
        deadLetterTargetArn: targetArn,
        maxReceiveCount: decl.deadLetter.maxReceiveCount,
      });
    }
    const created = await sqs.send(
      new CreateQueueCommand({ QueueName: names.queues[id], Attributes: attributes }),
    );
    if (created.QueueUrl === undefined)
      throw new Error(`CreateQueue returned no URL for ${names.queues[id]}`);
    const described = await sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: created.QueueUrl, AttributeNames: ['QueueArn'] }),
    );
    const arn = described.Attributes?.QueueArn;
    if (arn === undefined) throw new Error(`GetQueueAttributes returned no ARN for ${names.queues[id]}`);
    urls[id] = created.QueueUrl;
    arns[id] = arn;
  }
  return { urls: urls as Record<QueueId, string>, arns: arns as Record<QueueId, string> };
}

/**
 * Creates the topology's tables (with TTL), bucket and queues (with redrive) under `prefix`, reusing
 * any that already exist (a persistent local cloud keeps them across starts).
 */
export async function provisionResources(
  topology: Topology,
  prefix: string,
  clients: ProvisioningClients,
): Promise<ProvisionedResources> {
  const names = resourceNames(topology, prefix);
  const [streamArns, queues] = await Promise.all([
    createTables(topology, prefix, clients.dynamo),
    createQueues(topology, names, clients.sqs),
    clients.s3.send(new CreateBucketCommand({ Bucket: names.bucket })).catch((error: unknown) => {
      // A bucket kept from an earlier start is reused.
      if (!isAwsError(error, 'BucketAlreadyOwnedByYou')) throw error;
    }),
  ]);
  return { ...names, queueUrls: queues.urls, queueArns: queues.arns, streamArns };
}

export const LOCAL_REGION = 'us-east-1';
export const LOCAL_CREDENTIALS = { accessKeyId: 'local', secretAccessKey: 'local' } as const;

/**
 * The environment a function gets on the local cloud: resource variables named in the topology,
 * the topology's settings, and the SDK's standard endpoint variables (so no code names a host).
 * The local runtime runs every function in one process, so this is one environment for all of them:
 * a queue's URL is in it only when some function is granted that queue, as on AWS, where a function
 * learns a queue's URL only through its own grant (`cdk/constructs/grants.ts`). Each handler's
 * `config()` then sees only its own function's resource variables (`local/runtime/env-scope.ts`).
 */
export function envFor(
  topology: Topology,
  resources: ResourceNames & { readonly queueUrls: Readonly<Record<QueueId, string>> },
  endpoints: CloudEndpoints,
): Record<string, string> {
  const env: Record<string, string> = { ...topology.settings };
  for (const id of Object.keys(topology.tables) as TableId[]) {
    env[topology.tables[id].envVar] = resources.tables[id];
  }
  env[topology.bucket.envVar] = resources.bucket;
  const granted = new Set(
    Object.values(topology.functions).flatMap((fn) =>
      (Object.keys(fn.grants.queues) as QueueId[]).filter((id) => (fn.grants.queues[id]?.length ?? 0) > 0),
    ),
  );
  for (const id of Object.keys(topology.queues) as QueueId[]) {
    const envVar = topology.queues[id].envVar;
    if (envVar !== undefined && granted.has(id)) env[envVar] = resources.queueUrls[id];
  }
  return {
    ...env,
    S3_FORCE_PATH_STYLE: 'true',
    AWS_ENDPOINT_URL_DYNAMODB: endpoints.dynamodb,
    AWS_ENDPOINT_URL_DYNAMODB_STREAMS: endpoints.dynamodb,
    AWS_ENDPOINT_URL_S3: endpoints.s3,
    AWS_ENDPOINT_URL_SQS: endpoints.sqs,
    AWS_REGION: LOCAL_REGION,
    AWS_ACCESS_KEY_ID: LOCAL_CREDENTIALS.accessKeyId,
    AWS_SECRET_ACCESS_KEY: LOCAL_CREDENTIALS.secretAccessKey,
  };
}
