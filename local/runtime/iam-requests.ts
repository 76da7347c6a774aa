import type { IamRequest, IamResource } from '../../shared/base/grants.js';
import type { QueueId, TableId, Topology } from '../../shared/base/topology.js';
import { type Input, keyAttribute, list, record } from '../cloud/command-input.js';

/**
 * The IAM authorisations AWS makes for one SDK call, with the resources named by their topology ids.
 * Pure: the local runtime's grant enforcement (`grant-enforcement.ts`) asks `grantsAllow` about
 * each. Operations not listed map to `<service>:<Operation>` on the resource their input names, which
 * no topology action grants: a call the project has never made is denied until the mapping and a
 * grant both say what it needs.
 */

export type AwsService = 'dynamodb' | 's3' | 'sqs';

/** An IAM request and the ARN AWS would name in its denial. */
export interface LocalIamRequest extends IamRequest {
  readonly arn: string;
}

/** Physical names (and queue URLs) of the provisioned resources, back to their topology ids. */
export interface ResourceIndex {
  readonly region: string;
  readonly account: string;
  readonly tables: ReadonlyMap<string, TableId>;
  /** Each table's partition key attribute: what `dynamodb:LeadingKeys` reads from an item's key. */
  readonly partitionKeys: Readonly<Record<TableId, string>>;
  readonly bucket: string | undefined;
  /** By URL and by queue name (the URL's last segment, what GetQueueUrl is asked with). */
  readonly queues: ReadonlyMap<string, QueueId>;
}

export const LOCAL_ACCOUNT = '000000000000';

/**
 * Builds the index from the functions' environment (each resource's declared variable, as `envFor`
 * writes it) and the queue URLs of queues that declare no variable.
 */
export function resourceIndex(
  topology: Topology,
  env: Readonly<Record<string, string | undefined>>,
  queueUrls: Readonly<Partial<Record<QueueId, string>>> = {},
  region = 'us-east-1',
): ResourceIndex {
  const tables = new Map<string, TableId>();
  for (const id of Object.keys(topology.tables) as TableId[]) {
    const name = env[topology.tables[id].envVar];
    if (name !== undefined && name !== '') tables.set(name, id);
  }
  const queues = new Map<string, QueueId>();
  for (const id of Object.keys(topology.queues) as QueueId[]) {
    const envVar = topology.queues[id].envVar;
    const url = queueUrls[id] ?? (envVar === undefined ? undefined : env[envVar]);
    if (url === undefined || url === '') continue;
    queues.set(url, id);
    queues.set(queueNameOf(url), id);
  }
  const partitionKeys = Object.fromEntries(
    (Object.keys(topology.tables) as TableId[]).map((id) => [id, topology.tables[id].partitionKey.name]),
  ) as Record<TableId, string>;
  const bucket = env[topology.bucket.envVar];
  return {
    region,
    account: LOCAL_ACCOUNT,
    tables,
    partitionKeys,
    bucket: bucket === '' ? undefined : bucket,
    queues,
  };
}

export function iamRequestsFor(
  service: AwsService,
  operation: string,
  input: Input,
  index: ResourceIndex,
): LocalIamRequest[] {
  switch (service) {
    case 'dynamodb':
      return dynamoRequests(operation, input, index);
    case 's3':
      return s3Requests(operation, input, index);
    case 'sqs':
      return sqsRequests(operation, input, index);
  }
}

const DYNAMO_WRITE_ITEMS: Readonly<Record<string, string>> = {
  Put: 'dynamodb:PutItem',
  Update: 'dynamodb:UpdateItem',
  Delete: 'dynamodb:DeleteItem',
  ConditionCheck: 'dynamodb:ConditionCheckItem',
};

/**
 * Each request carries the `dynamodb:LeadingKeys` of its table, as IAM reads them: the partition
 * key of the item an item operation names (`Key`, or a put's `Item`), every key of a batch's table
 * (one request per table, all its keys), each transaction item's own, and a Query's from the
 * equality on the partition key in its `KeyConditionExpression`. Keys are read from document-client
 * input (plain values) or low-level input (`{ S: ... }`), whichever the call was made with.
 */
