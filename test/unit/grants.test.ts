import { describe, expect, it } from 'vitest';
import { iamRequestsFor, type ResourceIndex, resourceIndex } from '../../local/iam-requests.js';
import { grantsAllow, type IamRequest } from '../../shared/grants.js';
import { type FunctionGrants, type FunctionId, LIVE_INDEX, topology } from '../../shared/topology.js';
import { localEnvFixture } from './local-env-fixture.js';

/** Names as `envFor` provisions them under the prefix `p`. */
const { env, queueUrls } = localEnvFixture();
const index: ResourceIndex = resourceIndex(topology, env, queueUrls);

/** `action on-what`, for compact expectations. */
function describeRequest({ action, resource }: IamRequest): string {
  switch (resource.kind) {
    case 'table':
      return `${action} ${resource.table}`;
    case 'index':
      return `${action} ${resource.table}/index/${resource.index}`;
    case 'object':
      return `${action} ${resource.key}`;
    case 'bucket':
      return `${action} bucket${resource.prefix === undefined ? '' : ` prefix=${resource.prefix}`}`;
    case 'queue':
      return `${action} ${resource.queue}`;
    case 'undeclared':
      return `${action} undeclared:${resource.name}`;
  }
}

/** Each request a call needs. */
function needs(
  service: 'dynamodb' | 's3' | 'sqs',
  operation: string,
  input: Record<string, unknown>,
): string[] {
  return iamRequestsFor(service, operation, input, index).map(describeRequest);
}

