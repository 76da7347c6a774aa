import type { Template } from 'aws-cdk-lib/assertions';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { WORKER_OUTPUTS } from '../../cdk/constructs/external-worker.js';
import { resetConfig } from '../../shared/base/config.js';
import { parseEnvFile } from '../../shared/base/env-file.js';
import { STACK_ENV_OUTPUTS } from '../../shared/base/stack-outputs.js';
import {
  FUNCTION_IDS,
  LANE_QUEUE_IDS,
  physicalName,
  QUEUE_IDS,
  type QueueId,
  TABLE_IDS,
  topology,
} from '../../shared/base/topology.js';
import {
  emitMetric,
  METRICS_NAMESPACE,
  type OpsMetric,
  opsMetrics,
  POOL_DIMENSION,
} from '../../shared/services/ops/metrics.js';
import {
  functionLogicalId,
  logicalIdWhere,
  properties,
  type Synthesized,
  synth,
  TEST_PREFIX,
} from '../support/cdk/synth.js';

const withWorker = synth();
const external = synth({ referenceWorker: false });
const POOL = topology.settings.POOL!;

type Resource = { Properties: Record<string, unknown> };
type Statement = { Effect: string; Action: string | string[]; Resource: unknown; Condition?: unknown };

function queueId(template: Template, id: QueueId): string {
  return logicalIdWhere(
    template,
    'AWS::SQS::Queue',
    'QueueName',
    physicalName(TEST_PREFIX, topology.queues[id].name),
  );
}

function alarm(template: Template, suffix: string): Record<string, unknown> {
  const id = logicalIdWhere(
    template,
    'AWS::CloudWatch::Alarm',
    'AlarmName',
    physicalName(TEST_PREFIX, suffix),
  );
  return properties(template, id);
}

/** A `Fn::Join` of literals and intrinsics as text, intrinsics written `<Ref id>` / `<GetAtt id.attr>`. */
function text(value: unknown): string {
  if (typeof value === 'string') return value;
  const intrinsic = value as Record<string, unknown>;
  if ('Ref' in intrinsic) return `<Ref ${String(intrinsic.Ref)}>`;
  if ('Fn::GetAtt' in intrinsic) return `<GetAtt ${(intrinsic['Fn::GetAtt'] as string[]).join('.')}>`;
  if ('Fn::Join' in intrinsic) {
    const [separator, parts] = intrinsic['Fn::Join'] as [string, unknown[]];
    return parts.map(text).join(separator);
  }
  throw new Error(`unexpected value ${JSON.stringify(value)}`);
}

function output(template: Template, name: string): string {
  const outputs = template.findOutputs(name) as Record<string, { Value: unknown }>;
  const found = outputs[name];
  if (found === undefined) throw new Error(`no output ${name}`);
  return text(found.Value);
}

/** `action resource [if condition]` of the data-plane statements of a list of policy statements. */
function pairs(statements: readonly Statement[]): string[] {
  const found = new Set<string>();
  for (const statement of statements) {
    expect(statement.Effect).toBe('Allow');
    const condition = statement.Condition === undefined ? '' : ` if ${JSON.stringify(statement.Condition)}`;
    for (const action of ([] as string[]).concat(statement.Action)) {
      if (!/^(dynamodb|s3|sqs):/.test(action)) continue;
      for (const resource of ([] as unknown[]).concat(statement.Resource))
        found.add(`${action} ${text(resource)}${condition}`);
    }
  }
  return [...found].sort();
}

function workerRoleStatements({ stack, template }: Synthesized): Statement[] {
  const role = properties(template, functionLogicalId(stack, 'worker')).Role as { 'Fn::GetAtt': [string] };
  return Object.values(template.findResources('AWS::IAM::Policy') as Record<string, Resource>)
    .filter((policy) =>
      (policy.Properties.Roles as { Ref: string }[]).some((ref) => ref.Ref === role['Fn::GetAtt'][0]),
    )
    .flatMap((policy) => (policy.Properties.PolicyDocument as { Statement: Statement[] }).Statement);
}

function managedPolicyStatements(template: Template): Statement[] {
  const policies = Object.values(
    template.findResources('AWS::IAM::ManagedPolicy') as Record<string, Resource>,
  );
  const ours = policies.filter(
    (policy) => policy.Properties.ManagedPolicyName === physicalName(TEST_PREFIX, 'external-worker'),
  );
  expect(ours).toHaveLength(1);
  return (ours[0]!.Properties.PolicyDocument as { Statement: Statement[] }).Statement;
}