function dynamoRequests(operation: string, input: Input, index: ResourceIndex): LocalIamRequest[] {
  switch (operation) {
    case 'BatchGetItem':
      return Object.entries(record(input.RequestItems)).map(([name, body]) =>
        onTable(`dynamodb:${operation}`, name, index, (keyName) =>
          list(record(body).Keys).map((key) => keyValue(record(key)[keyName])),
        ),
      );
    case 'BatchWriteItem':
      return Object.entries(record(input.RequestItems)).map(([name, body]) =>
        onTable(`dynamodb:${operation}`, name, index, (keyName) =>
          list(body).map((write) => {
            const { PutRequest, DeleteRequest } = record(write);
            const item = PutRequest === undefined ? record(DeleteRequest).Key : record(PutRequest).Item;
            return keyValue(record(item)[keyName]);
          }),
        ),
      );
    case 'TransactWriteItems':
      // Authorised item by item, each as the single-item action it performs, on its own key.
      return list(input.TransactItems).flatMap((item) =>
        Object.entries(record(item)).flatMap(([kind, body]) => {
          const action = DYNAMO_WRITE_ITEMS[kind] ?? `dynamodb:${kind}`;
          return [onTable(action, string(record(body).TableName), index, itemKey(record(body)))];
        }),
      );
    case 'TransactGetItems':
      return list(input.TransactItems).map((item) => {
        const get = record(record(item).Get);
        return onTable('dynamodb:GetItem', string(get.TableName), index, itemKey(get));
      });
    case 'Query':
    case 'Scan': {
      const indexName = input.IndexName;
      const keys = operation === 'Query' && typeof indexName !== 'string' ? queryKey(input) : undefined;
      const request = onTable(`dynamodb:${operation}`, string(input.TableName), index, keys);
      if (typeof indexName !== 'string' || request.resource.kind !== 'table') return [request];
      return [
        {
          action: request.action,
          resource: { kind: 'index', table: request.resource.table, index: indexName },
          arn: `${request.arn}/index/${indexName}`,
        },
      ];
    }
    default:
      return [onTable(`dynamodb:${operation}`, string(input.TableName), index, itemKey(input))];
  }
}

/** Reads the leading keys of a request on a table, given that table's partition key attribute. */
type LeadingKeysOf = (partitionKey: string) => readonly (string | undefined)[];

function onTable(
  action: string,
  nameOrArn: string,
  index: ResourceIndex,
  leadingKeysOf?: LeadingKeysOf,
): LocalIamRequest {
  const name = nameOrArn.startsWith('arn:') ? nameOrArn.slice(nameOrArn.indexOf(':table/') + 7) : nameOrArn;
  const table = index.tables.get(name);
  const arn = `arn:aws:dynamodb:${index.region}:${index.account}:table/${name}`;
  if (table === undefined) return { action, resource: { kind: 'undeclared', name }, arn };
  const keys = leadingKeysOf?.(index.partitionKeys[table]);
  // A key that cannot be read leaves the request without leading keys: no keyed grant allows it.
  const leadingKeys =
    keys === undefined || keys.length === 0 || keys.some((key) => key === undefined)
      ? undefined
      : (keys as readonly string[]);
  return { action, resource: { kind: 'table', table }, arn, ...(leadingKeys ? { leadingKeys } : {}) };
}

/** The partition key of the item a single-item operation (or transaction item) names. */
function itemKey(body: Input): LeadingKeysOf {
  return (partitionKey) => {
    const item = body.Key ?? body.Item;
    return item === undefined ? [] : [keyValue(record(item)[partitionKey])];
  };
}

/**
 * A Query's partition key value: the `<key> = :value` clause of its KeyConditionExpression (the key
 * possibly a `#name`, the clause possibly in parentheses), resolved through the expression's names
 * and values.
 */
