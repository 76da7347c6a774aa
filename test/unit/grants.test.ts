import { describe, expect, it } from 'vitest';
import { iamRequestsFor, type ResourceIndex, resourceIndex } from '../../local/runtime/iam-requests.js';
import { grantsAllow, type IamRequest } from '../../shared/base/grants.js';
import { type FunctionGrants, type FunctionId, LIVE_INDEX, topology } from '../../shared/base/topology.js';
import { registryKey, registryPrefix } from '../../shared/domain/records.js';
import { controlKey } from '../../shared/services/ops/controls.js';
import { tickLockKey } from '../../shared/services/scheduler/tick-lock.js';
import { localEnvFixture } from '../support/local-env-fixture.js';

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

  it('reads the leading keys (partition key values) each DynamoDB call names, as IAM does', () => {
    const keys = (operation: string, input: Record<string, unknown>) =>
      iamRequestsFor('dynamodb', operation, input, index).map((request) => request.leadingKeys);
    expect(keys('GetItem', { TableName: 'p-registry', Key: { pk: 'key#a' } })).toEqual([['key#a']]);
    expect(keys('PutItem', { TableName: 'p-registry', Item: { pk: 'ss#a', tenant: 't' } })).toEqual([
      ['ss#a'],
    ]);
    expect(keys('UpdateItem', { TableName: 'p-models', Key: { model_id: 'm1' } })).toEqual([['m1']]);
    expect(keys('DeleteItem', { TableName: 'p-registry', Key: { pk: { S: 'claim#r' } } })).toEqual([
      ['claim#r'],
    ]);
    // A Query's from the equality on the partition key, through the expression's names and values.
    expect(
      keys('Query', {
        TableName: 'p-registry',
        KeyConditionExpression: '(#k = :k)',
        ExpressionAttributeNames: { '#k': 'pk' },
        ExpressionAttributeValues: { ':k': 'ckpt#m' },
      }),
    ).toEqual([['ckpt#m']]);
    expect(
      keys('Query', {
        TableName: 'p-futures',
        KeyConditionExpression: 'request_id = :id',
        ExpressionAttributeValues: { ':id': { S: 'r1' } },
      }),
    ).toEqual([['r1']]);
    // Every key of a batch, per table; a batch write's puts and deletes alike.
    expect(
      keys('BatchGetItem', {
        RequestItems: {
          'p-registry': { Keys: [{ pk: 'claim#a' }, { pk: 'claim#b' }] },
          'p-models': { Keys: [{ model_id: 'm1' }] },
        },
      }),
    ).toEqual([['claim#a', 'claim#b'], ['m1']]);
    expect(
      keys('BatchWriteItem', {
        RequestItems: {
          'p-prefixes': [{ PutRequest: { Item: { pk: 'p1' } } }, { DeleteRequest: { Key: { pk: 'p2' } } }],
        },
      }),
    ).toEqual([['p1', 'p2']]);
    // Each transaction item its own.
    expect(
      keys('TransactWriteItems', {
        TransactItems: [
          { Put: { TableName: 'p-registry', Item: { pk: 'idem#x' } } },
          { Update: { TableName: 'p-registry', Key: { pk: 'seq#m' } } },
          { ConditionCheck: { TableName: 'p-registry', Key: { pk: 'session#s' } } },
        ],
      }),
    ).toEqual([['idem#x'], ['seq#m'], ['session#s']]);
    expect(
      keys('TransactGetItems', {
        TransactItems: [{ Get: { TableName: 'p-registry', Key: { pk: 'ss#a' } } }],
      }),
    ).toEqual([['ss#a']]);
    // None for a Scan, an index Query, or a key that cannot be read.
    expect(keys('Scan', { TableName: 'p-registry' })).toEqual([undefined]);
    expect(
      keys('Query', {
        TableName: 'p-futures',
        IndexName: LIVE_INDEX,
        KeyConditionExpression: 'live = :s',
        ExpressionAttributeValues: { ':s': 'default#0' },
      }),
    ).toEqual([undefined]);
    expect(keys('GetItem', { TableName: 'p-registry', Key: { other: 'x' } })).toEqual([undefined]);
    expect(
      keys('BatchGetItem', { RequestItems: { 'p-registry': { Keys: [{ pk: 'claim#a' }, { nope: 1 }] } } }),
    ).toEqual([undefined]);
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
    tables: {
      futures: ['get', 'query', 'query-index'],
      models: ['put', 'update'],
      registry: ['condition-check'],
    },
    bucket: [
      { prefix: 'payloads/', actions: ['get', 'list'] },
      { prefix: 'work/', actions: ['put'] },
    ],
    queues: { work: ['depth'] },
  };
  const allows = (request: IamRequest) => grantsAllow(grants, request, topology.tables);

  it('allows a table action only through a topology action that lists it', () => {
    expect(allows({ action: 'dynamodb:Query', resource: { kind: 'table', table: 'futures' } })).toBe(true);
    expect(allows({ action: 'dynamodb:BatchGetItem', resource: { kind: 'table', table: 'futures' } })).toBe(
      false,
    );
    expect(allows({ action: 'dynamodb:DeleteItem', resource: { kind: 'table', table: 'models' } })).toBe(
      false,
    );
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
    const readOnly: FunctionGrants = { ...grants, tables: { futures: ['get', 'query'] } };
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

  it('allows a keyed grant only when every leading key starts with one of its prefixes, statement by statement', () => {
    const keyed: FunctionGrants = {
      tables: {
        registry: [
          { keyPrefixes: ['claim#', 'ckpt#'], actions: ['get', 'batch-get', 'delete'] },
          { keyPrefixes: ['ss#'], actions: ['put', 'batch-get'] },
        ],
        models: ['get'],
      },
      bucket: [],
      queues: {},
    };
    const on = (action: string, leadingKeys?: readonly string[]): boolean =>
      grantsAllow(
        keyed,
        {
          action: `dynamodb:${action}`,
          resource: { kind: 'table', table: 'registry' },
          ...(leadingKeys ? { leadingKeys } : {}),
        },
        topology.tables,
      );
    expect(on('GetItem', ['claim#r1'])).toBe(true);
    expect(on('GetItem', ['ckpt#m#weights#n'])).toBe(true);
    expect(on('DeleteItem', ['claim#r1'])).toBe(true);
    // The prefix must start the key: a key that merely contains it is another kind.
    expect(on('GetItem', ['key#claim#r1'])).toBe(false);
    expect(on('GetItem', ['key#h'])).toBe(false);
    // The action must be the keyed grant's own, for that grant's prefixes.
    expect(on('PutItem', ['claim#r1'])).toBe(false);
    expect(on('PutItem', ['ss#s1'])).toBe(true);
    expect(on('DeleteItem', ['ss#s1'])).toBe(false);
    // ForAllValues: every key of a batch must match, and all within one statement.
    expect(on('BatchGetItem', ['claim#a', 'ckpt#b'])).toBe(true);
    expect(on('BatchGetItem', ['claim#a', 'key#h'])).toBe(false);
    expect(on('BatchGetItem', ['claim#a', 'ss#b'])).toBe(false);
    // Null: false: a request that names no key (or an empty set) matches no keyed grant.
    expect(on('GetItem')).toBe(false);
    expect(on('GetItem', [])).toBe(false);
    // A bare action is on every item, whatever its key.
    expect(
      grantsAllow(
        keyed,
        {
          action: 'dynamodb:GetItem',
          resource: { kind: 'table', table: 'models' },
          leadingKeys: ['anything'],
        },
        topology.tables,
      ),
    ).toBe(true);
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
    const onKey = (pk: string) => ({ TableName: 'p-registry', Key: { pk }, Item: { pk } });
    for (const operation of ['PutItem', 'UpdateItem', 'DeleteItem']) {
      expect(allowed('scheduler', 'dynamodb', operation, onKey(registryKey.tickLock('default')))).toBe(true);
    }
    // A claim is an update (an expired one is taken over with its count and cancel mark), never a put.
    for (const operation of ['UpdateItem', 'DeleteItem']) {
      expect(allowed('scheduler', 'dynamodb', operation, onKey(registryKey.sampleClaim('r1')))).toBe(true);
    }
    expect(allowed('scheduler', 'dynamodb', 'PutItem', onKey(registryKey.sampleClaim('r1')))).toBe(false);
    const claims = { RequestItems: { 'p-registry': { Keys: [{ pk: 'claim#r1' }, { pk: 'claim#r2' }] } } };
    expect(allowed('scheduler', 'dynamodb', 'BatchGetItem', claims)).toBe(true);
    expect(allowed('scheduler', 's3', 'ListObjectsV2', { Bucket: 'p-data' })).toBe(true);
  });

  it('lets no function mint or revoke a key, or set a pool control: only the operator CLI does', () => {
    const keys = [
      registryKey.apiKey('h'),
      registryKey.operatorKey('h'),
      registryKey.drain('default'),
      registryKey.cutRequest('default'),
    ];
    for (const functionId of ['api', 'scheduler', 'worker', 'sweeper'] as const) {
      for (const pk of keys) {
        for (const operation of ['PutItem', 'UpdateItem', 'DeleteItem']) {
          const input = { TableName: 'p-registry', Key: { pk }, Item: { pk } };
          expect(allowed(functionId, 'dynamodb', operation, input), `${functionId} ${operation} ${pk}`).toBe(
            false,
          );
        }
        const batch = { RequestItems: { 'p-registry': [{ PutRequest: { Item: { pk } } }] } };
        expect(allowed(functionId, 'dynamodb', 'BatchWriteItem', batch)).toBe(false);
      }
    }
    // The api looks keys up; the worker may not even read them.
    const lookup = { TableName: 'p-registry', Key: { pk: registryKey.apiKey('h') } };
    expect(allowed('api', 'dynamodb', 'GetItem', lookup)).toBe(true);
    expect(allowed('worker', 'dynamodb', 'GetItem', lookup)).toBe(false);
  });

  it('lets the worker write the records its commit owns, inside a transaction too', () => {
    const commit = {
      TransactItems: [
        { Update: { TableName: 'p-futures', Key: { request_id: 'r1' } } },
        { Update: { TableName: 'p-registry', Key: { pk: registryKey.checkpointName('m', 'sampler', 'n') } } },
        { Put: { TableName: 'p-registry', Item: { pk: registryKey.samplingSession('s1') } } },
        { Delete: { TableName: 'p-registry', Key: { pk: registryKey.sampleClaim('r2') } } },
      ],
    };
    expect(allowed('worker', 'dynamodb', 'TransactWriteItems', commit)).toBe(true);
    // One forged item in the same transaction denies it all.
    const forged = {
      TransactItems: [
        ...commit.TransactItems,
        { Put: { TableName: 'p-registry', Item: { pk: registryKey.apiKey('h'), tenant: 'victim' } } },
      ],
    };
    expect(allowed('worker', 'dynamodb', 'TransactWriteItems', forged)).toBe(false);
  });

  it('lets the sweeper scan the models table for expired leases, and nobody else scan anything', () => {
    expect(allowed('sweeper', 'dynamodb', 'Scan', { TableName: 'p-models' })).toBe(true);
    for (const functionId of ['api', 'scheduler', 'worker'] as const) {
      expect(allowed(functionId, 'dynamodb', 'Scan', { TableName: 'p-models' })).toBe(false);
    }
    expect(allowed('sweeper', 'dynamodb', 'Scan', { TableName: 'p-futures' })).toBe(false);
  });
});

describe('registry key prefixes, which the keyed grants name', () => {
  const prefixes = Object.entries(registryPrefix);

  it('are distinct kinds: no prefix starts another, and none holds a StringLike wildcard', () => {
    for (const [kind, prefix] of prefixes) {
      expect(prefix).toMatch(/^[a-z]+#$/);
      for (const [other, otherPrefix] of prefixes) {
        if (other !== kind)
          expect(otherPrefix.startsWith(prefix), `${other} starts with ${kind}`).toBe(false);
      }
    }
  });

  it('start every key built for their kind, and no other kind', () => {
    const built: [keyof typeof registryPrefix, string][] = [
      ['apiKey', registryKey.apiKey('h')],
      ['operatorKey', registryKey.operatorKey('h')],
      ['session', registryKey.session('s')],
      ['samplingSession', registryKey.samplingSession('ss')],
      ['seqCounter', registryKey.seqCounter('m')],
      ['idempotency', registryKey.trainingIdem('m', 1)],
      ['idempotency', registryKey.createModelIdem('s', 1)],
      ['idempotency', registryKey.sampleIdem('ss', 1)],
      ['idempotency', registryKey.samplingSessionIdem('s', 1)],
      ['idempotency', registryKey.unloadIdem('m')],
      ['checkpointName', registryKey.checkpointName('m', 'weights', 'n')],
      ['sampleClaim', registryKey.sampleClaim('r')],
      ['tickLock', tickLockKey('default')],
      ['cutRequest', controlKey.cut('default')],
      ['drain', controlKey.drain('default')],
    ];
    for (const [kind, key] of built) {
      const matching = prefixes.filter(([, prefix]) => key.startsWith(prefix)).map(([name]) => name);
      expect(matching, key).toEqual([kind]);
    }
  });
});
