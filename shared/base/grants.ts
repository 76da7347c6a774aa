import type {
  BucketAction,
  BucketDecl,
  FunctionGrants,
  KeyedTableGrant,
  QueueAction,
  QueueDecl,
  QueueId,
  TableAction,
  TableDecl,
  TableGrant,
  TableId,
  Topology,
} from './topology.js';

/**
 * What each topology action means in IAM actions. One table, read by the CDK when it builds the
 * functions' roles (`cdk/constructs/grants.ts`) and by the local runtime when it checks a handler's
 * SDK calls (`local/runtime/grant-enforcement.ts`): a grant means the same on AWS and on a laptop. Pure data
 * and pure functions; no AWS construct or SDK client is imported here.
 */

/** IAM actions on the table itself, per topology action. */
export const TABLE_ACTIONS: Readonly<Record<Exclude<TableAction, 'query-index'>, readonly string[]>> = {
  get: ['dynamodb:GetItem'],
  'batch-get': ['dynamodb:BatchGetItem'],
  query: ['dynamodb:Query'],
  put: ['dynamodb:PutItem'],
  update: ['dynamodb:UpdateItem'],
  delete: ['dynamodb:DeleteItem'],
  'batch-write': ['dynamodb:BatchWriteItem'],
  // TransactWriteItems is authorised item by item, each as the single-item action it performs; its
  // condition checks need this (and TransactGetItems needs `get`).
  'condition-check': ['dynamodb:ConditionCheckItem'],
  scan: ['dynamodb:Scan'],
};

/** The condition key of a keyed grant: the partition key values of the items a request names. */
export const LEADING_KEYS = 'dynamodb:LeadingKeys';

/**
 * The IAM condition of a keyed grant. `ForAllValues` makes a batch match only when every key it
 * names does; but `ForAllValues` also holds when a request carries no key at all, so `Null: false`
 * requires the key to be present (a request without one matches no keyed grant).
 */
export function leadingKeysCondition(grant: KeyedTableGrant): Record<string, Record<string, unknown>> {
  return {
    'ForAllValues:StringLike': { [LEADING_KEYS]: grant.keyPrefixes.map((prefix) => `${prefix}*`) },
    Null: { [LEADING_KEYS]: 'false' },
  };
}

/** Whether `leadingKeys` satisfy a keyed grant's condition (see `leadingKeysCondition`). */
export function leadingKeysMatch(
  grant: KeyedTableGrant,
  leadingKeys: readonly string[] | undefined,
): boolean {
  return (
    leadingKeys !== undefined &&
    leadingKeys.length > 0 &&
    leadingKeys.every((key) => grant.keyPrefixes.some((prefix) => key.startsWith(prefix)))
  );
}

/** The bare actions of a table's grants (on every item) and its keyed grants, apart. */
export function splitTableGrants(grants: readonly TableGrant[]): {
  readonly actions: readonly TableAction[];
  readonly keyed: readonly KeyedTableGrant[];
} {
  const actions: TableAction[] = [];
  const keyed: KeyedTableGrant[] = [];
  for (const grant of grants) {
    if (typeof grant === 'string') actions.push(grant);
    else keyed.push(grant);
  }
  return { actions, keyed };
}

/** `query-index` is a Query on the table's index ARNs only; `read` does not reach an index. */
export const INDEX_ACTIONS: readonly string[] = ['dynamodb:Query'];

/** IAM actions on objects under a granted prefix; `list` is a bucket action (`LIST_ACTIONS`). */
export const OBJECT_ACTIONS: Readonly<Record<Exclude<BucketAction, 'list'>, readonly string[]>> = {
  get: ['s3:GetObject'],
  // A multipart put that fails is aborted by its writer (shared/services/scheduler/dispatch.ts), so its parts
  // are not kept until the bucket's lifecycle rule removes them.
  put: ['s3:PutObject', 's3:AbortMultipartUpload'],
  delete: ['s3:DeleteObject'],
};

/** `list` is ListBucket on the bucket, conditioned on `s3:prefix` unless the grant's prefix is empty. */
export const LIST_ACTIONS: readonly string[] = ['s3:ListBucket'];

export const QUEUE_ACTIONS: Readonly<Record<QueueAction, readonly string[]>> = {
  send: ['sqs:SendMessage'],
  consume: [
    'sqs:ReceiveMessage',
    'sqs:DeleteMessage',
    'sqs:ChangeMessageVisibility',
    'sqs:GetQueueAttributes',
    'sqs:GetQueueUrl',
  ],
  depth: ['sqs:GetQueueAttributes'],
};

/** A resource an IAM request names, by its topology id (`undeclared`: nothing in the topology). */
export type IamResource =
  | { readonly kind: 'table'; readonly table: TableId }
  | { readonly kind: 'index'; readonly table: TableId; readonly index: string }
  | { readonly kind: 'object'; readonly key: string }
  /** The bucket itself; `prefix` is the `s3:prefix` condition key of a listing (absent: not set). */
  | { readonly kind: 'bucket'; readonly prefix?: string }
  | { readonly kind: 'queue'; readonly queue: QueueId }
  | { readonly kind: 'undeclared'; readonly name: string };

