import { describe, expect, it } from 'vitest';
import {
  grantsAllow,
  type IamRequest,
  type IamResource,
  INDEX_ACTIONS,
  LIST_ACTIONS,
  OBJECT_ACTIONS,
  QUEUE_ACTIONS,
  TABLE_ACTIONS,
} from '../../shared/base/grants.js';
import {
  FUNCTION_IDS,
  type FunctionId,
  LANE_QUEUE_IDS,
  physicalName,
  QUEUE_IDS,
  TABLE_IDS,
  topology,
} from '../../shared/base/topology.js';
import { registryPrefix } from '../../shared/domain/records.js';
import { functionLogicalId, logicalIdWhere, properties, synth, TEST_PREFIX } from '../support/cdk/synth.js';

const { stack, template } = synth();

/**
 * The IAM actions each topology action stands for, written out here independently of
 * `cdk/constructs/grants.ts`: a change to what a grant means must show up as a failing test.
 */
const TABLE_SPEC = {
  get: ['dynamodb:GetItem'],
  'batch-get': ['dynamodb:BatchGetItem'],
  query: ['dynamodb:Query'],
  put: ['dynamodb:PutItem'],
  update: ['dynamodb:UpdateItem'],
  delete: ['dynamodb:DeleteItem'],
  'batch-write': ['dynamodb:BatchWriteItem'],
  'condition-check': ['dynamodb:ConditionCheckItem'],
  scan: ['dynamodb:Scan'],
} as const;

/** The condition a keyed grant's statement must carry, written out as the template renders it. */
function leadingKeysCondition(prefixes: readonly string[]): string {
  return JSON.stringify({
    'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': prefixes.map((prefix) => `${prefix}*`) },
    Null: { 'dynamodb:LeadingKeys': 'false' },
  });
}
const OBJECT_SPEC = {
  get: ['s3:GetObject'],
  put: ['s3:PutObject', 's3:AbortMultipartUpload'],
  delete: ['s3:DeleteObject'],
} as const;
const SQS_CONSUME = [
  'sqs:ReceiveMessage',
  'sqs:DeleteMessage',
  'sqs:ChangeMessageVisibility',
  'sqs:GetQueueAttributes',
  'sqs:GetQueueUrl',
];
const SQS_DEPTH = ['sqs:GetQueueAttributes'];
/** What an event source mapping needs to write failure records to its on-failure queue. */
const SQS_ON_FAILURE = ['sqs:SendMessage', 'sqs:GetQueueAttributes', 'sqs:GetQueueUrl'];
const STREAM_READ = ['dynamodb:DescribeStream', 'dynamodb:GetRecords', 'dynamodb:GetShardIterator'];

/** Readable names for the logical ids the policies refer to: `table:futures`, `bucket`, `queue:work`. */
const names = new Map<string, string>();
for (const tableId of TABLE_IDS) {
  const tableName = physicalName(TEST_PREFIX, topology.tables[tableId].name);
  names.set(logicalIdWhere(template, 'AWS::DynamoDB::Table', 'TableName', tableName), `table:${tableId}`);
}
for (const queueId of QUEUE_IDS) {
  const queueName = physicalName(TEST_PREFIX, topology.queues[queueId].name);
  names.set(logicalIdWhere(template, 'AWS::SQS::Queue', 'QueueName', queueName), `queue:${queueId}`);
}
for (const bucketId of Object.keys(template.findResources('AWS::S3::Bucket'))) names.set(bucketId, 'bucket');

/** Renders a policy resource (`Fn::GetAtt`, `Fn::Join`, `Ref` or a literal) as text. */
function render(value: unknown): string {
  if (typeof value === 'string') return value;
  const intrinsic = value as Record<string, unknown>;
  if ('Fn::GetAtt' in intrinsic) {
    const [id, attribute] = intrinsic['Fn::GetAtt'] as [string, string];
    return `${names.get(id) ?? id}.${attribute}`;
  }
  if ('Fn::Join' in intrinsic) {
    const [separator, parts] = intrinsic['Fn::Join'] as [string, unknown[]];
    return parts.map(render).join(separator);
  }
  if ('Ref' in intrinsic) return `${names.get(intrinsic.Ref as string) ?? intrinsic.Ref}.Ref`;
  throw new Error(`Unexpected policy resource ${JSON.stringify(value)}`);
}

