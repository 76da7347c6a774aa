import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { WORKER_OUTPUTS } from '../../cdk/constructs/external-worker.js';
import {
  GPU_WORKER_DOCKERFILE,
  WORKER_GRACE_SECONDS,
  WORKER_STOP_TIMEOUT_SECONDS,
} from '../../cdk/constructs/gpu-workers.js';
import {
  GPU_WORKERS_DEFAULTS,
  type GpuWorkersConfig,
  readGpuWorkersContext,
} from '../../shared/base/config.js';
import { PROJECT_ROOT } from '../../shared/base/env-file.js';
import { LANE_QUEUE_IDS, physicalName, type QueueId, topology } from '../../shared/base/topology.js';
import { logicalIdWhere, properties, synth, TEST_PREFIX } from '../support/cdk/synth.js';

/**
 * The GPU worker fleet (cdk/constructs/gpu-workers.ts): opt-in by context, ECS tasks (one per GPU) on
 * an EC2 Auto Scaling group behind a capacity provider, scaled from the queues to zero, draining its
 * workers before a host goes, with the worker's grants alone and alarms for a fleet that cannot keep up.
 */

const MODEL = 'Qwen/Qwen3-0.6B';
const BASE_MODELS = JSON.stringify([{ name: MODEL, tokenizer_id: MODEL }]);

function fleet(config: Partial<GpuWorkersConfig> = {}) {
  return synth({
    referenceWorker: false,
    baseModels: BASE_MODELS,
    gpuWorkers: { ...GPU_WORKERS_DEFAULTS, ...config },
  });
}

type Resource = { Type: string; Properties: Record<string, unknown> };

function only(template: Template, type: string): [string, Record<string, unknown>] {
  const found = Object.entries(template.findResources(type) as Record<string, Resource>);
  expect(found.map(([id]) => id)).toHaveLength(1);
  const [id, resource] = found[0]!;
  return [id, resource.Properties];
}

function alarm(template: Template, suffix: string): Record<string, unknown> {
  return properties(
    template,
    logicalIdWhere(template, 'AWS::CloudWatch::Alarm', 'AlarmName', physicalName(TEST_PREFIX, suffix)),
  );
}

function queueLogicalId(template: Template, id: QueueId): string {
  return logicalIdWhere(
    template,
    'AWS::SQS::Queue',
    'QueueName',
    physicalName(TEST_PREFIX, topology.queues[id].name),
  );
}

type MetricQuery = {
  Id: string;
  Expression?: string;
  MetricStat?: {
    Metric: { Namespace: string; MetricName: string; Dimensions: { Name: string; Value: unknown }[] };
    Period: number;
    Stat: string;
  };
};

/** `queue logical id: metric name` of each metric an alarm's math reads. */
function metricsRead(queries: readonly MetricQuery[]): string[] {
  return queries
    .flatMap((query) => (query.MetricStat === undefined ? [] : [query.MetricStat]))
    .map((stat) => {
      const queue = stat.Metric.Dimensions.find((d) => d.Name === 'QueueName')?.Value as {
        'Fn::GetAtt': [string, string];
      };
      return `${queue['Fn::GetAtt'][0]}: ${stat.Metric.MetricName}`;
    })
    .sort();
}

describe('without the fleet', () => {
  it.each([
    ['default', synth()],
    ['external workers', synth({ referenceWorker: false, baseModels: BASE_MODELS })],
  ])('builds no GPU capacity (%s)', (_, { template }) => {
    for (const type of [
      'AWS::ECS::Cluster',
      'AWS::ECS::Service',
      'AWS::AutoScaling::AutoScalingGroup',
      'AWS::EC2::VPC',
      'AWS::ApplicationAutoScaling::ScalableTarget',
    ]) {
      expect(Object.keys(template.findResources(type)), type).toEqual([]);
    }
  });
});

