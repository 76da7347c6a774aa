import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Aws, CfnOutput, RemovalPolicy, Stack, type StackProps } from 'aws-cdk-lib';
import type { NodejsFunction } from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as sns from 'aws-cdk-lib/aws-sns';
import type { Construct } from 'constructs';
import {
  BASE_MODELS_VAR,
  type DeployLimits,
  type GpuWorkersConfig,
  readConfig,
  readDeployContext,
  TOKENIZER_ID_VAR,
} from '../shared/base/config.js';
import { STACK_ENV_OUTPUTS } from '../shared/base/stack-outputs.js';
import {
  topology as declaredTopology,
  type FunctionDecl,
  type FunctionId,
  LANE_QUEUE_IDS,
  physicalName,
  type Topology,
} from '../shared/base/topology.js';
import { OperationsAlarms } from './constructs/alarms.js';
import { DataBucket } from './constructs/bucket.js';
import { OperationsDashboard } from './constructs/dashboard.js';
import { ExternalWorkerAccess } from './constructs/external-worker.js';
import { TopologyFunction } from './constructs/functions.js';
import { GpuWorkerFleet } from './constructs/gpu-workers.js';
import { bindBucket, bindQueue, bindTable } from './constructs/grants.js';
import { HttpEntry } from './constructs/http-api.js';
import { TopologyQueues } from './constructs/queues.js';
import { entriesOf, pascalCase } from './constructs/records.js';
import { TopologyTables } from './constructs/tables.js';
import { addQueueTrigger, addScheduleTrigger, addStreamTrigger } from './constructs/triggers.js';

/** The repository root: handler entries in the topology are relative to it. */
const PROJECT_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** The function that runs the reference CPU backend; GPU deployments run their own workers instead. */
const REFERENCE_WORKER: FunctionId = 'worker';

export interface TinkerServerlessStackProps extends StackProps {
  /** What to build; defaults to the project's declaration (`shared/base/topology.ts`). */
  readonly topology?: Topology;
  /** Prefix of every physical name (`physicalName(prefix, base)`); defaults to the lowercased stack name. */
  readonly namePrefix?: string;
  /**
   * Deploy the reference CPU worker as a Lambda consuming the work queue (default true). Without it,
   * external GPU worker processes consume the queue.
   */
  readonly referenceWorker?: boolean;
  /** For the tables, the bucket and the log groups (queues are always deleted); defaults to RETAIN. */
  readonly removalPolicy?: RemovalPolicy;
  readonly logRetention?: logs.RetentionDays;
  /**
   * get_info's `model_data.tokenizer_id` (REFERENCE_TOKENIZER_ID on the API function): an id the
   * clients' `AutoTokenizer.from_pretrained` can load, e.g. a Hub id they can reach or a folder they
   * all have. Unset, get_info omits it and the SDK guesses an id from the base model's name.
   */
  readonly tokenizerId?: string;
  /**
   * The pool's base models (BASE_MODELS on the API function, G6): a JSON list of `{"name",
   * "tokenizer_id"?, "max_context_length"?}`, checked at synth. Unset, the reference model alone.
   */
  readonly baseModels?: string;
  /**
   * The stage throttle and the api and worker reserved concurrency (defaults: shared/base/config.ts
   * `DEPLOY_LIMIT_DEFAULTS`, read from context by cdk/app.ts).
   */
  readonly limits?: DeployLimits;
  /** Quota variables for the api function (`readDeployContext`); unset ones keep their defaults. */
  readonly apiQuotaEnv?: Readonly<Record<string, string>>;
  /**
   * X-Ray active tracing on every function, which Powertools' Tracer fills in (default true; the
   * context's `tracing=false` turns it off, and the functions' POWERTOOLS_TRACE_ENABLED with it).
   */
  readonly tracing?: boolean;
  /**
   * The GPU worker fleet (cdk/constructs/gpu-workers.ts; the context's `gpuWorkers`): ECS tasks on EC2
   * GPU hosts that follow the work queue, to zero when idle. Needs the reference worker off and
   * `baseModels` naming the one model the workers load. Unset, no fleet.
   */
  readonly gpuWorkers?: GpuWorkersConfig;
}