interface Statement {
  Effect: string;
  Action: string | string[];
  Resource: unknown;
  Condition?: unknown;
}

/** Every `action resource [if condition]` a function's role allows on DynamoDB, S3 and SQS. */
function permissions(functionId: FunctionId): Set<string> {
  const role = properties(template, functionLogicalId(stack, functionId)).Role as { 'Fn::GetAtt': [string] };
  const roleId = role['Fn::GetAtt'][0];
  const granted = new Set<string>();
  for (const policy of Object.values(template.findResources('AWS::IAM::Policy'))) {
    const props = policy.Properties as {
      Roles: { Ref: string }[];
      PolicyDocument: { Statement: Statement[] };
    };
    if (!props.Roles.some((ref) => ref.Ref === roleId)) continue;
    for (const statement of props.PolicyDocument.Statement) {
      expect(statement.Effect).toBe('Allow');
      const actions = ([] as string[]).concat(statement.Action);
      const resources = ([] as unknown[]).concat(statement.Resource).map(render);
      const condition = statement.Condition ? ` if ${JSON.stringify(statement.Condition)}` : '';
      for (const action of actions) {
        if (!/^(dynamodb|s3|sqs):/.test(action)) continue;
        for (const resource of resources) granted.add(`${action} ${resource}${condition}`);
      }
    }
  }
  return granted;
}

/** What the topology's grants say a function may do. */
function grantPermissions(functionId: FunctionId): Set<string> {
  const { grants } = topology.functions[functionId];
  const expected = new Set<string>();
  for (const [tableId, tableGrants] of Object.entries(grants.tables)) {
    for (const grant of tableGrants ?? []) {
      if (grant === 'query-index') {
        for (const index of topology.tables[tableId as keyof typeof topology.tables].indexes) {
          expected.add(`dynamodb:Query table:${tableId}.Arn/index/${index.name}`);
        }
      } else if (typeof grant === 'string') {
        for (const iamAction of TABLE_SPEC[grant]) expected.add(`${iamAction} table:${tableId}.Arn`);
      } else {
        const condition = leadingKeysCondition(grant.keyPrefixes);
        for (const action of grant.actions) {
          for (const iamAction of TABLE_SPEC[action]) {
            expected.add(`${iamAction} table:${tableId}.Arn if ${condition}`);
          }
        }
      }
    }
  }
  for (const { prefix, actions } of grants.bucket) {
    for (const action of actions) {
      if (action === 'list') {
        const condition = prefix === '' ? '' : ` if {"StringLike":{"s3:prefix":"${prefix}*"}}`;
        expected.add(`s3:ListBucket bucket.Arn${condition}`);
      } else {
        for (const iamAction of OBJECT_SPEC[action]) expected.add(`${iamAction} bucket.Arn/${prefix}*`);
      }
    }
  }
  for (const [queueId, actions] of Object.entries(grants.queues)) {
    for (const action of actions ?? []) {
      const iamActions = { send: ['sqs:SendMessage'], consume: SQS_CONSUME, depth: SQS_DEPTH }[action];
      for (const iamAction of iamActions) {
        expected.add(`${iamAction} queue:${queueId}.Arn`);
      }
    }
  }
  return expected;
}

/** What a function's triggers (its event source mappings, which use its role) need. */
function triggerPermissions(functionId: FunctionId): Set<string> {
  const expected = new Set<string>();
  for (const trigger of topology.functions[functionId].triggers) {
    if (trigger.kind === 'stream') {
      expected.add('dynamodb:ListStreams *');
      for (const action of STREAM_READ) expected.add(`${action} table:${trigger.table}.StreamArn`);
      for (const action of SQS_ON_FAILURE) expected.add(`${action} queue:${trigger.onFailure}.Arn`);
    }
    if (trigger.kind === 'queue') {
      for (const action of SQS_CONSUME) expected.add(`${action} queue:${trigger.queue}.Arn`);
    }
  }
  return expected;
}