describe('alarms', () => {
  const { template } = withWorker;
  const topicId = Object.keys(template.findResources('AWS::SNS::Topic'))[0]!;

  it('sends every alarm to the one alarm topic, whose ARN is an output', () => {
    const alarms = Object.values(
      template.findResources('AWS::CloudWatch::Alarm') as Record<string, Resource>,
    );
    expect(alarms).toHaveLength(6);
    for (const { Properties } of alarms) expect(Properties.AlarmActions).toEqual([{ Ref: topicId }]);
    expect(properties(template, topicId).TopicName).toBe(physicalName(TEST_PREFIX, 'alarms'));
    expect(output(template, 'AlarmTopicArn')).toBe(`<Ref ${topicId}>`);
  });

  it('fires as soon as the dead-letter queue holds a message', () => {
    expect(alarm(template, 'dlq-not-empty')).toMatchObject({
      Namespace: 'AWS/SQS',
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Dimensions: [
        { Name: 'QueueName', Value: { 'Fn::GetAtt': [queueId(template, 'workDlq'), 'QueueName'] } },
      ],
      Threshold: 0,
      ComparisonOperator: 'GreaterThanThreshold',
      EvaluationPeriods: 1,
      TreatMissingData: 'notBreaching',
    });
  });

  it('fires as soon as the stream dead-letter queue holds a failure record, beside the work DLQ alarm', () => {
    expect(alarm(template, 'stream-dlq-not-empty')).toMatchObject({
      Namespace: 'AWS/SQS',
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Dimensions: [
        { Name: 'QueueName', Value: { 'Fn::GetAtt': [queueId(template, 'streamDlq'), 'QueueName'] } },
      ],
      Statistic: 'Maximum',
      Threshold: 0,
      ComparisonOperator: 'GreaterThanThreshold',
      EvaluationPeriods: 1,
      TreatMissingData: 'notBreaching',
    });
    // The same alarm without the reference worker: the scheduler's streams are there either way.
    expect(alarm(external.template, 'stream-dlq-not-empty').Threshold).toBe(0);
  });

  it('fires when leases expire in 2 of 3 five-minute windows, on the metric the sweeper emits', () => {
    expect(alarm(template, 'leases-expiring')).toMatchObject({
      Namespace: METRICS_NAMESPACE,
      MetricName: opsMetrics.leasesExpired.name,
      Dimensions: [{ Name: POOL_DIMENSION, Value: POOL }],
      Statistic: 'Sum',
      Period: 300,
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      EvaluationPeriods: 3,
      DatapointsToAlarm: 2,
    });
    expect(METRICS_NAMESPACE).toBe('TinkerServerless');
    expect(opsMetrics.leasesExpired.name).toBe('LeasesExpired');
  });

  it.each([
    ['scheduler-errors', 'Errors'],
    ['scheduler-throttles', 'Throttles'],
  ])('watches the scheduler: %s', (suffix, metricName) => {
    expect(alarm(template, suffix)).toMatchObject({
      Namespace: 'AWS/Lambda',
      MetricName: metricName,
      Dimensions: [
        { Name: 'FunctionName', Value: { Ref: functionLogicalId(withWorker.stack, 'scheduler') } },
      ],
      Statistic: 'Sum',
      Period: 60,
      EvaluationPeriods: 5,
      DatapointsToAlarm: 3,
      Threshold: 1,
    });
  });

  it('fires when the oldest pending request stays older than 15 minutes, on the metric the tick emits', () => {
    expect(alarm(template, 'oldest-pending-age')).toMatchObject({
      Namespace: METRICS_NAMESPACE,
      MetricName: opsMetrics.oldestPendingAgeSeconds.name,
      Dimensions: [{ Name: POOL_DIMENSION, Value: POOL }],
      Statistic: 'Maximum',
      Threshold: 900,
      ComparisonOperator: 'GreaterThanThreshold',
      EvaluationPeriods: 5,
    });
    expect(opsMetrics.oldestPendingAgeSeconds.name).toBe('OldestPendingAgeSeconds');
  });
});