describe('the IAM requests of an SDK call', () => {
  it('maps DynamoDB item, batch and query operations to their actions on the table or the index', () => {
    expect(needs('dynamodb', 'GetItem', { TableName: 'p-futures' })).toEqual(['dynamodb:GetItem futures']);
    expect(needs('dynamodb', 'PutItem', { TableName: 'p-registry' })).toEqual(['dynamodb:PutItem registry']);
    expect(needs('dynamodb', 'UpdateItem', { TableName: 'p-models' })).toEqual([
      'dynamodb:UpdateItem models',
    ]);
    expect(needs('dynamodb', 'DeleteItem', { TableName: 'p-registry' })).toEqual([
      'dynamodb:DeleteItem registry',
    ]);
    expect(needs('dynamodb', 'Query', { TableName: 'p-futures' })).toEqual(['dynamodb:Query futures']);
    expect(needs('dynamodb', 'Query', { TableName: 'p-futures', IndexName: LIVE_INDEX })).toEqual([
      `dynamodb:Query futures/index/${LIVE_INDEX}`,
    ]);
    expect(needs('dynamodb', 'Scan', { TableName: 'p-models' })).toEqual(['dynamodb:Scan models']);
    expect(needs('dynamodb', 'BatchGetItem', { RequestItems: { 'p-models': {}, 'p-registry': {} } })).toEqual(
      ['dynamodb:BatchGetItem models', 'dynamodb:BatchGetItem registry'],
    );
    expect(needs('dynamodb', 'BatchWriteItem', { RequestItems: { 'p-prefixes': [] } })).toEqual([
      'dynamodb:BatchWriteItem prefixes',
    ]);
    // A table named by its ARN is the same table.
    expect(
      needs('dynamodb', 'GetItem', { TableName: 'arn:aws:dynamodb:us-east-1:000000000000:table/p-models' }),
    ).toEqual(['dynamodb:GetItem models']);
  });

  it('authorises a transaction item by item, each as the single-item action it performs', () => {
    expect(
      needs('dynamodb', 'TransactWriteItems', {
        TransactItems: [
          { Put: { TableName: 'p-futures' } },
          { Update: { TableName: 'p-models' } },
          { Delete: { TableName: 'p-registry' } },
          { ConditionCheck: { TableName: 'p-registry' } },
        ],
      }),
    ).toEqual([
      'dynamodb:PutItem futures',
      'dynamodb:UpdateItem models',
      'dynamodb:DeleteItem registry',
      'dynamodb:ConditionCheckItem registry',
    ]);
    expect(
      needs('dynamodb', 'TransactGetItems', { TransactItems: [{ Get: { TableName: 'p-futures' } }] }),
    ).toEqual(['dynamodb:GetItem futures']);
  });

  it('names any other operation or table as itself, which nothing grants', () => {
    expect(needs('dynamodb', 'DescribeTable', { TableName: 'p-models' })).toEqual([
      'dynamodb:DescribeTable models',
    ]);
    expect(needs('dynamodb', 'GetItem', { TableName: 'other-futures' })).toEqual([
      'dynamodb:GetItem undeclared:other-futures',
    ]);
  });

  it('maps S3 calls to object actions on their key, and a listing to ListBucket with its prefix', () => {
    expect(needs('s3', 'GetObject', { Bucket: 'p-data', Key: 'payloads/a.json' })).toEqual([
      's3:GetObject payloads/a.json',
    ]);
    expect(needs('s3', 'HeadObject', { Bucket: 'p-data', Key: 'state/m' })).toEqual(['s3:GetObject state/m']);
    expect(needs('s3', 'PutObject', { Bucket: 'p-data', Key: 'work/w' })).toEqual(['s3:PutObject work/w']);
    for (const operation of ['CreateMultipartUpload', 'UploadPart', 'CompleteMultipartUpload']) {
      expect(needs('s3', operation, { Bucket: 'p-data', Key: 'work/w' })).toEqual(['s3:PutObject work/w']);
    }
    // Its own action, which no topology action grants.
    expect(needs('s3', 'AbortMultipartUpload', { Bucket: 'p-data', Key: 'work/w' })).toEqual([
      's3:AbortMultipartUpload work/w',
    ]);
    expect(needs('s3', 'DeleteObject', { Bucket: 'p-data', Key: 'results/r' })).toEqual([
      's3:DeleteObject results/r',
    ]);
    expect(
      needs('s3', 'DeleteObjects', {
        Bucket: 'p-data',
        Delete: { Objects: [{ Key: 'a/1' }, { Key: 'b/2' }] },
      }),
    ).toEqual(['s3:DeleteObject a/1', 's3:DeleteObject b/2']);
    expect(needs('s3', 'ListObjectsV2', { Bucket: 'p-data', Prefix: 'checkpoints/' })).toEqual([
      's3:ListBucket bucket prefix=checkpoints/',
    ]);
    expect(needs('s3', 'ListObjectsV2', { Bucket: 'p-data' })).toEqual(['s3:ListBucket bucket']);
    expect(needs('s3', 'GetObject', { Bucket: 'elsewhere', Key: 'payloads/a' })).toEqual([
      's3:GetObject undeclared:elsewhere/payloads/a',
    ]);
  });

  it('maps SQS calls (batches as their single-message action) to the queue, by URL or by name', () => {
    const QueueUrl = env.WORK_QUEUE_URL;
    expect(needs('sqs', 'SendMessage', { QueueUrl })).toEqual(['sqs:SendMessage work']);
    expect(needs('sqs', 'SendMessageBatch', { QueueUrl })).toEqual(['sqs:SendMessage work']);
    expect(needs('sqs', 'ReceiveMessage', { QueueUrl })).toEqual(['sqs:ReceiveMessage work']);
    expect(needs('sqs', 'DeleteMessageBatch', { QueueUrl })).toEqual(['sqs:DeleteMessage work']);
    expect(needs('sqs', 'ChangeMessageVisibilityBatch', { QueueUrl })).toEqual([
      'sqs:ChangeMessageVisibility work',
    ]);
    expect(needs('sqs', 'GetQueueAttributes', { QueueUrl })).toEqual(['sqs:GetQueueAttributes work']);
    expect(needs('sqs', 'GetQueueUrl', { QueueName: 'p-work' })).toEqual(['sqs:GetQueueUrl work']);
    // A queue that declares no variable is found by the URL the runtime was given.
    expect(needs('sqs', 'SendMessage', { QueueUrl: queueUrls.streamDlq })).toEqual([
      'sqs:SendMessage streamDlq',
    ]);
    expect(needs('sqs', 'SendMessage', { QueueUrl: 'http://sqs.local:1/000000000000/p-work-dlq' })).toEqual([
      'sqs:SendMessage undeclared:http://sqs.local:1/000000000000/p-work-dlq',
    ]);
  });

  it('names the resource by the ARN AWS would show', () => {
    const [table] = iamRequestsFor('dynamodb', 'Query', { TableName: 'p-futures', IndexName: 'live' }, index);
    expect(table?.arn).toBe('arn:aws:dynamodb:us-east-1:000000000000:table/p-futures/index/live');
    const [object] = iamRequestsFor('s3', 'GetObject', { Bucket: 'p-data', Key: 'work/w' }, index);
    expect(object?.arn).toBe('arn:aws:s3:::p-data/work/w');
    const [queue] = iamRequestsFor('sqs', 'SendMessage', { QueueUrl: env.WORK_QUEUE_URL }, index);
    expect(queue?.arn).toBe('arn:aws:sqs:us-east-1:000000000000:p-work');
  });
});