/** What the topology says a function may do, plus what its triggers need to read their sources. */
function expectedPermissions(functionId: FunctionId): Set<string> {
  return new Set([...grantPermissions(functionId), ...triggerPermissions(functionId)]);
}

/** Whether a role's permissions (as `permissions` renders them) allow one request. */
function roleAllows(role: ReadonlySet<string>, { action, resource, leadingKeys }: IamRequest): boolean {
  switch (resource.kind) {
    case 'table':
      return [...role].some((permission) => {
        if (permission === `${action} table:${resource.table}.Arn`) return true;
        const head = `${action} table:${resource.table}.Arn if `;
        if (!permission.startsWith(head)) return false;
        // ForAllValues:StringLike over the request's leading keys, which Null: false requires present.
        const condition = JSON.parse(permission.slice(head.length)) as {
          'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': string[] };
          Null: { 'dynamodb:LeadingKeys': string };
        };
        expect(condition.Null['dynamodb:LeadingKeys']).toBe('false');
        const patterns = condition['ForAllValues:StringLike']['dynamodb:LeadingKeys'];
        return (
          leadingKeys !== undefined &&
          leadingKeys.length > 0 &&
          leadingKeys.every((key) =>
            patterns.some((pattern) => pattern.endsWith('*') && key.startsWith(pattern.slice(0, -1))),
          )
        );
      });
    case 'index':
      return role.has(`${action} table:${resource.table}.Arn/index/${resource.index}`);
    case 'object':
      return [...role].some((permission) => {
        const prefix = permission.startsWith(`${action} bucket.Arn/`) && permission.endsWith('*');
        return prefix && resource.key.startsWith(permission.slice(`${action} bucket.Arn/`.length, -1));
      });
    case 'bucket':
      return [...role].some((permission) => {
        if (permission === `${action} bucket.Arn`) return true;
        const conditioned = /^(\S+) bucket\.Arn if \{"StringLike":\{"s3:prefix":"(.*)\*"\}\}$/.exec(
          permission,
        );
        return (
          conditioned?.[1] === action &&
          resource.prefix !== undefined &&
          resource.prefix.startsWith(conditioned[2] ?? '')
        );
      });
    case 'queue':
      return role.has(`${action} queue:${resource.queue}.Arn`);
    case 'undeclared':
      return false;
  }
}

/** Every request worth asking about: each granted IAM action (and some never granted) on each resource. */
function candidateRequests(): IamRequest[] {
  const actions = new Set([
    ...Object.values(TABLE_ACTIONS).flat(),
    ...INDEX_ACTIONS,
    ...Object.values(OBJECT_ACTIONS).flat(),
    ...LIST_ACTIONS,
    ...Object.values(QUEUE_ACTIONS).flat(),
    'dynamodb:DescribeTable',
    's3:AbortMultipartUpload',
    'sqs:PurgeQueue',
  ]);
  const prefixes = new Set(
    FUNCTION_IDS.flatMap((id) => topology.functions[id].grants.bucket.map((g) => g.prefix)),
  );
  const resources: IamResource[] = [
    ...TABLE_IDS.flatMap((table): IamResource[] => [
      { kind: 'table', table },
      ...topology.tables[table].indexes.map(
        (index): IamResource => ({ kind: 'index', table, index: index.name }),
      ),
      { kind: 'index', table, index: 'undeclared' },
    ]),
    ...[...prefixes, 'elsewhere/'].map((prefix): IamResource => ({ kind: 'object', key: `${prefix}k` })),
    { kind: 'bucket' },
    ...[...prefixes, 'elsewhere/'].map((prefix): IamResource => ({ kind: 'bucket', prefix: `${prefix}k` })),
    ...QUEUE_IDS.map((queue): IamResource => ({ kind: 'queue', queue })),
  ];
  // On a table, each kind of registry key alone, two kinds in one batch, an unknown kind, none at all.
  const kinds = Object.values(registryPrefix);
  const keySets: (readonly string[] | undefined)[] = [
    undefined,
    ...kinds.map((prefix) => [`${prefix}x`]),
    ...kinds.flatMap((a) => kinds.map((b) => [`${a}x`, `${b}y`])),
    ['other#x'],
  ];
  return [...actions].flatMap((action) =>
    resources.flatMap((resource): IamRequest[] =>
      resource.kind === 'table'
        ? keySets.map((leadingKeys) => ({ action, resource, ...(leadingKeys ? { leadingKeys } : {}) }))
        : [{ action, resource }],
    ),
  );
}