/** One authorisation IAM makes: an action (`dynamodb:PutItem`, `s3:GetObject`...) on one resource. */
export interface IamRequest {
  readonly action: string;
  readonly resource: IamResource;
  /**
   * On a table: the partition key values of the items the request names (`dynamodb:LeadingKeys`),
   * every key of a batch; absent when it names none (a Scan) or none could be read from its input.
   */
  readonly leadingKeys?: readonly string[];
}

/**
 * Whether a role built from `grants` allows `request`, statement by statement as the CDK writes
 * them: table actions on the table ARN (a keyed grant's only when every leading key of the request
 * starts with one of its prefixes), `query-index` on the table's declared index ARNs, object
 * actions on `<prefix>*`, ListBucket on the bucket with `StringLike s3:prefix <prefix>*` (no
 * condition for the empty prefix), queue actions on the queue ARN. Nothing else is allowed.
 */
export function grantsAllow(
  grants: FunctionGrants,
  request: IamRequest,
  tables: Readonly<Record<TableId, Pick<TableDecl, 'indexes'>>>,
): boolean {
  const { action, resource } = request;
  switch (resource.kind) {
    case 'table':
      return (grants.tables[resource.table] ?? []).some((granted) =>
        typeof granted === 'string'
          ? granted !== 'query-index' && TABLE_ACTIONS[granted].includes(action)
          : granted.actions.some((keyed) => TABLE_ACTIONS[keyed].includes(action)) &&
            leadingKeysMatch(granted, request.leadingKeys),
      );
    case 'index':
      return (
        (grants.tables[resource.table] ?? []).includes('query-index') &&
        INDEX_ACTIONS.includes(action) &&
        tables[resource.table].indexes.some((index) => index.name === resource.index)
      );
    case 'object':
      return grants.bucket.some(
        ({ prefix, actions }) =>
          resource.key.startsWith(prefix) &&
          actions.some((granted) => granted !== 'list' && OBJECT_ACTIONS[granted].includes(action)),
      );
    case 'bucket':
      return grants.bucket.some(
        ({ prefix, actions }) =>
          actions.includes('list') &&
          LIST_ACTIONS.includes(action) &&
          // A condition on a key the request does not carry does not match (IAM's StringLike).
          (prefix === '' || (resource.prefix?.startsWith(prefix) ?? false)),
      );
    case 'queue':
      return (grants.queues[resource.queue] ?? []).some((granted) => QUEUE_ACTIONS[granted].includes(action));
    case 'undeclared':
      return false;
  }
}

/**
 * Environment variables, the other half of a grant: a function learns a resource's name only through
 * a grant on it (the CDK binds the variable where it grants the actions, `cdk/constructs/grants.ts`),
 * and the local runtime hides every other resource variable from its handlers
 * (`local/runtime/env-scope.ts`). Each helper answers the variable a function gets for one resource, if any.
 */

/** A table's variable, for a function granted any action on it. */
export function tableEnvVar(decl: TableDecl, actions: readonly TableGrant[] | undefined): string | undefined {
  return (actions?.length ?? 0) > 0 ? decl.envVar : undefined;
}

/** The bucket's variable, for a function with any grant on it, whatever the prefix. */
export function bucketEnvVar(decl: BucketDecl, grants: FunctionGrants['bucket']): string | undefined {
  return grants.length > 0 ? decl.envVar : undefined;
}

/** A queue's variable, for a function granted any action on it; a queue that declares none gives none. */
export function queueEnvVar(
  decl: QueueDecl,
  actions: readonly QueueAction[] | undefined,
): string | undefined {
  return (actions?.length ?? 0) > 0 ? decl.envVar : undefined;
}

type ResourceDecls = Pick<Topology, 'tables' | 'bucket' | 'queues'>;

/** The resource variables a function with `grants` gets, in topology order (tables, bucket, queues). */
export function grantedEnvVars(resources: ResourceDecls, grants: FunctionGrants): string[] {
  return [
    ...(Object.keys(resources.tables) as TableId[]).flatMap(
      (id) => tableEnvVar(resources.tables[id], grants.tables[id]) ?? [],
    ),
    ...[bucketEnvVar(resources.bucket, grants.bucket)].flatMap((envVar) => envVar ?? []),
    ...(Object.keys(resources.queues) as QueueId[]).flatMap(
      (id) => queueEnvVar(resources.queues[id], grants.queues[id]) ?? [],
    ),
  ];
}

/** Every resource variable the topology declares: what a function with every grant would get. */
export function resourceEnvVars(resources: ResourceDecls): string[] {
  return [
    ...Object.values(resources.tables).map((table) => table.envVar),
    resources.bucket.envVar,
    ...Object.values(resources.queues).flatMap((queue) => queue.envVar ?? []),
  ];
}