function queryKey(input: Input): LeadingKeysOf {
  return (partitionKey) => {
    const names = record(input.ExpressionAttributeNames);
    const values = record(input.ExpressionAttributeValues);
    for (const clause of string(input.KeyConditionExpression).split(/\s+AND\s+/i)) {
      const match = /^\(*\s*([#\w.-]+)\s*=\s*(:[\w]+)\s*\)*$/.exec(clause.trim());
      if (match === null) continue;
      const [, attribute = '', placeholder = ''] = match;
      const resolved = attribute.startsWith('#') ? names[attribute] : attribute;
      if (resolved === partitionKey) return [keyValue(values[placeholder])];
    }
    return [];
  };
}

/** A key attribute's value as `dynamodb:LeadingKeys` holds it (strings and numbers as text). */
function keyValue(value: unknown): string | undefined {
  const attribute = keyAttribute(value);
  return attribute === undefined ? undefined : 'S' in attribute ? attribute.S : attribute.N;
}

/** S3 operations whose IAM action is not `s3:<Operation>` on the object the input names. */
const S3_OBJECT_ACTIONS: Readonly<Record<string, string>> = {
  HeadObject: 's3:GetObject',
  CreateMultipartUpload: 's3:PutObject',
  UploadPart: 's3:PutObject',
  CompleteMultipartUpload: 's3:PutObject',
};

function s3Requests(operation: string, input: Input, index: ResourceIndex): LocalIamRequest[] {
  const bucket = string(input.Bucket);
  switch (operation) {
    case 'ListObjectsV2':
    case 'ListObjects': {
      const prefix = typeof input.Prefix === 'string' ? input.Prefix : undefined;
      const resource: IamResource =
        bucket === index.bucket
          ? prefix === undefined
            ? { kind: 'bucket' }
            : { kind: 'bucket', prefix }
          : { kind: 'undeclared', name: bucket };
      return [{ action: 's3:ListBucket', resource, arn: `arn:aws:s3:::${bucket}` }];
    }
    case 'CopyObject':
    case 'UploadPartCopy': {
      // Authorised as a read of the source (`CopySource`, `<bucket>/<key>` URL-encoded) and a write.
      const source = decodeURIComponent(string(input.CopySource).replace(/^\//, ''));
      const slash = source.indexOf('/');
      return [
        onObject('s3:GetObject', source.slice(0, slash), source.slice(slash + 1), index),
        onObject('s3:PutObject', bucket, string(input.Key), index),
      ];
    }
    case 'DeleteObjects':
      // Authorised key by key as DeleteObject.
      return list(record(input.Delete).Objects).map((object) =>
        onObject('s3:DeleteObject', bucket, string(record(object).Key), index),
      );
    default:
      if (input.Key === undefined) {
        return [
          {
            action: `s3:${operation}`,
            resource: { kind: 'undeclared', name: bucket },
            arn: `arn:aws:s3:::${bucket}`,
          },
        ];
      }
      return [onObject(S3_OBJECT_ACTIONS[operation] ?? `s3:${operation}`, bucket, string(input.Key), index)];
  }
}

function onObject(action: string, bucket: string, key: string, index: ResourceIndex): LocalIamRequest {
  const resource: IamResource =
    bucket === index.bucket ? { kind: 'object', key } : { kind: 'undeclared', name: `${bucket}/${key}` };
  return { action, resource, arn: `arn:aws:s3:::${bucket}/${key}` };
}

/** Batch operations are authorised as their single-message action. */
const SQS_ACTIONS: Readonly<Record<string, string>> = {
  SendMessageBatch: 'sqs:SendMessage',
  DeleteMessageBatch: 'sqs:DeleteMessage',
  ChangeMessageVisibilityBatch: 'sqs:ChangeMessageVisibility',
};

function sqsRequests(operation: string, input: Input, index: ResourceIndex): LocalIamRequest[] {
  const locator = typeof input.QueueUrl === 'string' ? input.QueueUrl : string(input.QueueName);
  const queue = index.queues.get(locator);
  const name = queueNameOf(locator);
  return [
    {
      action: SQS_ACTIONS[operation] ?? `sqs:${operation}`,
      resource: queue === undefined ? { kind: 'undeclared', name: locator } : { kind: 'queue', queue },
      arn: `arn:aws:sqs:${index.region}:${index.account}:${name}`,
    },
  ];
}

function queueNameOf(urlOrName: string): string {
  return urlOrName.slice(urlOrName.lastIndexOf('/') + 1);
}

function string(value: unknown): string {
  return typeof value === 'string' ? value : '';
}