function sorted(values: Iterable<string>): string[] {
  return [...values].sort();
}

describe('IAM', () => {
  it.each(FUNCTION_IDS)('grants %s exactly the data actions its topology lists', (functionId) => {
    expect(sorted(permissions(functionId))).toEqual(sorted(expectedPermissions(functionId)));
  });

  it('lets the API read what the status page shows and no more: the live index and the queue depths', () => {
    const api = sorted(permissions('api'));
    // Never sends, receives or deletes a message: only the message counts of the work queue and of
    // both dead-letter queues.
    expect(api.filter((p) => p.startsWith('sqs:'))).toEqual([
      'sqs:GetQueueAttributes queue:streamDlq.Arn',
      'sqs:GetQueueAttributes queue:work.Arn',
      'sqs:GetQueueAttributes queue:workDlq.Arn',
    ]);
    // Queries of the futures indexes (the status page; `query-index` reaches every index the table
    // declares, and `live_by_model` projects what `live` does, R6) and of the listing indexes (C1),
    // never a Scan, and on no other index or table.
    expect(api.filter((p) => p.includes('/index/'))).toEqual([
      'dynamodb:Query table:futures.Arn/index/live',
      'dynamodb:Query table:futures.Arn/index/live_by_model',
      'dynamodb:Query table:models.Arn/index/by_tenant',
      'dynamodb:Query table:registry.Arn/index/by_owner',
      'dynamodb:Query table:registry.Arn/index/by_parent',
    ]);
    expect(api.filter((p) => p.startsWith('dynamodb:Scan'))).toEqual([]);
    expect(api.filter((p) => p.includes('table:prefixes'))).toEqual([]);
    // Its intake transactions are puts and updates (`write`); its condition checks are
    // cancel_future's, that no worker holds the sample's claim, and every submit's, that its
    // session has not finished (W9).
    expect(api.filter((p) => p.startsWith('dynamodb:ConditionCheckItem'))).toEqual([
      `dynamodb:ConditionCheckItem table:registry.Arn if ${leadingKeysCondition(['claim#', 'session#'])}`,
    ]);
  });

  it('lets the scheduler write failure records to the stream DLQ, and nothing else to any queue but work and the lanes', () => {
    const sqs = sorted(permissions('scheduler')).filter((p) => p.startsWith('sqs:'));
    expect(sqs).toEqual(
      sorted([
        'sqs:SendMessage queue:work.Arn',
        // A held model's work item goes to its holder's lane (S2).
        ...LANE_QUEUE_IDS.map((lane) => `sqs:SendMessage queue:${lane}.Arn`),
        ...SQS_ON_FAILURE.map((action) => `${action} queue:streamDlq.Arn`),
      ]),
    );
  });

  it('lets the scheduler read futures but never write or delete them', () => {
    const onFutures = sorted(permissions('scheduler')).filter((p) => p.includes('table:futures.Arn'));
    for (const action of ['PutItem', 'UpdateItem', 'DeleteItem', 'BatchWriteItem', 'ConditionCheckItem']) {
      expect(onFutures.filter((p) => p.startsWith(`dynamodb:${action} `))).toEqual([]);
    }
    expect(onFutures).toEqual([
      'dynamodb:BatchGetItem table:futures.Arn',
      'dynamodb:Query table:futures.Arn/index/live',
      'dynamodb:Query table:futures.Arn/index/live_by_model',
    ]);
  });

  it.each(FUNCTION_IDS)('lets the local runtime allow %s exactly what its role allows', (functionId) => {
    // The role minus what only its triggers need (the event source mapping, not the handler, uses those).
    const triggersOnly = [...triggerPermissions(functionId)].filter(
      (p) => !grantPermissions(functionId).has(p),
    );
    const role = new Set([...permissions(functionId)].filter((p) => !triggersOnly.includes(p)));
    const grants = topology.functions[functionId].grants;
    const disagreements = candidateRequests().filter(
      (request) => grantsAllow(grants, request, topology.tables) !== roleAllows(role, request),
    );
    expect(disagreements).toEqual([]);
  });

  it('conditions every registry statement on dynamodb:LeadingKeys: no role reaches the whole registry', () => {
    for (const functionId of FUNCTION_IDS) {
      // An index Query names no table key, so it cannot be conditioned: only the api's listings
      // (C1) and the sweeper's gc round (C5) query the registry's indexes, and only with Query.
      const onRegistry = sorted(permissions(functionId)).filter(
        (p) => p.includes('table:registry.Arn') && !p.startsWith('dynamodb:Query table:registry.Arn/index/'),
      );
      expect(onRegistry.length).toBeGreaterThan(0);
      for (const permission of onRegistry) {
        expect(permission).toMatch(
          /^dynamodb:\w+ table:registry\.Arn if \{"ForAllValues:StringLike":\{"dynamodb:LeadingKeys":\[.+\]\},"Null":\{"dynamodb:LeadingKeys":"false"\}\}$/,
        );
      }
    }
  });

  it("queries the registry's sparse listing indexes only from the api (C1) and the sweeper (its gc partition, C3, C5)", () => {
    // The indexes hold only items with an owner_key or a parent_key (listing rows, gc entries, public
    // markers), projected to listing fields: never an API key hash, a counter's state or a control. A
    // `query-index` grant covers every declared index of its table.
    const registryIndexes = [
      'dynamodb:Query table:registry.Arn/index/by_owner',
      'dynamodb:Query table:registry.Arn/index/by_parent',
    ];
    for (const functionId of FUNCTION_IDS) {
      const indexQueries = sorted(permissions(functionId)).filter((p) =>
        p.includes('table:registry.Arn/index/'),
      );
      expect(indexQueries).toEqual(functionId === 'sweeper' || functionId === 'api' ? registryIndexes : []);
    }
  });

  it('keeps the worker to the registry records a work item owns: no key, session, counter or control write', () => {
    const worker = sorted(permissions('worker')).filter((p) => p.includes('table:registry.Arn'));
    expect(worker).toEqual(
      sorted([
        ...['GetItem', 'UpdateItem', 'DeleteItem'].map(
          (action) => `dynamodb:${action} table:registry.Arn if ${leadingKeysCondition(['claim#', 'ckpt#'])}`,
        ),
        `dynamodb:BatchGetItem table:registry.Arn if ${leadingKeysCondition(['claim#'])}`,
        `dynamodb:PutItem table:registry.Arn if ${leadingKeysCondition(['ss#'])}`,
        `dynamodb:GetItem table:registry.Arn if ${leadingKeysCondition(['cut#'])}`,
        // A sample's commit: its session log's position and entry (W9).
        `dynamodb:UpdateItem table:registry.Arn if ${leadingKeysCondition(['sfc#'])}`,
        `dynamodb:PutItem table:registry.Arn if ${leadingKeysCondition(['sfl#'])}`,
        // Its work lane's lease (S2).
        ...['GetItem', 'PutItem', 'UpdateItem', 'DeleteItem'].map(
          (action) => `dynamodb:${action} table:registry.Arn if ${leadingKeysCondition(['lane#'])}`,
        ),
      ]),
    );
  });

  const tickRegistry = [
    ...['PutItem', 'UpdateItem', 'DeleteItem'].map(
      (action) => `dynamodb:${action} table:registry.Arn if ${leadingKeysCondition(['tick#'])}`,
    ),
    ...['BatchGetItem', 'UpdateItem', 'DeleteItem'].map(
      (action) => `dynamodb:${action} table:registry.Arn if ${leadingKeysCondition(['claim#'])}`,
    ),
    `dynamodb:GetItem table:registry.Arn if ${leadingKeysCondition(['drain#'])}`,
  ];

  it('keeps the scheduler to its tick lock, sample claims and drain flag in the registry', () => {
    const onRegistry = sorted(permissions('scheduler')).filter((p) => p.includes('table:registry.Arn'));
    expect(onRegistry).toEqual(sorted(tickRegistry));
  });

  it("keeps the sweeper to the tick's records and checkpoint collection: gc entries, expired names, markers", () => {
    const onRegistry = sorted(permissions('sweeper')).filter((p) => p.includes('table:registry.Arn'));
    expect(onRegistry).toEqual(
      sorted([
        ...tickRegistry,
        'dynamodb:Query table:registry.Arn/index/by_owner',
        'dynamodb:Query table:registry.Arn/index/by_parent',
        ...['GetItem', 'PutItem', 'DeleteItem'].map(
          (action) => `dynamodb:${action} table:registry.Arn if ${leadingKeysCondition(['gc#'])}`,
        ),
        ...['GetItem', 'DeleteItem'].map(
          (action) => `dynamodb:${action} table:registry.Arn if ${leadingKeysCondition(['ckpt#'])}`,
        ),
        `dynamodb:DeleteItem table:registry.Arn if ${leadingKeysCondition(['pub#'])}`,
      ]),
    );
  });

  it('lets no function write API keys, operator keys or pool controls (the operator CLI does)', () => {
    for (const functionId of FUNCTION_IDS) {
      for (const permission of permissions(functionId)) {
        if (!/^dynamodb:(PutItem|UpdateItem|DeleteItem|BatchWriteItem) table:registry/.test(permission))
          continue;
        expect(permission).not.toMatch(/"(key|opkey|drain|cut)#\*"/);
      }
    }
  });

  it('gives the api exactly the DynamoDB actions it sends: deletes only of checkpoint lifecycle records, no batch write', () => {
    const dynamo = sorted(permissions('api')).filter((p) => p.startsWith('dynamodb:'));
    expect(dynamo.filter((p) => /^dynamodb:(BatchWriteItem|Scan) /.test(p))).toEqual([]);
    // The owner's delete, unpublish and TTL clearing (C3-C5): a name record, its gc entry, its marker.
    expect(dynamo.filter((p) => p.startsWith('dynamodb:DeleteItem '))).toEqual([
      `dynamodb:DeleteItem table:registry.Arn if ${leadingKeysCondition(['ckpt#'])}`,
      `dynamodb:DeleteItem table:registry.Arn if ${leadingKeysCondition(['gc#', 'pub#'])}`,
    ]);
    // The seq counter (every training submit), the session heartbeat and finish, the quota counters,
    // the owner's checkpoint changes (publish, TTL, a legacy archive's key), the session futures'
    // position and clone counters, a cancelled queued sample's future and a running one's claim mark
    // (W9); never a model.
    expect(dynamo.filter((p) => p.startsWith('dynamodb:UpdateItem '))).toEqual([
      'dynamodb:UpdateItem table:futures.Arn',
      `dynamodb:UpdateItem table:registry.Arn if ${leadingKeysCondition(['ckpt#'])}`,
      `dynamodb:UpdateItem table:registry.Arn if ${leadingKeysCondition(['claim#'])}`,
      `dynamodb:UpdateItem table:registry.Arn if ${leadingKeysCondition(['rate#', 'polls#'])}`,
      `dynamodb:UpdateItem table:registry.Arn if ${leadingKeysCondition(['session#', 'seq#'])}`,
      `dynamodb:UpdateItem table:registry.Arn if ${leadingKeysCondition(['sfc#', 'sfj#'])}`,
    ]);
    // BatchGetItem of futures: many waiting polls' re-reads merged where one process serves them.
    expect(dynamo.filter((p) => !p.includes('table:registry'))).toEqual([
      'dynamodb:BatchGetItem table:futures.Arn',
      'dynamodb:BatchGetItem table:models.Arn',
      'dynamodb:GetItem table:futures.Arn',
      'dynamodb:GetItem table:models.Arn',
      'dynamodb:PutItem table:futures.Arn',
      'dynamodb:PutItem table:models.Arn',
      'dynamodb:Query table:futures.Arn/index/live',
      'dynamodb:Query table:futures.Arn/index/live_by_model',
      'dynamodb:Query table:models.Arn/index/by_tenant',
      'dynamodb:UpdateItem table:futures.Arn',
    ]);
    // A page of training runs reads their seq counters in a batch, a page of checkpoints their name
    // records' user_metadata (C1), provenance spans the records of the sequences they name (W8), and
    // nothing else of the registry.
    expect(dynamo.filter((p) => p.startsWith('dynamodb:BatchGetItem table:registry'))).toEqual([
      `dynamodb:BatchGetItem table:registry.Arn if ${leadingKeysCondition(['ckpt#'])}`,
      `dynamodb:BatchGetItem table:registry.Arn if ${leadingKeysCondition(['sample#'])}`,
      `dynamodb:BatchGetItem table:registry.Arn if ${leadingKeysCondition(['seq#'])}`,
    ]);
    // Keys and controls it only reads.
    expect(dynamo).toContain(
      `dynamodb:GetItem table:registry.Arn if ${leadingKeysCondition(['key#', 'opkey#', 'drain#', 'cut#'])}`,
    );
  });

  it('lets only the sweeper scan', () => {
    for (const functionId of FUNCTION_IDS) {
      const scans = sorted(permissions(functionId)).filter((p) => p.startsWith('dynamodb:Scan '));
      expect(scans).toEqual(functionId === 'sweeper' ? ['dynamodb:Scan table:models.Arn'] : []);
    }
  });

  it('limits object access to the granted key prefixes', () => {
    // ListBucket: S3 tells a missing payload (404) from a denied one (403) only to a caller that may list.
    expect(sorted(permissions('scheduler')).filter((p) => p.startsWith('s3:'))).toEqual([
      's3:AbortMultipartUpload bucket.Arn/work/*',
      's3:GetObject bucket.Arn/payloads/*',
      's3:ListBucket bucket.Arn',
      's3:PutObject bucket.Arn/work/*',
    ]);
    // archives/: GetObject is what the archive route's presigned URL is signed for (C2); PutObject and
    // the checkpoint blob's GetObject build the archive of a checkpoint saved before archives were.
    // checkpoints/ PutObject: copy_weights' S3 copy of a blob.
    expect(sorted(permissions('api')).filter((p) => p.startsWith('s3:'))).toEqual([
      's3:AbortMultipartUpload bucket.Arn/archives/*',
      's3:AbortMultipartUpload bucket.Arn/checkpoints/*',
      's3:AbortMultipartUpload bucket.Arn/payloads/*',
      's3:DeleteObject bucket.Arn/payloads/*',
      's3:GetObject bucket.Arn/archives/*',
      's3:GetObject bucket.Arn/checkpoints/*',
      's3:GetObject bucket.Arn/payloads/*',
      's3:GetObject bucket.Arn/results/*',
      's3:PutObject bucket.Arn/archives/*',
      's3:PutObject bucket.Arn/checkpoints/*',
      's3:PutObject bucket.Arn/payloads/*',
    ]);
    // Only the sweeper deletes blobs (E5); the API may delete only under payloads/ (the payload of an
    // intake transaction that definitively failed). Only the sweeper and the scheduler list the bucket.
    for (const functionId of FUNCTION_IDS.filter((id) => id !== 'sweeper' && id !== 'api')) {
      const s3 = sorted(permissions(functionId)).filter((p) => p.startsWith('s3:'));
      expect(s3.filter((p) => /^s3:DeleteObject /.test(p))).toEqual([]);
      expect(s3.filter((p) => p.endsWith('bucket.Arn/*'))).toEqual([]);
    }
    for (const functionId of FUNCTION_IDS.filter((id) => id !== 'sweeper' && id !== 'scheduler')) {
      expect(sorted(permissions(functionId)).filter((p) => p.startsWith('s3:ListBucket '))).toEqual([]);
    }
    expect(permissions('sweeper')).toContain('s3:DeleteObject bucket.Arn/*');
  });

  it('grants no wildcard actions and no wildcard resources beyond ListStreams', () => {
    for (const functionId of FUNCTION_IDS) {
      for (const permission of permissions(functionId)) {
        expect(permission).not.toMatch(/^\w+:\*/);
        if (permission.endsWith(' *')) expect(permission).toBe('dynamodb:ListStreams *');
      }
    }
  });
});