describe('the alarms and the dashboard watch what the code emits', () => {
  const { template } = withWorker;
  afterEach(() => {
    vi.unstubAllEnvs();
    resetConfig();
  });

  /** The EMF document `emitMetric` writes for one datum of `metric` in `pool` (as on Lambda). */
  function emitted(metric: OpsMetric, pool: string): Record<string, unknown> & { _aws: EmfMetadata } {
    vi.stubEnv('EMIT_METRICS', 'true');
    resetConfig();
    const lines: string[] = [];
    const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      lines.push(String(chunk));
      return true;
    });
    try {
      emitMetric(metric, 1, pool);
    } finally {
      spy.mockRestore();
    }
    expect(lines).toHaveLength(1);
    return JSON.parse(lines[0]!) as Record<string, unknown> & { _aws: EmfMetadata };
  }

  interface EmfMetadata {
    CloudWatchMetrics: { Namespace: string; Dimensions: string[][]; Metrics: { Name: string }[] }[];
  }

  it('every alarm on a custom metric matches the namespace, name and exact dimension set of its datum', () => {
    const custom = Object.values(
      template.findResources('AWS::CloudWatch::Alarm', {
        Properties: { Namespace: METRICS_NAMESPACE },
      }) as Record<string, Resource>,
    ).map(
      ({ Properties }) => Properties as { MetricName: string; Dimensions: { Name: string; Value: string }[] },
    );
    expect(custom.map((alarm) => alarm.MetricName).sort()).toEqual([
      'LeasesExpired',
      'OldestPendingAgeSeconds',
    ]);
    for (const alarm of custom) {
      const metric = Object.values(opsMetrics).find((candidate) => candidate.name === alarm.MetricName);
      expect(metric, alarm.MetricName).toBeDefined();
      const document = emitted(metric!, POOL);
      // CloudWatch files a datum under its exact dimension set: an extra one (such as Powertools'
      // default `service`) would leave the alarm watching an empty metric.
      expect(document._aws.CloudWatchMetrics).toEqual([
        {
          Namespace: METRICS_NAMESPACE,
          Dimensions: [alarm.Dimensions.map((dimension) => dimension.Name)],
          Metrics: [expect.objectContaining({ Name: alarm.MetricName })],
        },
      ]);
      for (const dimension of alarm.Dimensions) expect(document[dimension.Name]).toBe(dimension.Value);
    }
  });

  it('the dashboard graphs each custom metric by the dimension its datum carries', () => {
    const body = text(
      properties(template, Object.keys(template.findResources('AWS::CloudWatch::Dashboard'))[0]!)
        .DashboardBody,
    );
    for (const metric of [opsMetrics.leasesExpired, opsMetrics.oldestPendingAgeSeconds]) {
      const document = emitted(metric, POOL);
      const [dimensions] = document._aws.CloudWatchMetrics[0]!.Dimensions;
      expect(dimensions).toEqual([POOL_DIMENSION]);
      expect(body).toContain(
        `"${METRICS_NAMESPACE}","${metric.name}","${POOL_DIMENSION}","${document[POOL_DIMENSION]}"`,
      );
    }
  });
});

describe('dashboard', () => {
  it.each([
    ['with the reference worker', withWorker, FUNCTION_IDS],
    ['without it', external, FUNCTION_IDS.filter((id) => id !== 'worker')],
  ])('graphs the queue metrics and each deployed function, %s', (_, { template, stack }, deployed) => {
    const dashboards = template.findResources('AWS::CloudWatch::Dashboard') as Record<string, Resource>;
    const [id] = Object.keys(dashboards);
    expect(Object.keys(dashboards)).toHaveLength(1);
    const props = properties(template, id!);
    expect(props.DashboardName).toBe(physicalName(TEST_PREFIX, 'operations'));
    const body = text(props.DashboardBody);
    for (const name of [opsMetrics.leasesExpired.name, opsMetrics.oldestPendingAgeSeconds.name]) {
      expect(body).toContain(`"${METRICS_NAMESPACE}","${name}","${POOL_DIMENSION}","${POOL}"`);
    }
    expect(body).toContain('ApproximateNumberOfMessagesVisible');
    for (const functionId of FUNCTION_IDS) {
      const ref = `<Ref ${stack.functions[functionId] ? functionLogicalId(stack, functionId) : 'absent'}>`;
      if (deployed.includes(functionId)) expect(body).toContain(ref);
    }
    expect(output(template, 'DashboardUrl')).toContain(`#dashboards:name=<Ref ${id}>`);
  });
});

