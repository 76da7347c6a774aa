import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { physicalName } from '../../shared/base/topology.js';
import { leasesExpiredMetric, oldestPendingAgeMetric } from './alarms.js';

export interface OperationsDashboardProps {
  readonly namePrefix: string;
  readonly pool: string;
  readonly workQueue: sqs.IQueue;
  readonly deadLetterQueue: sqs.IQueue;
  /** The deployed functions by topology id (the worker is absent when workers run outside AWS Lambda). */
  readonly functions: Readonly<Partial<Record<string, lambda.IFunction>>>;
  readonly alarms: readonly cloudwatch.IAlarm[];
  readonly oldestPendingAgeThresholdSeconds: number;
}

const WIDTH = 24;

/** One CloudWatch dashboard: alarm states, the queue picture over time, and the functions' health. */
export class OperationsDashboard extends Construct {
  readonly dashboard: cloudwatch.Dashboard;

  constructor(scope: Construct, id: string, props: OperationsDashboardProps) {
    super(scope, id);
    const minute = Duration.minutes(1);
    const functions = Object.entries(props.functions).filter(
      (entry): entry is [string, lambda.IFunction] => entry[1] !== undefined,
    );
    const perFunction = (metric: (fn: lambda.IFunction) => cloudwatch.IMetric) =>
      functions.map(([functionId, fn]) => withLabel(metric(fn), functionId));

    this.dashboard = new cloudwatch.Dashboard(this, 'Dashboard', {
      dashboardName: physicalName(props.namePrefix, 'operations'),
      defaultInterval: Duration.hours(3),
    });
    this.dashboard.addWidgets(
      new cloudwatch.AlarmStatusWidget({
        title: 'Alarms',
        alarms: [...props.alarms],
        width: WIDTH,
        height: 3,
      }),
    );
    this.dashboard.addWidgets(
      new cloudwatch.GraphWidget({
        title: `Oldest pending request, pool ${props.pool} (s)`,
        left: [oldestPendingAgeMetric(props.pool)],
        leftAnnotations: [{ value: props.oldestPendingAgeThresholdSeconds, label: 'alarm' }],
        width: 8,
      }),
      new cloudwatch.GraphWidget({
        title: 'Leases expired (re-planned by the sweeper)',
        left: [leasesExpiredMetric(props.pool)],
        width: 8,
      }),
      new cloudwatch.GraphWidget({
        title: 'Work queue',
        left: [
          withLabel(props.workQueue.metricApproximateNumberOfMessagesVisible({ period: minute }), 'waiting'),
          withLabel(
            props.workQueue.metricApproximateNumberOfMessagesNotVisible({ period: minute }),
            'in flight',
          ),
          withLabel(
            props.deadLetterQueue.metricApproximateNumberOfMessagesVisible({ period: minute }),
            'dead letters',
          ),
        ],
        right: [
          withLabel(props.workQueue.metricApproximateAgeOfOldestMessage({ period: minute }), 'oldest (s)'),
        ],
        width: 8,
      }),
    );
    this.dashboard.addWidgets(
      new cloudwatch.GraphWidget({
        title: 'Invocations',
        left: perFunction((fn) => fn.metricInvocations({ period: minute })),
        width: 6,
      }),
      new cloudwatch.GraphWidget({
        title: 'Errors',
        left: perFunction((fn) => fn.metricErrors({ period: minute })),
        width: 6,
      }),
      new cloudwatch.GraphWidget({
        title: 'Throttles',
        left: perFunction((fn) => fn.metricThrottles({ period: minute })),
        width: 6,
      }),
      new cloudwatch.GraphWidget({
        title: 'Duration p99 (ms)',
        left: perFunction((fn) => fn.metricDuration({ period: minute, statistic: cloudwatch.Stats.p(99) })),
        width: 6,
      }),
    );
  }
}

function withLabel(metric: cloudwatch.IMetric, label: string): cloudwatch.IMetric {
  return metric instanceof cloudwatch.Metric ? metric.with({ label }) : metric;
}