/** Which deploy-time limit reserves each function's concurrency; the others keep their declaration's. */
const RESERVED_BY_LIMIT: Partial<Record<FunctionId, keyof DeployLimits>> = {
  api: 'apiReservedConcurrency',
  worker: 'workerReservedConcurrency',
};

function reservedConcurrencyOf(
  functionId: FunctionId,
  decl: FunctionDecl,
  limits: DeployLimits,
): number | undefined {
  const limit = RESERVED_BY_LIMIT[functionId];
  const reserved = limit === undefined ? decl.reservedConcurrency : limits[limit];
  for (const trigger of decl.triggers) {
    // Fewer reserved instances than the queue's pollers would throttle deliveries, which SQS counts
    // as receives towards the dead-letter queue.
    if (trigger.kind === 'queue' && reserved !== undefined && reserved < trigger.maxConcurrency) {
      throw new Error(
        `${functionId} reserves ${reserved} concurrent executions, below its queue trigger's maxConcurrency ${trigger.maxConcurrency}`,
      );
    }
  }
  return reserved;
}

/**
 * The model the GPU fleet's workers load: the pool must name it alone (each worker serves one base
 * model and the shared queue is not split by model), and no Lambda may take its work (the reference
 * backend would answer for any model name).
 */
function fleetBaseModel(props: TinkerServerlessStackProps): string {
  if (props.referenceWorker !== false) {
    throw new Error('gpuWorkers needs the reference worker off (referenceWorker=false)');
  }
  if (props.baseModels === undefined) {
    throw new Error('gpuWorkers needs baseModels naming the model the GPU workers load');
  }
  const names = readConfig({ [BASE_MODELS_VAR]: props.baseModels }).baseModels.map((model) => model.name);
  const wanted = props.gpuWorkers?.baseModel ?? names[0];
  if (names.length !== 1 || wanted === undefined || wanted !== names[0]) {
    throw new Error(
      `gpuWorkers serves one base model, which baseModels must name alone; baseModels names ${names.join(', ')}`,
    );
  }
  return wanted;
}

/** The whole system, built from the topology declaration and nothing else. */
export class TinkerServerlessStack extends Stack {
  readonly tables: TopologyTables;
  readonly bucket: DataBucket;
  readonly queues: TopologyQueues;
  readonly functions: Partial<Record<FunctionId, NodejsFunction>> = {};
  /** Whether the functions are traced (cdk/nag.ts acknowledges the X-Ray grant it brings). */
  readonly tracing: boolean;
  readonly http?: HttpEntry;
  readonly gpuWorkers?: GpuWorkerFleet;

