import { type App, type CfnElement, type Stack, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import type { IConstruct } from 'constructs';
import { topology as declaredTopology, type Topology } from '../shared/base/topology.js';
import { entriesOf } from './constructs/records.js';
import type { TinkerServerlessStack } from './stack.js';

/**
 * cdk-nag's AwsSolutions checks on the stack (cdk-nag 3: a policy validation plugin, so synthesis stops
 * on any finding not acknowledged). What could be fixed is fixed in the constructs (one role per
 * function without AWS managed policies, API access logs, encrypted and TLS-only tables, bucket and
 * queues, a dead-letter queue for the work queue); the findings below are accepted by design, each
 * on the narrowest construct it concerns and with its reason.
 */

export interface NagAcknowledgment {
  readonly scope: IConstruct;
  readonly id: string;
  readonly reason: string;
}

const REASONS = {
  bucketPrefix:
    'Object keys are minted per request, model or epoch under this key prefix, which the topology grants ' +
    '(shared/base/topology.ts; asserted per function in test/cdk/iam.test.ts): a wildcard below the prefix is the ' +
    'narrowest grant that can name them.',
  listStreams:
    'dynamodb:ListStreams has no resource-level permissions; the DynamoDB event source mapping needs it. Reading ' +
    'records is granted on the one table stream this function is triggered by.',
  xray:
    'xray:PutTraceSegments and xray:PutTelemetryRecords have no resource-level permissions; active tracing ' +
    '(on unless the context sets tracing=false) needs them to send the function’s traces.',
  runtime:
    'Pinned to nodejs22.x on purpose: the bundle targets node22 and the suite runs on that line; moving to a newer ' +
    'runtime is a deliberate, tested upgrade rather than drift (test/cdk/functions.test.ts pins it).',
  apiAuthorization:
    'Every route authenticates in the handler with an X-API-Key (the Tinker SDK sends it), looked up by its ' +
    'sha256 in the registry and bound to a tenant, or for the status page data to an operator ' +
    '(shared/repositories/api-keys.ts, shared/services/api/operator-auth.ts); API Gateway authorizers cannot express ' +
    'that key model, and unauthenticated requests answer 401 before touching any data (the status page HTML ' +
    'and its script and styles hold no data and need no key).',
  streamFailureQueue:
    'This queue is the on-failure destination of DynamoDB stream event source mappings: Lambda writes failure ' +
    'records (shard and sequence range) to it and nothing consumes it, so there is no receive to fail and ' +
    'nothing a dead-letter queue of its own would catch; the stream-dlq-not-empty alarm watches it.',
  bucketAccessLogs:
    'Every object access is made by the stack’s own functions under least-privilege roles, and API requests are ' +
    'logged by the API stage; S3 server access logs would need a second bucket this stack does not otherwise ' +
    'need (CloudTrail data events can be enabled per account when an audit requires them).',
  ecsAgent:
    'The GPU hosts’ role holds what the ECS agent needs to register the instance and report its tasks, as CDK ' +
    'grants it for a cluster’s capacity (ecs:Submit*, ecs:Poll, ecs:StartTelemetrySession, ecr:GetAuthorizationToken ' +
    'and the like have no resource-level permissions or act on resources ECS names at run time); the worker ' +
    'itself runs under the task role, which has the worker grants of the topology alone.',
  ecsExecution:
    'The task execution role pulls the worker image and writes its log stream: ecr:GetAuthorizationToken has no ' +
    'resource-level permissions; the image repository and log group are named in their own statements.',
  ecsEnvironment:
    'The worker’s variables are resource names (tables, queues, bucket) and settings, the same as the WorkerEnv ' +
    'output, and no secret: credentials come from the task role.',
  hostVolumes:
    'The hosts’ launch template encrypts their root volume (asserted in test/cdk/gpu-workers.test.ts); the rule ' +
    'reads launch configurations, and the group launches from a launch template through a mixed instances policy.',
} as const;

/** The findings a stack built from `topology` accepts, with their reasons. */
export function nagAcknowledgments(
  stack: TinkerServerlessStack,
  topology: Topology = declaredTopology,
): NagAcknowledgment[] {
  const acknowledgments: NagAcknowledgment[] = [];
  const bucket = stack.getLogicalId(stack.bucket.bucket.node.defaultChild as CfnElement);
  // Any policy may be granted a declared prefix (function roles, the external worker's policy); the
  // finding names the bucket and the prefix, so nothing else is acknowledged with it.
  const prefixes = new Set<string>();
  for (const [, decl] of entriesOf(topology.functions)) {
    for (const grant of decl.grants.bucket) {
      if (grant.actions.some((action) => action !== 'list')) prefixes.add(grant.prefix);
    }
  }
  for (const prefix of [...prefixes].sort()) {
    acknowledgments.push({
      scope: stack,
      id: `AwsSolutions-IAM5[Resource::<${bucket}.Arn>/${prefix}*]`,
      reason: REASONS.bucketPrefix,
    });
  }
  for (const [functionId, fn] of entriesOf(stack.functions)) {
    acknowledgments.push({ scope: fn, id: 'AwsSolutions-L1', reason: REASONS.runtime });
    const streamTriggered = topology.functions[functionId].triggers.some(
      (trigger) => trigger.kind === 'stream',
    );
    // One acknowledgment per role and finding: its reason names each wildcard action it covers.
    const wildcardReasons = [
      ...(streamTriggered ? [REASONS.listStreams] : []),
      ...(stack.tracing ? [REASONS.xray] : []),
    ];
    if (wildcardReasons.length > 0 && fn.role !== undefined) {
      acknowledgments.push({
        scope: fn.role,
        id: 'AwsSolutions-IAM5[Resource::*]',
        reason: wildcardReasons.join(' '),
      });
    }
  }
  if (stack.http)
    acknowledgments.push({ scope: stack.http, id: 'AwsSolutions-APIG4', reason: REASONS.apiAuthorization });
  const streamFailureQueues = new Set(
    entriesOf(topology.functions).flatMap(([, decl]) =>
      decl.triggers.flatMap((trigger) => (trigger.kind === 'stream' ? [trigger.onFailure] : [])),
    ),
  );
  for (const queueId of [...streamFailureQueues].sort()) {
    acknowledgments.push({
      scope: stack.queues.byId[queueId],
      id: 'AwsSolutions-SQS3',
      reason: REASONS.streamFailureQueue,
    });
  }
  acknowledgments.push({ scope: stack.bucket, id: 'AwsSolutions-S1', reason: REASONS.bucketAccessLogs });
  const fleet = stack.gpuWorkers;
  if (fleet !== undefined) {
    const hostRole = fleet.hosts.role;
    acknowledgments.push(
      { scope: hostRole, id: 'AwsSolutions-IAM5[Action::ecs:Submit*]', reason: REASONS.ecsAgent },
      { scope: hostRole, id: 'AwsSolutions-IAM5[Resource::*]', reason: REASONS.ecsAgent },
      { scope: fleet.hosts, id: 'AwsSolutions-EC26', reason: REASONS.hostVolumes },
      { scope: fleet.taskDefinition, id: 'AwsSolutions-ECS2', reason: REASONS.ecsEnvironment },
    );
    const executionRole = fleet.taskDefinition.executionRole;
    if (executionRole !== undefined) {
      acknowledgments.push({
        scope: executionRole,
        id: 'AwsSolutions-IAM5[Resource::*]',
        reason: REASONS.ecsExecution,
      });
    }
  }
  return acknowledgments;
}

/** Records the acknowledgments on the construct tree, where cdk-nag reads them. */
export function acknowledgeNagFindings(
  stack: TinkerServerlessStack,
  topology: Topology = declaredTopology,
): void {
  for (const { scope, id, reason } of nagAcknowledgments(stack, topology)) {
    Validations.of(scope).acknowledge({ id, reason });
  }
}

/** Acknowledges the accepted findings of each stack and makes synthesis run the AwsSolutions checks. */
export function addNagChecks(app: App, stacks: readonly TinkerServerlessStack[]): AwsSolutionsChecks {
  for (const stack of stacks) acknowledgeNagFindings(stack);
  const checks = new AwsSolutionsChecks(app, { verbose: true });
  Validations.of(app).addPlugins(checks);
  return checks;
}

/** Runs the checks on one stack now (tests): the findings that are not acknowledged. */
export function nagFindings(stack: Stack): ReturnType<AwsSolutionsChecks['validateScope']>['violations'] {
  return new AwsSolutionsChecks(stack, { verbose: true }).validateScope(stack).violations;
}