describe('grantsAllow', () => {
  const grants: FunctionGrants = {
    tables: { futures: ['read', 'query-index'], models: ['write'], registry: ['transact'] },
    bucket: [
      { prefix: 'payloads/', actions: ['get', 'list'] },
      { prefix: 'work/', actions: ['put'] },
    ],
    queues: { work: ['depth'] },
  };
  const allows = (request: IamRequest) => grantsAllow(grants, request, topology.tables);

  it('allows a table action only through a topology action that lists it', () => {
    expect(allows({ action: 'dynamodb:Query', resource: { kind: 'table', table: 'futures' } })).toBe(true);
    expect(allows({ action: 'dynamodb:PutItem', resource: { kind: 'table', table: 'futures' } })).toBe(false);
    expect(allows({ action: 'dynamodb:PutItem', resource: { kind: 'table', table: 'models' } })).toBe(true);
    expect(allows({ action: 'dynamodb:GetItem', resource: { kind: 'table', table: 'models' } })).toBe(false);
    expect(
      allows({ action: 'dynamodb:ConditionCheckItem', resource: { kind: 'table', table: 'registry' } }),
    ).toBe(true);
    expect(allows({ action: 'dynamodb:Scan', resource: { kind: 'table', table: 'futures' } })).toBe(false);
    expect(allows({ action: 'dynamodb:GetItem', resource: { kind: 'table', table: 'prefixes' } })).toBe(
      false,
    );
  });

  it('reaches an index through query-index only, and only a declared index', () => {
    const onIndex = (index: string): IamRequest => ({
      action: 'dynamodb:Query',
      resource: { kind: 'index', table: 'futures', index },
    });
    expect(allows(onIndex(LIVE_INDEX))).toBe(true);
    expect(allows(onIndex('other'))).toBe(false);
    const readOnly: FunctionGrants = { ...grants, tables: { futures: ['read'] } };
    expect(grantsAllow(readOnly, onIndex(LIVE_INDEX), topology.tables)).toBe(false);
  });

  it('allows object actions under a granted prefix only, and a listing under a conditioned prefix only', () => {
    expect(allows({ action: 's3:GetObject', resource: { kind: 'object', key: 'payloads/a' } })).toBe(true);
    expect(allows({ action: 's3:GetObject', resource: { kind: 'object', key: 'work/a' } })).toBe(false);
    expect(allows({ action: 's3:PutObject', resource: { kind: 'object', key: 'work/a' } })).toBe(true);
    expect(allows({ action: 's3:DeleteObject', resource: { kind: 'object', key: 'work/a' } })).toBe(false);
    expect(allows({ action: 's3:ListBucket', resource: { kind: 'bucket', prefix: 'payloads/x' } })).toBe(
      true,
    );
    expect(allows({ action: 's3:ListBucket', resource: { kind: 'bucket', prefix: 'work/' } })).toBe(false);
    // `StringLike s3:prefix` does not match a request that carries no prefix.
    expect(allows({ action: 's3:ListBucket', resource: { kind: 'bucket' } })).toBe(false);
    const whole: FunctionGrants = { ...grants, bucket: [{ prefix: '', actions: ['list'] }] };
    expect(
      grantsAllow(whole, { action: 's3:ListBucket', resource: { kind: 'bucket' } }, topology.tables),
    ).toBe(true);
  });

  it('allows queue actions per topology action: depth reads attributes, and nothing else', () => {
    const onWork = (action: string): IamRequest => ({ action, resource: { kind: 'queue', queue: 'work' } });
    expect(allows(onWork('sqs:GetQueueAttributes'))).toBe(true);
    expect(allows(onWork('sqs:SendMessage'))).toBe(false);
    expect(allows(onWork('sqs:ReceiveMessage'))).toBe(false);
    expect(allows({ action: 'sqs:GetQueueAttributes', resource: { kind: 'queue', queue: 'workDlq' } })).toBe(
      false,
    );
  });

  it('never allows an undeclared resource', () => {
    expect(allows({ action: 'dynamodb:Query', resource: { kind: 'undeclared', name: 'p-futures' } })).toBe(
      false,
    );
  });
});

describe('the topology grants what the handlers call', () => {
  const allowed = (
    functionId: FunctionId,
    service: 'dynamodb' | 's3' | 'sqs',
    operation: string,
    input: object,
  ) =>
    iamRequestsFor(service, operation, input as Record<string, unknown>, index).every((request) =>
      grantsAllow(topology.functions[functionId].grants, request, topology.tables),
    );

  it('lets the scheduler take its tick lock and claims in the registry, and read missing payloads as missing', () => {
    for (const operation of ['PutItem', 'UpdateItem', 'DeleteItem']) {
      expect(allowed('scheduler', 'dynamodb', operation, { TableName: 'p-registry' })).toBe(true);
    }
    expect(allowed('scheduler', 's3', 'ListObjectsV2', { Bucket: 'p-data' })).toBe(true);
  });

  it('lets the sweeper scan the models table for expired leases, and nobody else scan anything', () => {
    expect(allowed('sweeper', 'dynamodb', 'Scan', { TableName: 'p-models' })).toBe(true);
    for (const functionId of ['api', 'scheduler', 'worker'] as const) {
      expect(allowed(functionId, 'dynamodb', 'Scan', { TableName: 'p-models' })).toBe(false);
    }
    expect(allowed('sweeper', 'dynamodb', 'Scan', { TableName: 'p-futures' })).toBe(false);
  });
});