  constructor(scope: Construct, id: string, props: TinkerServerlessStackProps = {}) {
    super(scope, id, props);
    const topology = props.topology ?? declaredTopology;
    const namePrefix = props.namePrefix ?? this.stackName.toLowerCase();
    // The prefix also names the bucket, whose names allow only lowercase letters, digits and hyphens.
    if (!/^[a-z0-9][a-z0-9-]*$/.test(namePrefix)) {
      throw new Error(`Name prefix "${namePrefix}" must be lowercase letters, digits and hyphens`);
    }
    const removalPolicy = props.removalPolicy ?? RemovalPolicy.RETAIN;
    const limits = props.limits ?? readDeployContext(() => undefined).limits;
    this.tracing = props.tracing ?? true;
    // A malformed list fails the synth, naming the context's variable, not the first request.
    if (props.baseModels !== undefined) void readConfig({ [BASE_MODELS_VAR]: props.baseModels }).baseModels;
    const fleetModel = props.gpuWorkers === undefined ? undefined : fleetBaseModel(props);

    this.tables = new TopologyTables(this, 'Tables', { tables: topology.tables, namePrefix, removalPolicy });
    this.bucket = new DataBucket(this, 'Data', { decl: topology.bucket, namePrefix, removalPolicy });
    this.queues = new TopologyQueues(this, 'Queues', { queues: topology.queues, namePrefix });

    for (const [functionId, decl] of entriesOf(topology.functions)) {
      if (functionId === REFERENCE_WORKER && props.referenceWorker === false) continue;
      const reservedConcurrency = reservedConcurrencyOf(functionId, decl, limits);
      const construct = new TopologyFunction(this, pascalCase(functionId), {
        functionId,
        decl: reservedConcurrency === undefined ? decl : { ...decl, reservedConcurrency },
        settings: topology.settings,
        projectRoot: PROJECT_ROOT,
        logRetention: props.logRetention ?? logs.RetentionDays.ONE_MONTH,
        removalPolicy,
        tracing: this.tracing,
      });
      const fn = construct.function;
      this.functions[functionId] = fn;

      for (const [tableId, actions] of entriesOf(decl.grants.tables)) {
        bindTable(fn, this.tables.byId[tableId], topology.tables[tableId], actions);
      }
      bindBucket(fn, this.bucket.bucket, topology.bucket, decl.grants.bucket);
      for (const [queueId, actions] of entriesOf(decl.grants.queues)) {
        bindQueue(fn, this.queues.byId[queueId], topology.queues[queueId], actions);
      }

      for (const [index, trigger] of decl.triggers.entries()) {
        switch (trigger.kind) {
          case 'http':
            if (props.tokenizerId !== undefined) fn.addEnvironment(TOKENIZER_ID_VAR, props.tokenizerId);
            if (props.baseModels !== undefined) fn.addEnvironment(BASE_MODELS_VAR, props.baseModels);
            for (const [name, value] of Object.entries(props.apiQuotaEnv ?? {}))
              fn.addEnvironment(name, value);
            this.http ??= new HttpEntry(this, 'Http', {
              apiName: physicalName(namePrefix, 'api'),
              throttle: { ratePerSecond: limits.apiRatePerSecond, burst: limits.apiBurst },
              logRetention: props.logRetention ?? logs.RetentionDays.ONE_MONTH,
              removalPolicy,
            });
            this.http.route(functionId, fn, trigger.basePath, decl.timeoutSeconds, trigger.routes);
            break;
          case 'stream':
            addStreamTrigger(
              fn,
              this.tables.byId[trigger.table],
              topology.tables[trigger.table],
              trigger,
              this.queues.byId[trigger.onFailure],
            );
            break;
          case 'queue':
            addQueueTrigger(
              fn,
              decl,
              this.queues.byId[trigger.queue],
              topology.queues[trigger.queue],
              trigger,
            );
            break;
          case 'schedule':
            addScheduleTrigger(construct, `Schedule${index}`, fn, trigger);
            break;
        }
      }
    }

    this.addOutputs(topology);
    const external = this.addOperations(topology, namePrefix, props.referenceWorker !== false);
    if (props.gpuWorkers !== undefined && fleetModel !== undefined) {
      this.gpuWorkers = new GpuWorkerFleet(this, 'GpuWorkers', {
        config: props.gpuWorkers,
        namePrefix,
        baseModel: fleetModel,
        workerPolicy: external.access.policy,
        environment: external.access.environment,
        workQueue: this.queues.byId.work,
        laneQueues: LANE_QUEUE_IDS.map((id) => this.queues.byId[id]),
        alarmTopic: external.alarmTopic,
        projectRoot: PROJECT_ROOT,
        logRetention: props.logRetention ?? logs.RetentionDays.ONE_MONTH,
        removalPolicy,
      });
      new CfnOutput(this, 'GpuWorkerCluster', {
        description: 'The ECS cluster of the GPU worker fleet',
        value: this.gpuWorkers.cluster.clusterName,
      });
    }
  }

