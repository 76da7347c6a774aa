import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sns from 'aws-cdk-lib/aws-sns';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { physicalName } from '../../shared/base/topology.js';
import {
  METRICS_NAMESPACE,
  type OpsMetric,
  opsMetrics,
  POOL_DIMENSION,
} from '../../shared/services/ops/metrics.js';

/** The custom metrics of `shared/services/ops/metrics.ts` as CloudWatch metric objects, for alarms and the dashboard. */
export function poolMetric(
  metric: OpsMetric,
  pool: string,
  statistic: string,
  period: Duration,
): cloudwatch.Metric {
  return new cloudwatch.Metric({
    namespace: METRICS_NAMESPACE,
    metricName: metric.name,
    dimensionsMap: { [POOL_DIMENSION]: pool },
    statistic,
    period,
  });
}

export function leasesExpiredMetric(pool: string, period = Duration.minutes(5)): cloudwatch.Metric {
  return poolMetric(opsMetrics.leasesExpired, pool, cloudwatch.Stats.SUM, period);
}

export function oldestPendingAgeMetric(pool: string, period = Duration.minutes(1)): cloudwatch.Metric {
  return poolMetric(opsMetrics.oldestPendingAgeSeconds, pool, cloudwatch.Stats.MAXIMUM, period);
}

export interface AlarmThresholds {
  /** The pool's oldest pending request is older than this for 5 minutes in a row. */
  readonly oldestPendingAgeSeconds: number;
}

export const DEFAULT_ALARM_THRESHOLDS: AlarmThresholds = { oldestPendingAgeSeconds: 900 };

export type AlarmId =
  | 'dlqNotEmpty'
  | 'streamDlqNotEmpty'
  | 'leasesExpiring'
  | 'schedulerErrors'
  | 'schedulerThrottles'
  | 'oldestPendingAge';

export interface OperationsAlarmsProps {
  readonly namePrefix: string;
  readonly pool: string;
  readonly deadLetterQueue: sqs.IQueue;
  /** Where the scheduler's stream mappings report the batches they give up on. */
  readonly streamDeadLetterQueue: sqs.IQueue;
  readonly scheduler: lambda.IFunction;
  readonly thresholds?: Partial<AlarmThresholds>;
}

/**
 * What an operator must hear about, each alarm publishing to one SNS topic (subscribe to its ARN, the
 * `AlarmTopicArn` output). Missing data is "not breaching" throughout: the custom metrics are only
 * emitted by running ticks and sweeps, and an idle or fresh deployment must not page anyone.
 */
export class OperationsAlarms extends Construct {
  readonly topic: sns.Topic;
  readonly alarms: Readonly<Record<AlarmId, cloudwatch.Alarm>>;
  readonly thresholds: AlarmThresholds;

  constructor(scope: Construct, id: string, props: OperationsAlarmsProps) {
    super(scope, id);
    const thresholds = { ...DEFAULT_ALARM_THRESHOLDS, ...props.thresholds };
    this.thresholds = thresholds;
    const name = (suffix: string) => physicalName(props.namePrefix, suffix);
    this.topic = new sns.Topic(this, 'Topic', { topicName: name('alarms'), enforceSSL: true });
    const minute = Duration.minutes(1);
    const notBreaching = cloudwatch.TreatMissingData.NOT_BREACHING;

    /** Any visible message at all, within a minute. */
    const queueNotEmpty = (queue: sqs.IQueue, id: string, suffix: string, description: string) =>
      queue
        .metricApproximateNumberOfMessagesVisible({ period: minute, statistic: cloudwatch.Stats.MAXIMUM })
        .createAlarm(this, id, {
          alarmName: name(suffix),
          alarmDescription: description,
          threshold: 0,
          comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
          evaluationPeriods: 1,
          treatMissingData: notBreaching,
        });

    this.alarms = {
      // A message the worker failed maxReceiveCount times: a work item nobody can run.
      dlqNotEmpty: queueNotEmpty(
        props.deadLetterQueue,
        'DlqNotEmpty',
        'dlq-not-empty',
        'The work dead-letter queue holds messages: work items that repeatedly failed.',
      ),
      // A stream batch the scheduler failed on through every retry (and every bisection): what it
      // would have woken waits for the sweeper's safety tick, and the failing input is still there.
      streamDlqNotEmpty: queueNotEmpty(
        props.streamDeadLetterQueue,
        'StreamDlqNotEmpty',
        'stream-dlq-not-empty',
        'The stream dead-letter queue holds failure records: the scheduler gave up on a stream batch ' +
          'after its retries (each record names the shard and sequence range).',
      ),
      // One expiry is a crashed worker, recovered by a re-plan (E7); expiries in 2 of 3 five-minute
      // windows mean workers keep dying or hanging.
      leasesExpiring: leasesExpiredMetric(props.pool).createAlarm(this, 'LeasesExpiring', {
        alarmName: name('leases-expiring'),
        alarmDescription: `Work item leases of pool ${props.pool} expire repeatedly: workers crash or hang.`,
        threshold: 1,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 3,
        datapointsToAlarm: 2,
        treatMissingData: notBreaching,
      }),
      schedulerErrors: props.scheduler
        .metricErrors({ period: minute, statistic: cloudwatch.Stats.SUM })
        .createAlarm(this, 'SchedulerErrors', {
          alarmName: name('scheduler-errors'),
          alarmDescription: 'The scheduler fails in 3 of the last 5 minutes: nothing new is dispatched.',
          threshold: 1,
          comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
          evaluationPeriods: 5,
          datapointsToAlarm: 3,
          treatMissingData: notBreaching,
        }),
      schedulerThrottles: props.scheduler
        .metricThrottles({ period: minute, statistic: cloudwatch.Stats.SUM })
        .createAlarm(this, 'SchedulerThrottles', {
          alarmName: name('scheduler-throttles'),
          alarmDescription:
            'The scheduler is throttled in 3 of the last 5 minutes (reserved concurrency too low?).',
          threshold: 1,
          comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
          evaluationPeriods: 5,
          datapointsToAlarm: 3,
          treatMissingData: notBreaching,
        }),
      oldestPendingAge: oldestPendingAgeMetric(props.pool).createAlarm(this, 'OldestPendingAge', {
        alarmName: name('oldest-pending-age'),
        alarmDescription:
          `A request of pool ${props.pool} has waited over ${thresholds.oldestPendingAgeSeconds} s for 5 ` +
          'minutes: the queue is stuck or under-provisioned.',
        threshold: thresholds.oldestPendingAgeSeconds,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluationPeriods: 5,
        treatMissingData: notBreaching,
      }),
    };
    const action = new actions.SnsAction(this.topic);
    for (const alarm of Object.values(this.alarms)) alarm.addAlarmAction(action);
  }
}