describe('the GPU worker fleet', () => {
  const config = { ...GPU_WORKERS_DEFAULTS, instanceTypes: ['g6.12xlarge', 'g5.12xlarge'], gpusPerHost: 4 };
  const { template, stack } = fleet(config);

  it('runs hosts of the listed GPU types on the ECS GPU AMI, from zero, with encrypted volumes and IMDSv2', () => {
    const [, group] = only(template, 'AWS::AutoScaling::AutoScalingGroup');
    expect(group.MinSize).toBe('0');
    expect(group.MaxSize).toBe(String(config.maxHosts));
    // Managed termination protection: ECS clears it once a host runs no worker.
    expect(group.NewInstancesProtectedFromScaleIn).toBe(true);
    const mixed = group.MixedInstancesPolicy as {
      LaunchTemplate: { Overrides: { InstanceType: string }[] };
      InstancesDistribution: Record<string, unknown>;
    };
    expect(mixed.LaunchTemplate.Overrides.map((o) => o.InstanceType)).toEqual(config.instanceTypes);
    expect(mixed.InstancesDistribution.OnDemandPercentageAboveBaseCapacity).toBe(100);
    const [, launchTemplate] = only(template, 'AWS::EC2::LaunchTemplate');
    const data = launchTemplate.LaunchTemplateData as Record<string, unknown>;
    expect(data.MetadataOptions).toMatchObject({ HttpTokens: 'required' });
    expect(data.BlockDeviceMappings).toEqual([
      { DeviceName: '/dev/xvda', Ebs: { Encrypted: true, VolumeSize: config.volumeGiB, VolumeType: 'gp3' } },
    ]);
    // The image id is the ECS GPU-optimized AMI's public SSM parameter, resolved at deploy (no lookup).
    const imageParameter = (data.ImageId as { Ref: string }).Ref;
    const parameter = (template.toJSON().Parameters as Record<string, { Type: string; Default: string }>)[
      imageParameter
    ];
    expect(parameter?.Type).toBe('AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>');
    expect(parameter?.Default).toContain('/ecs/optimized-ami/amazon-linux-2/gpu/');
  });

  it('brings hosts through a capacity provider with managed scaling, termination protection and draining', () => {
    const [providerId, provider] = only(template, 'AWS::ECS::CapacityProvider');
    expect(provider.AutoScalingGroupProvider).toMatchObject({
      ManagedScaling: { Status: 'ENABLED', TargetCapacity: 100 },
      ManagedTerminationProtection: 'ENABLED',
      ManagedDraining: 'ENABLED',
    });
    const [, service] = only(template, 'AWS::ECS::Service');
    expect(service.CapacityProviderStrategy).toEqual([{ CapacityProvider: { Ref: providerId }, Weight: 1 }]);
    expect(service.DesiredCount).toBe(0);
    // Created after the capacity provider's association with the cluster (and deleted before it).
    const [associationId] = only(template, 'AWS::ECS::ClusterCapacityProviderAssociations');
    const [serviceId] = only(template, 'AWS::ECS::Service');
    const resources = template.toJSON().Resources as Record<string, { DependsOn?: string[] }>;
    expect(resources[serviceId]?.DependsOn).toContain(associationId);
    expect(service.DeploymentConfiguration).toMatchObject({ MinimumHealthyPercent: 0, MaximumPercent: 100 });
  });

  it('runs one worker per GPU: the compiled worker on the torch engine, its image built from the repository', () => {
    const [, task] = only(template, 'AWS::ECS::TaskDefinition');
    const containers = task.ContainerDefinitions as Record<string, unknown>[];
    expect(containers).toHaveLength(1);
    const worker = containers[0]!;
    expect(worker.ResourceRequirements).toEqual([{ Type: 'GPU', Value: '1' }]);
    expect(worker.MemoryReservation).toBe(config.memoryMiB);
    expect(worker.Command).toEqual(['--base-model', MODEL, '--grace-seconds', String(WORKER_GRACE_SECONDS)]);
    // The image is a CDK asset: staged at synth, built and pushed at deploy.
    expect(JSON.stringify(worker.Image)).toContain('container-assets');
    const dockerfile = readFileSync(path.join(PROJECT_ROOT, GPU_WORKER_DOCKERFILE), 'utf8');
    expect(dockerfile).toMatch(/npm ci --omit=dev/);
    expect(dockerfile).toMatch(/npm run engine:install/);
    expect(dockerfile).toMatch(/ENTRYPOINT \["node", "dist\/bin\/worker\.js", "--engine", "torch"\]/);
    expect(existsSync(path.join(PROJECT_ROOT, 'engines/torch/install.sh'))).toBe(true);
    // The variables of the WorkerEnv output, no more and no fewer.
    const env = Object.fromEntries(
      (worker.Environment as { Name: string; Value: unknown }[]).map(({ Name, Value }) => [
        Name,
        JSON.stringify(Value),
      ]),
    );
    const workerEnv = stack.resolve(
      (stack.node.findChild(WORKER_OUTPUTS.env) as unknown as { value: unknown }).value,
    );
    const outputKeys = JSON.stringify(workerEnv).match(/\\"([A-Z][A-Z0-9_]+)\\":/g) ?? [];
    expect(Object.keys(env).sort()).toEqual(outputKeys.map((key) => key.slice(2, -3)).sort());
    expect(env.WORK_QUEUE_URL).toBe(JSON.stringify({ Ref: queueLogicalId(template, 'work') }));
  });

  it('lets a stopped worker drain: SIGTERM, its grace, then the let-go of its models before SIGKILL', () => {
    const [, task] = only(template, 'AWS::ECS::TaskDefinition');
    const worker = (task.ContainerDefinitions as Record<string, unknown>[])[0]!;
    expect(worker.StopTimeout).toBe(WORKER_STOP_TIMEOUT_SECONDS);
    expect(WORKER_STOP_TIMEOUT_SECONDS).toBeLessThanOrEqual(120);
    // At least half the stop timeout is left for the snapshots (S3) and the lane's release.
    expect(WORKER_STOP_TIMEOUT_SECONDS - WORKER_GRACE_SECONDS).toBeGreaterThanOrEqual(60);
  });

  it('scales the workers between 0 and one per GPU of the largest fleet', () => {
    const [targetId, target] = only(template, 'AWS::ApplicationAutoScaling::ScalableTarget');
    expect(target).toMatchObject({
      MinCapacity: 0,
      MaxCapacity: config.maxHosts * config.gpusPerHost,
      ScalableDimension: 'ecs:service:DesiredCount',
      ServiceNamespace: 'ecs',
    });
    expect(JSON.stringify(target.RoleARN)).toContain('AWSServiceRoleForApplicationAutoScaling_ECSService');
    const policies = Object.values(
      template.findResources('AWS::ApplicationAutoScaling::ScalingPolicy') as Record<string, Resource>,
    ).map((policy) => policy.Properties);
    for (const policy of policies) expect(policy.ScalingTargetId).toEqual({ Ref: targetId });
    const configs = policies.map(
      (policy) => policy.StepScalingPolicyConfiguration as Record<string, unknown>,
    );
    expect(configs.map((c) => c.AdjustmentType).sort()).toEqual(['ChangeInCapacity', 'ExactCapacity']);
    // Out: one worker per waiting item, up to a host's GPUs at a time.
    const out = configs.find((c) => c.AdjustmentType === 'ChangeInCapacity')!;
    expect(out.StepAdjustments).toEqual([
      { MetricIntervalLowerBound: 0, MetricIntervalUpperBound: 1, ScalingAdjustment: 1 },
      { MetricIntervalLowerBound: 1, MetricIntervalUpperBound: 2, ScalingAdjustment: 2 },
      { MetricIntervalLowerBound: 2, MetricIntervalUpperBound: 3, ScalingAdjustment: 3 },
      { MetricIntervalLowerBound: 3, ScalingAdjustment: 4 },
    ]);
    // In: straight to the minimum, 0.
    const idle = configs.find((c) => c.AdjustmentType === 'ExactCapacity')!;
    expect(idle.StepAdjustments).toEqual([{ MetricIntervalUpperBound: 0, ScalingAdjustment: 0 }]);
  });

  it('scales out within one metric period of work waiting in the shared queue', () => {
    const scaleOut = alarm(template, 'gpu-scale-out');
    expect(scaleOut).toMatchObject({
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Namespace: 'AWS/SQS',
      Period: 60,
      EvaluationPeriods: 1,
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      TreatMissingData: 'notBreaching',
    });
    expect(scaleOut.Dimensions).toEqual([
      { Name: 'QueueName', Value: { 'Fn::GetAtt': [queueLogicalId(template, 'work'), 'QueueName'] } },
    ]);
  });

  it('scales to zero after idleMinutes with nothing queued or in flight in the shared queue or any lane', () => {
    const idle = alarm(template, 'gpu-idle');
    expect(idle).toMatchObject({
      EvaluationPeriods: config.idleMinutes,
      DatapointsToAlarm: config.idleMinutes,
      Threshold: 0,
      ComparisonOperator: 'LessThanOrEqualToThreshold',
      // An idle queue publishes no metrics: missing is idle.
      TreatMissingData: 'breaching',
    });
    const work = queueLogicalId(template, 'work');
    expect(metricsRead(idle.Metrics as MetricQuery[])).toEqual(
      [
        `${work}: ApproximateNumberOfMessagesNotVisible`,
        `${work}: ApproximateNumberOfMessagesVisible`,
        ...LANE_QUEUE_IDS.map(
          (id) => `${queueLogicalId(template, id)}: ApproximateNumberOfMessagesNotVisible`,
        ),
      ].sort(),
    );
    const expression = (idle.Metrics as MetricQuery[]).find((query) => query.Expression !== undefined);
    for (const query of idle.Metrics as MetricQuery[]) {
      if (query.MetricStat !== undefined) expect(expression?.Expression).toContain(`FILL(${query.Id}, 0)`);
    }
  });

  it('gives the worker process exactly the worker grants, and the host the ECS agent alone', () => {
    const roles = template.findResources('AWS::IAM::Role') as Record<string, Resource>;
    const policyId = logicalIdWhere(
      template,
      'AWS::IAM::ManagedPolicy',
      'ManagedPolicyName',
      physicalName(TEST_PREFIX, 'external-worker'),
    );
    const [, task] = only(template, 'AWS::ECS::TaskDefinition');
    const taskRoleId = (task.TaskRoleArn as { 'Fn::GetAtt': [string] })['Fn::GetAtt'][0];
    expect(roles[taskRoleId]?.Properties.ManagedPolicyArns).toEqual([{ Ref: policyId }]);
    const inlineOn = (roleId: string) =>
      Object.values(template.findResources('AWS::IAM::Policy') as Record<string, Resource>)
        .filter((policy) => (policy.Properties.Roles as { Ref: string }[]).some((r) => r.Ref === roleId))
        .flatMap(
          (policy) =>
            (policy.Properties.PolicyDocument as { Statement: { Action: string | string[] }[] }).Statement,
        )
        .flatMap((statement) => ([] as string[]).concat(statement.Action));
    expect(inlineOn(taskRoleId)).toEqual([]);
    const [, profile] = only(template, 'AWS::IAM::InstanceProfile');
    const hostRoleId = (profile.Roles as { Ref: string }[])[0]!.Ref;
    expect(roles[hostRoleId]?.Properties.ManagedPolicyArns).toBeUndefined();
    const hostActions = inlineOn(hostRoleId);
    expect(hostActions.length).toBeGreaterThan(0);
    for (const action of hostActions) expect(action).toMatch(/^(ecs|ecr|logs):/);
  });

  it('alarms when the fleet cannot get hosts and when work waits with nobody taking it', () => {
    const topic = {
      Ref: logicalIdWhere(template, 'AWS::SNS::Topic', 'TopicName', physicalName(TEST_PREFIX, 'alarms')),
    };
    const cannotScale = alarm(template, 'gpu-cannot-scale');
    expect(cannotScale).toMatchObject({
      Namespace: 'AWS/ECS/ManagedScaling',
      MetricName: 'CapacityProviderReservation',
      Threshold: 100,
      ComparisonOperator: 'GreaterThanThreshold',
      AlarmActions: [topic],
    });
    const waiting = alarm(template, 'gpu-work-waiting');
    expect(waiting).toMatchObject({
      Namespace: 'AWS/SQS',
      MetricName: 'ApproximateAgeOfOldestMessage',
      Threshold: config.waitingAlarmSeconds,
      AlarmActions: [topic],
    });
    // Launch errors (insufficient capacity) reach the same topic.
    const [, group] = only(template, 'AWS::AutoScaling::AutoScalingGroup');
    expect(group.NotificationConfigurations).toEqual([
      expect.objectContaining({
        TopicARN: topic,
        NotificationTypes: expect.arrayContaining(['autoscaling:EC2_INSTANCE_LAUNCH_ERROR']),
      }),
    ]);
  });

  it('drains spot hosts on their interruption notice and rebalances them', () => {
    const spot = fleet({ spot: true }).template;
    const [, group] = only(spot, 'AWS::AutoScaling::AutoScalingGroup');
    expect(group.CapacityRebalance).toBe(true);
    expect(
      (group.MixedInstancesPolicy as { InstancesDistribution: Record<string, unknown> }).InstancesDistribution
        .OnDemandPercentageAboveBaseCapacity,
    ).toBe(0);
    const [, launchTemplate] = only(spot, 'AWS::EC2::LaunchTemplate');
    expect(JSON.stringify(launchTemplate)).toContain('ECS_ENABLE_SPOT_INSTANCE_DRAINING=true');
  });

  it('uses a prebuilt image when given one', () => {
    const { template: prebuilt } = fleet({ image: 'example.com/tinker-worker:1' });
    const [, task] = only(prebuilt, 'AWS::ECS::TaskDefinition');
    expect((task.ContainerDefinitions as { Image: unknown }[])[0]!.Image).toBe('example.com/tinker-worker:1');
  });

  it('refuses a fleet beside the reference worker, or without exactly one base model for it', () => {
    const gpuWorkers = GPU_WORKERS_DEFAULTS;
    expect(() => synth({ baseModels: BASE_MODELS, gpuWorkers })).toThrow(/referenceWorker=false/);
    expect(() => synth({ referenceWorker: false, gpuWorkers })).toThrow(/baseModels/);
    const two = JSON.stringify([{ name: MODEL }, { name: 'Qwen/Qwen3-1.7B' }]);
    expect(() => synth({ referenceWorker: false, baseModels: two, gpuWorkers })).toThrow(/one base model/);
    expect(() =>
      synth({
        referenceWorker: false,
        baseModels: BASE_MODELS,
        gpuWorkers: { ...gpuWorkers, baseModel: 'x/y' },
      }),
    ).toThrow(/one base model/);
  });
});