describe('the worker switch (context referenceWorker)', () => {
  it('deploys the reference worker Lambda on the work queue by default', () => {
    const { template, stack } = withWorker;
    template.resourceCountIs('AWS::Lambda::Function', FUNCTION_IDS.length);
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      EventSourceArn: { 'Fn::GetAtt': [queueId(template, 'work'), 'Arn'] },
      FunctionName: { Ref: functionLogicalId(stack, 'worker') },
    });
    expect(output(template, WORKER_OUTPUTS.mode)).toBe('reference-lambda');
  });

  it('when off, deploys no worker and nothing consumes the work queue', () => {
    const { template, stack } = external;
    expect(stack.functions.worker).toBeUndefined();
    template.resourceCountIs('AWS::Lambda::Function', FUNCTION_IDS.length - 1);
    const mappings = Object.values(
      template.findResources('AWS::Lambda::EventSourceMapping') as Record<string, Resource>,
    );
    const workQueueArn = JSON.stringify({ 'Fn::GetAtt': [queueId(template, 'work'), 'Arn'] });
    expect(
      mappings.filter((mapping) => JSON.stringify(mapping.Properties.EventSourceArn) === workQueueArn),
    ).toEqual([]);
    expect(output(template, WORKER_OUTPUTS.mode)).toBe('external');
  });

  it.each([
    ['on', withWorker],
    ['off', external],
  ])('outputs the environment an external worker needs, exactly its own (switch %s)', (_, { template }) => {
    const env = parseEnvFile(JSON.stringify({ stack: { WorkerEnv: output(template, WORKER_OUTPUTS.env) } }));
    const grants = topology.functions.worker.grants;
    const expected = [
      ...Object.keys(topology.settings),
      'AWS_REGION',
      ...TABLE_IDS.filter((id) => grants.tables[id]?.length).map((id) => topology.tables[id].envVar),
      topology.bucket.envVar,
      topology.queues.work.envVar!,
      // The work lanes a worker process leases and polls (S2).
      ...LANE_QUEUE_IDS.map((id) => topology.queues[id].envVar!),
    ];
    expect(Object.keys(env).sort()).toEqual(expected.sort());
    for (const [name, value] of Object.entries(topology.settings)) expect(env[name]).toBe(value);
    expect(env.WORK_QUEUE_URL).toBe(`<Ref ${queueId(template, 'work')}>`);
    expect(env.WORK_LANE_0_QUEUE_URL).toBe(`<Ref ${queueId(template, 'lane0')}>`);
  });

  it.each([
    ['on', withWorker],
    ['off', external],
  ])('outputs the environment the operator CLI needs: every resource (switch %s)', (_, { template }) => {
    const outputs = {
      stack: {
        WorkerEnv: output(template, WORKER_OUTPUTS.env),
        OperatorEnv: output(template, STACK_ENV_OUTPUTS.operator),
      },
    };
    const env = parseEnvFile(JSON.stringify(outputs));
    const expected = [
      ...Object.keys(topology.settings),
      'AWS_REGION',
      ...TABLE_IDS.map((id) => topology.tables[id].envVar),
      topology.bucket.envVar,
      ...QUEUE_IDS.flatMap((id) => topology.queues[id].envVar ?? []),
    ];
    expect(Object.keys(env).sort()).toEqual(expected.sort());
    // What the CLI reads is among them.
    for (const name of [
      'FUTURES_TABLE',
      'MODELS_TABLE',
      'REGISTRY_TABLE',
      'WORK_QUEUE_URL',
      'WORK_DLQ_URL',
      'STREAM_DLQ_URL',
      'POOL',
      'LIVE_SHARDS',
    ]) {
      expect(env).toHaveProperty(name);
    }
    for (const [name, value] of Object.entries(topology.settings)) expect(env[name]).toBe(value);
    expect(env.WORK_QUEUE_URL).toBe(`<Ref ${queueId(template, 'work')}>`);
    expect(env.WORK_DLQ_URL).toBe(`<Ref ${queueId(template, 'workDlq')}>`);
    expect(env.STREAM_DLQ_URL).toBe(`<Ref ${queueId(template, 'streamDlq')}>`);
    const registry = logicalIdWhere(
      template,
      'AWS::DynamoDB::Table',
      'TableName',
      physicalName(TEST_PREFIX, 'registry'),
    );
    expect(env.REGISTRY_TABLE).toBe(`<Ref ${registry}>`);
  });

  it('offers a managed policy with exactly the reference worker Lambda data permissions', () => {
    const fromTopology = pairs(managedPolicyStatements(withWorker.template));
    expect(fromTopology).toEqual(pairs(workerRoleStatements(withWorker)));
    expect(fromTopology).toContain(`sqs:ReceiveMessage <GetAtt ${queueId(withWorker.template, 'work')}.Arn>`);
    // The same policy when the Lambda is off, and its ARN is an output either way.
    expect(pairs(managedPolicyStatements(external.template))).toEqual(fromTopology);
    expect(output(external.template, WORKER_OUTPUTS.policy)).toMatch(/^<Ref /);
  });

  it.each([
    ['on', withWorker],
    ['off', external],
  ])(
    'keeps a GPU host to the registry records a work item owns, by key prefix (switch %s)',
    (_, { template }) => {
      const registry = logicalIdWhere(
        template,
        'AWS::DynamoDB::Table',
        'TableName',
        physicalName(TEST_PREFIX, 'registry'),
      );
      const onRegistry = managedPolicyStatements(template).filter((statement) =>
        ([] as unknown[]).concat(statement.Resource).some((r) => text(r) === `<GetAtt ${registry}.Arn>`),
      );
      const byPatterns = onRegistry.map((statement) => {
        const condition = statement.Condition as Record<string, Record<string, unknown>> | undefined;
        // No statement on the registry without a key condition, and the key must be present.
        expect(condition?.Null).toEqual({ 'dynamodb:LeadingKeys': 'false' });
        return {
          keys: condition?.['ForAllValues:StringLike']?.['dynamodb:LeadingKeys'],
          actions: ([] as string[]).concat(statement.Action).sort(),
        };
      });
      expect(byPatterns).toEqual([
        {
          keys: ['claim#*', 'ckpt#*'],
          actions: ['dynamodb:DeleteItem', 'dynamodb:GetItem', 'dynamodb:UpdateItem'],
        },
        { keys: ['claim#*'], actions: ['dynamodb:BatchGetItem'] },
        { keys: ['ss#*'], actions: ['dynamodb:PutItem'] },
        // A sample's commit takes its session log's next position and writes the entry (W9).
        { keys: ['sfc#*'], actions: ['dynamodb:UpdateItem'] },
        { keys: ['sfl#*'], actions: ['dynamodb:PutItem'] },
        { keys: ['cut#*'], actions: ['dynamodb:GetItem'] },
        // Its work lane's lease (S2).
        {
          keys: ['lane#*'],
          actions: ['dynamodb:DeleteItem', 'dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem'],
        },
      ]);
    },
  );
});