  /** Alarms, the dashboard, and what external (GPU) workers need (`cdk/constructs/alarms.ts` and siblings). */
  private addOperations(
    topology: Topology,
    namePrefix: string,
    referenceWorker: boolean,
  ): { access: ExternalWorkerAccess; alarmTopic: sns.ITopic } {
    const scheduler = this.functions.scheduler;
    const pool = topology.settings.POOL;
    const deadLetter = topology.queues.work.deadLetter;
    if (scheduler === undefined || pool === undefined || deadLetter === undefined) {
      throw new Error('Operations need the scheduler function, the POOL setting and the work queue DLQ');
    }
    const deadLetterQueue = this.queues.byId[deadLetter.queue];
    const streamFailures = new Set(
      topology.functions.scheduler.triggers.flatMap((trigger) =>
        trigger.kind === 'stream' ? [trigger.onFailure] : [],
      ),
    );
    const [streamFailureQueue, ...others] = streamFailures;
    if (streamFailureQueue === undefined || others.length > 0) {
      throw new Error('Operations expect the scheduler stream triggers to share one on-failure queue');
    }
    const alarms = new OperationsAlarms(this, 'Alarms', {
      namePrefix,
      pool,
      deadLetterQueue,
      streamDeadLetterQueue: this.queues.byId[streamFailureQueue],
      scheduler,
    });
    const { dashboard } = new OperationsDashboard(this, 'Operations', {
      namePrefix,
      pool,
      workQueue: this.queues.byId.work,
      deadLetterQueue,
      functions: this.functions,
      alarms: Object.values(alarms.alarms),
      oldestPendingAgeThresholdSeconds: alarms.thresholds.oldestPendingAgeSeconds,
    });
    const access = new ExternalWorkerAccess(this, 'ExternalWorker', {
      topology,
      namePrefix,
      referenceWorker,
      tables: this.tables.byId,
      bucket: this.bucket.bucket,
      queues: this.queues.byId,
    });
    new CfnOutput(this, 'AlarmTopicArn', {
      description: 'Every alarm publishes here: subscribe an email or a pager',
      value: alarms.topic.topicArn,
    });
    new CfnOutput(this, 'DashboardUrl', {
      value: `https://${Aws.REGION}.console.aws.amazon.com/cloudwatch/home?region=${Aws.REGION}#dashboards:name=${dashboard.dashboardName}`,
    });
    return { access, alarmTopic: alarms.topic };
  }

  private addOutputs(topology: Topology): void {
    if (this.http) new CfnOutput(this, 'ApiUrl', { value: this.http.api.apiEndpoint });
    // The operator's environment: every resource's variable, whichever function it is granted to.
    const operatorEnv: Record<string, string> = { ...topology.settings, AWS_REGION: Aws.REGION };
    for (const [tableId, table] of entriesOf(this.tables.byId)) {
      new CfnOutput(this, `${pascalCase(tableId)}TableName`, { value: table.tableName });
      operatorEnv[topology.tables[tableId].envVar] = table.tableName;
    }
    new CfnOutput(this, `${pascalCase(topology.bucket.name)}BucketName`, {
      value: this.bucket.bucket.bucketName,
    });
    operatorEnv[topology.bucket.envVar] = this.bucket.bucket.bucketName;
    for (const [queueId, queue] of entriesOf(this.queues.byId)) {
      new CfnOutput(this, `${pascalCase(queueId)}QueueUrl`, { value: queue.queueUrl });
      const envVar = topology.queues[queueId].envVar;
      if (envVar !== undefined) operatorEnv[envVar] = queue.queueUrl;
    }
    new CfnOutput(this, STACK_ENV_OUTPUTS.operator, {
      description: 'Variables for the operator CLI (--env-file): every table, the bucket, every queue',
      value: this.toJsonString(operatorEnv),
    });
  }
}
