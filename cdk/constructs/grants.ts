import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import {
  bucketEnvVar,
  INDEX_ACTIONS,
  LIST_ACTIONS,
  leadingKeysCondition,
  OBJECT_ACTIONS,
  QUEUE_ACTIONS,
  queueEnvVar,
  splitTableGrants,
  TABLE_ACTIONS,
  tableEnvVar,
} from '../../shared/base/grants.js';
import type {
  BucketDecl,
  FunctionGrants,
  QueueAction,
  QueueDecl,
  TableDecl,
  TableGrant,
} from '../../shared/base/topology.js';

// The meaning of each topology action lives in shared/, where the local runtime's enforcement reads it too.
export { INDEX_ACTIONS, OBJECT_ACTIONS, QUEUE_ACTIONS, TABLE_ACTIONS } from '../../shared/base/grants.js';

/**
 * Each helper here grants a function exactly the actions its topology entry lists and, in the same
 * place, hands it the resource's name through the declared environment variable: a function can only
 * learn of a resource it is allowed to touch. Which variable a grant gives is decided in
 * shared/base/grants.ts, where the local runtime reads it too.
 */

export function bindTable(
  fn: lambda.Function,
  table: dynamodb.Table,
  decl: TableDecl,
  grants: readonly TableGrant[],
): void {
  const envVar = tableEnvVar(decl, grants);
  if (envVar === undefined) return;
  for (const statement of tableStatements(table, decl, grants)) fn.addToRolePolicy(statement);
  fn.addEnvironment(envVar, table.tableName);
}

/**
 * The statements of a table's grants, for a function's role and the external worker's managed
 * policy alike: the bare actions on the table ARN, each keyed grant on the table ARN under its
 * `dynamodb:LeadingKeys` condition, `query-index` on the declared index ARNs.
 */
export function tableStatements(
  table: dynamodb.ITable,
  decl: TableDecl,
  grants: readonly TableGrant[],
): iam.PolicyStatement[] {
  const { actions, keyed } = splitTableGrants(grants);
  const statements: iam.PolicyStatement[] = [];
  const tableActions = unique(
    actions.flatMap((action) => (action === 'query-index' ? [] : TABLE_ACTIONS[action])),
  );
  if (tableActions.length > 0) {
    statements.push(new iam.PolicyStatement({ actions: tableActions, resources: [table.tableArn] }));
  }
  for (const grant of keyed) {
    if (grant.keyPrefixes.length === 0 || grant.actions.length === 0) {
      throw new Error(`Table ${decl.name} has a keyed grant without key prefixes or actions`);
    }
    statements.push(
      new iam.PolicyStatement({
        actions: unique(grant.actions.flatMap((action) => TABLE_ACTIONS[action])),
        resources: [table.tableArn],
        conditions: leadingKeysCondition(grant),
      }),
    );
  }
  if (actions.includes('query-index')) {
    if (decl.indexes.length === 0) {
      throw new Error(`Table ${decl.name} has no index, but a function is granted query-index on it`);
    }
    statements.push(
      new iam.PolicyStatement({
        actions: [...INDEX_ACTIONS],
        resources: decl.indexes.map((index) => `${table.tableArn}/index/${index.name}`),
      }),
    );
  }
  return statements;
}

export function bindBucket(
  fn: lambda.Function,
  bucket: s3.Bucket,
  decl: BucketDecl,
  grants: FunctionGrants['bucket'],
): void {
  const envVar = bucketEnvVar(decl, grants);
  if (envVar === undefined) return;
  for (const { prefix, actions } of grants) {
    const objectActions = unique(
      actions.flatMap((action) => (action === 'list' ? [] : OBJECT_ACTIONS[action])),
    );
    if (objectActions.length > 0) {
      fn.addToRolePolicy(
        new iam.PolicyStatement({ actions: objectActions, resources: [bucket.arnForObjects(`${prefix}*`)] }),
      );
    }
    if (actions.includes('list')) {
      fn.addToRolePolicy(
        new iam.PolicyStatement({
          actions: [...LIST_ACTIONS],
          resources: [bucket.bucketArn],
          // Listing is limited to the granted prefix unless the grant covers the whole bucket.
          conditions: prefix === '' ? undefined : { StringLike: { 's3:prefix': [`${prefix}*`] } },
        }),
      );
    }
  }
  fn.addEnvironment(envVar, bucket.bucketName);
}

export function bindQueue(
  fn: lambda.Function,
  queue: sqs.Queue,
  decl: QueueDecl,
  actions: readonly QueueAction[],
): void {
  if (actions.length === 0) return;
  const envVar = queueEnvVar(decl, actions);
  if (envVar === undefined) {
    throw new Error(`Queue ${decl.name} is granted to a function but declares no envVar for its URL`);
  }
  fn.addToRolePolicy(
    new iam.PolicyStatement({
      actions: unique(actions.flatMap((action) => QUEUE_ACTIONS[action])),
      resources: [queue.queueArn],
    }),
  );
  fn.addEnvironment(envVar, queue.queueUrl);
}

function unique(values: readonly string[]): string[] {
  return [...new Set(values)];
}