describe('the gpuWorkers context', () => {
  const read = (value: unknown) => readGpuWorkersContext((key) => (key === 'gpuWorkers' ? value : undefined));

  it('is off unless set, the defaults for true, and overrides from a JSON object', () => {
    expect(read(undefined)).toBeUndefined();
    expect(read('false')).toBeUndefined();
    expect(read('true')).toEqual(GPU_WORKERS_DEFAULTS);
    expect(GPU_WORKERS_DEFAULTS.minHosts).toBe(0);
    expect(read('{"instanceTypes":["g6.xlarge"],"maxHosts":4,"spot":true,"idleMinutes":5}')).toEqual({
      ...GPU_WORKERS_DEFAULTS,
      instanceTypes: ['g6.xlarge'],
      maxHosts: 4,
      spot: true,
      idleMinutes: 5,
    });
    expect(read({ gpusPerHost: 8 })).toEqual({ ...GPU_WORKERS_DEFAULTS, gpusPerHost: 8 });
  });

  it.each([
    ['{"maxHost":2}', /unknown keys maxHost/],
    ['{"minHosts":3,"maxHosts":2}', /minHosts must not exceed/],
    ['{"maxHosts":0}', /maxHosts must be an integer of 1/],
    ['{"instanceTypes":[]}', /instanceTypes/],
    ['{"spot":"yes"}', /spot/],
    ['not json', /neither true nor a JSON object/],
  ])('refuses %s, naming the key', (value, message) => {
    expect(() => read(value)).toThrow(message);
  });
});
