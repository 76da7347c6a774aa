import { Duration, type RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as appscaling from 'aws-cdk-lib/aws-applicationautoscaling';
import * as autoscaling from 'aws-cdk-lib/aws-autoscaling';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as sns from 'aws-cdk-lib/aws-sns';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import type { GpuWorkersConfig } from '../../shared/base/config.js';
import { physicalName } from '../../shared/base/topology.js';

/** Where the worker image is built from, relative to the repository root (the Docker build context). */
export const GPU_WORKER_DOCKERFILE = 'cdk/gpu-worker/Dockerfile';

/**
 * What the Docker build context leaves out: local state, dependencies the image installs itself, and
 * what the worker never loads. The image builds `dist/` itself.
 */
const BUILD_CONTEXT_EXCLUDES = [
  '.git',
  '.local',
  '.ci',
  'node_modules',
  'cdk.out',
  'dist',
  'coverage',
  'test',
  'bench',
  'docs',
  '**/__pycache__',
];

/**
 * Seconds ECS waits between a task's SIGTERM and its SIGKILL: the most an EC2 task may have. The
 * worker's own grace (`WORKER_GRACE_SECONDS`) ends well before it, so the let-go of its models (S3)
 * fits in the rest.
 */
export const WORKER_STOP_TIMEOUT_SECONDS = 120;
export const WORKER_GRACE_SECONDS = 60;

/** The CloudWatch metrics period the fleet's scaling reads: SQS publishes its queue metrics each minute. */
const SCALING_PERIOD = Duration.minutes(1);

/** An alarm's metric math may read at most 10 metrics (a CloudWatch limit). */
const ALARM_METRICS_LIMIT = 10;

export interface GpuWorkerFleetProps {
  readonly config: GpuWorkersConfig;
  readonly namePrefix: string;
  /** The base model the workers load (`--base-model`), one of the pool's BASE_MODELS. */
  readonly baseModel: string;
  /** The worker's grants from the topology (ExternalWorkerAccess): the task role gets exactly this. */
  readonly workerPolicy: iam.IManagedPolicy;
  /** The worker's variables (ExternalWorkerAccess, the `WorkerEnv` output). */
  readonly environment: Readonly<Record<string, string>>;
  /** The shared work queue. */
  readonly workQueue: sqs.IQueue;
  /** The work lanes' queues (S2). */
  readonly laneQueues: readonly sqs.IQueue[];
  /** The operations alarm topic: the fleet's alarms and its hosts' launch errors publish here. */
  readonly alarmTopic: sns.ITopic;
  /** The worker image; by default built from `GPU_WORKER_DOCKERFILE` under `projectRoot` at deploy. */
  readonly projectRoot: string;
  readonly logRetention: logs.RetentionDays;
  readonly removalPolicy: RemovalPolicy;
}

/**
 * GPU hosts that follow the work (docs/operations.md#gpu-worker-fleet): an ECS cluster on an EC2 Auto
 * Scaling group through a capacity provider (managed scaling: hosts follow the tasks; managed
 * termination protection: a host with a worker is never picked for scale-in; managed draining and
 * spot draining: a host going away first stops its tasks). One ECS task per GPU runs the compiled
 * worker on the torch engine; the service's task count follows the queues:
 * - out: work waiting in the shared queue (visible messages) adds workers within one period;
 * - in: nothing queued or in flight anywhere (the shared queue, and the lanes' in-flight messages) for
 *   `idleMinutes` sets the count to the minimum (0 by default), and the capacity provider lets the
 *   empty hosts go.
 * A stopped task gets SIGTERM, finishes or abandons its work item within `WORKER_GRACE_SECONDS`, snapshots
 * and lets go of its models (S3), gives its lane back, and exits before `WORKER_STOP_TIMEOUT_SECONDS`;
 * a host lost without warning is covered by lease expiry (S4).
 */
export class GpuWorkerFleet extends Construct {
  readonly vpc: ec2.Vpc;
  readonly cluster: ecs.Cluster;
  readonly hosts: autoscaling.AutoScalingGroup;
  readonly capacityProvider: ecs.AsgCapacityProvider;
  readonly taskDefinition: ecs.Ec2TaskDefinition;
  readonly service: ecs.Ec2Service;
  readonly scaling: appscaling.ScalableTarget;
  readonly scaleOut: appscaling.StepScalingAction;
  readonly scaleIn: appscaling.StepScalingAction;
  readonly alarms: Readonly<{
    scaleOut: cloudwatch.Alarm;
    idle: cloudwatch.Alarm;
    cannotScale: cloudwatch.Alarm;
    workWaiting: cloudwatch.Alarm;
  }>;

  constructor(scope: Construct, id: string, props: GpuWorkerFleetProps) {
    super(scope, id);
    const { config } = props;
    const name = (suffix: string) => physicalName(props.namePrefix, suffix);
    const maxTasks = config.maxHosts * config.gpusPerHost;
    const minTasks = config.minHosts * config.gpusPerHost;

    // Public subnets and no NAT gateway: nothing here costs while idle; the hosts take no inbound traffic.
    const flowLogs = new logs.LogGroup(this, 'FlowLogs', {
      retention: props.logRetention,
      removalPolicy: props.removalPolicy,
    });
    this.vpc = new ec2.Vpc(this, 'Vpc', {
      maxAzs: 3,
      natGateways: 0,
      subnetConfiguration: [{ name: 'hosts', subnetType: ec2.SubnetType.PUBLIC }],
      flowLogs: { all: { destination: ec2.FlowLogDestination.toCloudWatchLogs(flowLogs) } },
    });
    const securityGroup = new ec2.SecurityGroup(this, 'Hosts', {
      vpc: this.vpc,
      description: 'GPU worker hosts: outbound only (AWS APIs, the image registry)',
      allowAllOutbound: true,
    });

    this.cluster = new ecs.Cluster(this, 'Cluster', {
      vpc: this.vpc,
      clusterName: name('gpu-workers'),
      containerInsightsV2: ecs.ContainerInsights.ENABLED,
    });

    const userData = ec2.UserData.forLinux();
    if (config.spot) {
      // The ECS agent drains the host on its two-minute interruption notice (CDK adds this only for a
      // group with a spot price, not for a mixed instances policy).
      userData.addCommands('echo ECS_ENABLE_SPOT_INSTANCE_DRAINING=true >> /etc/ecs/ecs.config');
    }
    const launchTemplate = new ec2.LaunchTemplate(this, 'LaunchTemplate', {
      machineImage: ecs.EcsOptimizedImage.amazonLinux2(ecs.AmiHardwareType.GPU),
      // The first type is the template's; the Auto Scaling group may launch any of the list.
      instanceType: new ec2.InstanceType(config.instanceTypes[0] ?? 'g5.xlarge'),
      securityGroup,
      requireImdsv2: true,
      // The ECS agent's containers reach the instance metadata through one more hop.
      httpPutResponseHopLimit: 2,
      associatePublicIpAddress: true,
      detailedMonitoring: true,
      userData,
      role: new iam.Role(this, 'HostRole', {
        assumedBy: new iam.ServicePrincipal('ec2.amazonaws.com'),
        description: 'GPU worker host: the ECS agent only (the worker runs under the task role)',
      }),
      blockDevices: [
        {
          deviceName: '/dev/xvda',
          volume: ec2.BlockDeviceVolume.ebs(config.volumeGiB, {
            encrypted: true,
            volumeType: ec2.EbsDeviceVolumeType.GP3,
          }),
        },
      ],
    });
    this.hosts = new autoscaling.AutoScalingGroup(this, 'HostGroup', {
      autoScalingGroupName: name('gpu-hosts'),
      vpc: this.vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PUBLIC },
      minCapacity: config.minHosts,
      maxCapacity: config.maxHosts,
      capacityRebalance: config.spot,
      mixedInstancesPolicy: {
        launchTemplate,
        launchTemplateOverrides: config.instanceTypes.map((type) => ({
          instanceType: new ec2.InstanceType(type),
        })),
        instancesDistribution: config.spot
          ? {
              onDemandBaseCapacity: 0,
              onDemandPercentageAboveBaseCapacity: 0,
              spotAllocationStrategy: autoscaling.SpotAllocationStrategy.PRICE_CAPACITY_OPTIMIZED,
            }
          : {
              onDemandBaseCapacity: 0,
              onDemandPercentageAboveBaseCapacity: 100,
              onDemandAllocationStrategy: autoscaling.OnDemandAllocationStrategy.PRIORITIZED,
            },
      },
      // Launch errors (insufficient capacity among them) reach the operator at once.
      notifications: [{ topic: props.alarmTopic }],
    });
    this.capacityProvider = new ecs.AsgCapacityProvider(this, 'Capacity', {
      capacityProviderName: name('gpu-capacity'),
      autoScalingGroup: this.hosts,
      enableManagedScaling: true,
      enableManagedTerminationProtection: true,
      enableManagedDraining: true,
      targetCapacityPercent: 100,
      machineImageType: ecs.MachineImageType.AMAZON_LINUX_2,
    });
    this.cluster.addAsgCapacityProvider(this.capacityProvider, {
      machineImageType: ecs.MachineImageType.AMAZON_LINUX_2,
    });

    const taskRole = new iam.Role(this, 'WorkerRole', {
      assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
      description: 'GPU worker process: the worker grants of the topology, nothing more',
      managedPolicies: [props.workerPolicy],
    });
    this.taskDefinition = new ecs.Ec2TaskDefinition(this, 'Task', {
      family: name('gpu-worker'),
      taskRole,
    });
    const logGroup = new logs.LogGroup(this, 'WorkerLogs', {
      retention: props.logRetention,
      removalPolicy: props.removalPolicy,
    });
    this.taskDefinition.addContainer('worker', {
      image:
        config.image === undefined
          ? ecs.ContainerImage.fromAsset(props.projectRoot, {
              file: GPU_WORKER_DOCKERFILE,
              buildArgs: { BASE_MODEL: props.baseModel },
              exclude: BUILD_CONTEXT_EXCLUDES,
            })
          : ecs.ContainerImage.fromRegistry(config.image),
      command: ['--base-model', props.baseModel, '--grace-seconds', String(WORKER_GRACE_SECONDS)],
      gpuCount: 1,
      memoryReservationMiB: config.memoryMiB,
      environment: { ...props.environment },
      stopTimeout: Duration.seconds(WORKER_STOP_TIMEOUT_SECONDS),
      logging: ecs.LogDrivers.awsLogs({ streamPrefix: 'worker', logGroup }),
    });
    this.service = new ecs.Ec2Service(this, 'Service', {
      serviceName: name('gpu-workers'),
      cluster: this.cluster,
      taskDefinition: this.taskDefinition,
      capacityProviderStrategies: [
        { capacityProvider: this.capacityProvider.capacityProviderName, weight: 1 },
      ],
      // A deploy replaces workers in place (each lets go of its models first): no spare GPUs needed.
      minHealthyPercent: 0,
      maxHealthyPercent: 100,
      placementStrategies: [ecs.PlacementStrategy.packedByMemory()],
      circuitBreaker: { enable: true, rollback: true },
      desiredCount: minTasks,
    });
    // The capacity provider must be associated with the cluster before a service can use it, and the
    // service deleted before it is dissociated: depend on the cluster and its associations.
    this.service.node.addDependency(this.cluster);

    this.scaling = new appscaling.ScalableTarget(this, 'Workers', {
      serviceNamespace: appscaling.ServiceNamespace.ECS,
      scalableDimension: 'ecs:service:DesiredCount',
      resourceId: `service/${this.cluster.clusterName}/${this.service.serviceName}`,
      minCapacity: minTasks,
      maxCapacity: maxTasks,
      // ECS services scale through Application Auto Scaling's service-linked role (created on first
      // use), not a role of this stack.
      role: iam.Role.fromRoleArn(
        this,
        'ScalingRole',
        Stack.of(this).formatArn({
          service: 'iam',
          region: '',
          resource: 'role',
          resourceName:
            'aws-service-role/ecs.application-autoscaling.amazonaws.com/AWSServiceRoleForApplicationAutoScaling_ECSService',
        }),
      ),
    });

    const sqsMetric = (queue: sqs.IQueue, metricName: string) =>
      new cloudwatch.Metric({
        namespace: 'AWS/SQS',
        metricName,
        dimensionsMap: { QueueName: queue.queueName },
        statistic: cloudwatch.Stats.MAXIMUM,
        period: SCALING_PERIOD,
      });
    const waiting = sqsMetric(props.workQueue, 'ApproximateNumberOfMessagesVisible');
    // Busy: anything queued or in flight in the shared queue, or in flight in a lane. A lane's queued
    // message implies its holder is running another item (in flight) or its lease lapses and the work
    // goes back to the shared queue (S4), so lanes' visible messages need not be read.
    const busyMetrics: Record<string, cloudwatch.IMetric> = {
      waiting,
      running: sqsMetric(props.workQueue, 'ApproximateNumberOfMessagesNotVisible'),
    };
    props.laneQueues.forEach((queue, index) => {
      busyMetrics[`lane${index}`] = sqsMetric(queue, 'ApproximateNumberOfMessagesNotVisible');
    });
    if (Object.keys(busyMetrics).length > ALARM_METRICS_LIMIT) {
      throw new Error(
        `The fleet's idle alarm would read ${Object.keys(busyMetrics).length} metrics; CloudWatch allows ${ALARM_METRICS_LIMIT}`,
      );
    }
    const busy = new cloudwatch.MathExpression({
      expression: Object.keys(busyMetrics)
        .map((key) => `FILL(${key}, 0)`)
        .join(' + '),
      usingMetrics: busyMetrics,
      label: 'Work queued or in flight',
      period: SCALING_PERIOD,
    });

    // Out: as many workers as items wait, up to one host's GPUs at a time; the cooldown covers a
    // host's boot, so a backlog does not stack launches while the first hosts start.
    this.scaleOut = new appscaling.StepScalingAction(this, 'ScaleOut', {
      scalingTarget: this.scaling,
      adjustmentType: appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
      metricAggregationType: appscaling.MetricAggregationType.MAXIMUM,
      cooldown: Duration.minutes(5),
    });
    for (let workers = 1; workers <= config.gpusPerHost; workers++) {
      // Bounds are relative to the alarm's threshold of 1 waiting item.
      this.scaleOut.addAdjustment({
        adjustment: workers,
        lowerBound: workers - 1,
        ...(workers < config.gpusPerHost ? { upperBound: workers } : {}),
      });
    }
    const scaleOutAlarm = new cloudwatch.Alarm(this, 'WorkWaitingAlarm', {
      alarmName: name('gpu-scale-out'),
      alarmDescription: 'Work waits in the shared queue: add GPU workers',
      metric: waiting,
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    scaleOutAlarm.addAlarmAction(new actions.ApplicationScalingAction(this.scaleOut));

    // In: to the minimum once idle for idleMinutes. SQS stops publishing for an idle queue, so
    // missing data counts as idle.
    this.scaleIn = new appscaling.StepScalingAction(this, 'ScaleIn', {
      scalingTarget: this.scaling,
      adjustmentType: appscaling.AdjustmentType.EXACT_CAPACITY,
      metricAggregationType: appscaling.MetricAggregationType.MAXIMUM,
    });
    this.scaleIn.addAdjustment({ adjustment: minTasks, upperBound: 0 });
    const idleAlarm = new cloudwatch.Alarm(this, 'IdleAlarm', {
      alarmName: name('gpu-idle'),
      alarmDescription: `No work queued or in flight for ${config.idleMinutes} minutes: GPU workers to the minimum`,
      metric: busy,
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_OR_EQUAL_TO_THRESHOLD,
      evaluationPeriods: config.idleMinutes,
      datapointsToAlarm: config.idleMinutes,
      treatMissingData: cloudwatch.TreatMissingData.BREACHING,
    });
    idleAlarm.addAlarmAction(new actions.ApplicationScalingAction(this.scaleIn));

    // The operator's alarms: tasks that need hosts the group cannot launch (at its maximum, or no
    // capacity of the listed types), and work that waits with nobody taking it.
    const alarmAction = new actions.SnsAction(props.alarmTopic);
    const cannotScale = new cloudwatch.Alarm(this, 'CannotScaleAlarm', {
      alarmName: name('gpu-cannot-scale'),
      alarmDescription:
        'GPU workers wait for hosts for 15 minutes: the host group is at its maximum or cannot launch (insufficient capacity)',
      metric: new cloudwatch.Metric({
        namespace: 'AWS/ECS/ManagedScaling',
        metricName: 'CapacityProviderReservation',
        dimensionsMap: {
          CapacityProviderName: this.capacityProvider.capacityProviderName,
          ClusterName: this.cluster.clusterName,
        },
        statistic: cloudwatch.Stats.MINIMUM,
        period: SCALING_PERIOD,
      }),
      threshold: 100,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 15,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    const workWaiting = new cloudwatch.Alarm(this, 'NoHostAlarm', {
      alarmName: name('gpu-work-waiting'),
      alarmDescription: `Work has waited ${config.waitingAlarmSeconds} s in the shared queue with no GPU worker taking it`,
      metric: new cloudwatch.Metric({
        namespace: 'AWS/SQS',
        metricName: 'ApproximateAgeOfOldestMessage',
        dimensionsMap: { QueueName: props.workQueue.queueName },
        statistic: cloudwatch.Stats.MAXIMUM,
        period: SCALING_PERIOD,
      }),
      threshold: config.waitingAlarmSeconds,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 3,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    for (const alarm of [cannotScale, workWaiting]) {
      alarm.addAlarmAction(alarmAction);
      alarm.addOkAction(alarmAction);
    }
    this.alarms = { scaleOut: scaleOutAlarm, idle: idleAlarm, cannotScale, workWaiting };
  }
}
