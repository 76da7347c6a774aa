import { Aws, CfnOutput, Stack } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { STACK_ENV_OUTPUTS } from '../../shared/base/stack-outputs.js';
import { physicalName, type QueueId, type TableId, type Topology } from '../../shared/base/topology.js';
import { OBJECT_ACTIONS, QUEUE_ACTIONS, tableStatements } from './grants.js';
import { entriesOf } from './records.js';

/** Stack outputs about workers (logical ids at the stack's top level, so `--outputs-file` keys are stable). */
export const WORKER_OUTPUTS = {
  /** JSON map of the variables `npm run worker` needs: the worker function's. */
  env: STACK_ENV_OUTPUTS.worker,
  /** `reference-lambda` or `external`. */
  mode: 'WorkerMode',
  /** A managed policy with exactly the worker's grants, to attach to a GPU host's role. */
  policy: 'ExternalWorkerPolicyArn',
} as const;

export interface ExternalWorkerAccessProps {
  readonly topology: Topology;
  readonly namePrefix: string;
  readonly referenceWorker: boolean;
  readonly tables: Readonly<Record<TableId, dynamodb.ITable>>;
  readonly bucket: s3.IBucket;
  readonly queues: Readonly<Record<QueueId, sqs.IQueue>>;
}

/**
 * What a worker outside Lambda (a GPU host running `npm run worker`) needs: its environment, as one
 * output, and the worker's exact grants from the topology, as a managed policy. Built whether or not
 * the reference worker Lambda is deployed (external workers may run beside it on the same queue);
 * `WorkerMode` says which applies.
 */
export class ExternalWorkerAccess extends Construct {
  readonly policy: iam.ManagedPolicy;
  readonly environment: Readonly<Record<string, string>>;

  constructor(scope: Construct, id: string, props: ExternalWorkerAccessProps) {
    super(scope, id);
    const { topology } = props;
    const grants = topology.functions.worker.grants;
    const environment: Record<string, string> = { ...topology.settings, AWS_REGION: Aws.REGION };
    const statements: iam.PolicyStatement[] = [];

    for (const [tableId, actions] of entriesOf(grants.tables)) {
      const table = props.tables[tableId];
      const decl = topology.tables[tableId];
      // The role's own statements, key conditions included: a host gets no more than the Lambda.
      statements.push(...tableStatements(table, decl, actions));
      environment[decl.envVar] = table.tableName;
    }
    for (const { prefix, actions } of grants.bucket) {
      const objectActions = actions.flatMap((action) => (action === 'list' ? [] : OBJECT_ACTIONS[action]));
      if (objectActions.length > 0) {
        statements.push(
          new iam.PolicyStatement({
            actions: objectActions,
            resources: [props.bucket.arnForObjects(`${prefix}*`)],
          }),
        );
      }
    }
    if (grants.bucket.length > 0) environment[topology.bucket.envVar] = props.bucket.bucketName;
    for (const [queueId, actions] of entriesOf(grants.queues)) {
      const envVar = topology.queues[queueId].envVar;
      if (envVar === undefined)
        throw new Error(`Queue ${queueId} is granted to the worker but has no envVar`);
      statements.push(
        new iam.PolicyStatement({
          actions: [...new Set(actions.flatMap((action) => QUEUE_ACTIONS[action]))],
          resources: [props.queues[queueId].queueArn],
        }),
      );
      environment[envVar] = props.queues[queueId].queueUrl;
    }

    this.environment = environment;
    this.policy = new iam.ManagedPolicy(this, 'Policy', {
      managedPolicyName: physicalName(props.namePrefix, 'external-worker'),
      description: 'What an external worker (npm run worker) may touch: the worker grants of the topology',
      statements,
    });

    const stack = Stack.of(this);
    new CfnOutput(stack, WORKER_OUTPUTS.env, {
      description: 'Variables for npm run worker on an external (GPU) host',
      value: stack.toJsonString(environment),
    });
    new CfnOutput(stack, WORKER_OUTPUTS.mode, {
      description: props.referenceWorker
        ? 'The reference CPU worker Lambda consumes the work queue'
        : 'No worker Lambda: run npm run worker on your hosts with WorkerEnv and ExternalWorkerPolicyArn',
      value: props.referenceWorker ? 'reference-lambda' : 'external',
    });
    new CfnOutput(stack, WORKER_OUTPUTS.policy, { value: this.policy.managedPolicyArn });
  }
}