describe('limits that keep the system operable', () => {
  it.each([
    ['on', withWorker],
    ['off', external],
  ])('keeps work messages hidden longer than a worker runs (switch %s)', (_, { template }) => {
    const work = properties(template, queueId(template, 'work'));
    expect(work.VisibilityTimeout).toBe(topology.queues.work.visibilityTimeoutSeconds);
    expect(work.VisibilityTimeout as number).toBeGreaterThanOrEqual(topology.functions.worker.timeoutSeconds);
  });

  it('matches the queue to the deployed worker timeout', () => {
    const { template, stack } = withWorker;
    const worker = properties(template, functionLogicalId(stack, 'worker'));
    const work = properties(template, queueId(template, 'work'));
    expect(work.VisibilityTimeout as number).toBeGreaterThanOrEqual(worker.Timeout as number);
  });

  it('caps the scheduler per pool with reserved concurrency, and keeps every log group bounded', () => {
    for (const { template, stack } of [withWorker, external]) {
      const scheduler = properties(template, functionLogicalId(stack, 'scheduler'));
      expect(scheduler.ReservedConcurrentExecutions).toBe(topology.functions.scheduler.reservedConcurrency);
      expect(topology.functions.scheduler.reservedConcurrency).toBeGreaterThan(0);
      const groups = Object.values(template.findResources('AWS::Logs::LogGroup') as Record<string, Resource>);
      expect(groups.length).toBeGreaterThanOrEqual(Object.keys(stack.functions).length);
      for (const group of groups) expect(group.Properties.RetentionInDays).toBeGreaterThan(0);
    }
  });

  it('lists everything a client or operator needs as outputs', () => {
    const names = Object.keys(withWorker.template.findOutputs('*')).sort();
    expect(names).toEqual(
      [
        'ApiUrl',
        'FuturesTableName',
        'ModelsTableName',
        'RegistryTableName',
        'PrefixesTableName',
        'DataBucketName',
        'WorkQueueUrl',
        'WorkDlqQueueUrl',
        'StreamDlqQueueUrl',
        ...LANE_QUEUE_IDS.map((lane) => `Lane${lane.slice('lane'.length)}QueueUrl`),
        'AlarmTopicArn',
        'DashboardUrl',
        STACK_ENV_OUTPUTS.operator,
        WORKER_OUTPUTS.env,
        WORKER_OUTPUTS.mode,
        WORKER_OUTPUTS.policy,
      ].sort(),
    );
  });
});
