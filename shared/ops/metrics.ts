import { config } from '../config.js';

/**
 * Custom CloudWatch metrics, named in one place: the scheduler, sweeper and api emit them (as Embedded
 * Metric Format lines on stdout, which Lambda ships to CloudWatch Logs and CloudWatch turns into
 * metrics), and the stack's alarms and dashboard (`cdk/constructs/alarms.ts`, `dashboard.ts`) watch
 * them. Every datum carries the pool as its only dimension, so alarms are per pool.
 */

export const METRICS_NAMESPACE = 'TinkerServerless';
export const POOL_DIMENSION = 'Pool';

export type MetricUnit = 'Count' | 'Seconds';

export interface OpsMetric {
  readonly name: string;
  readonly unit: MetricUnit;
}

export const opsMetrics = {
  /** Sweeper, each run: leases it found expired and re-planned (E7). Repeated expiries mean stuck workers. */
  leasesExpired: { name: 'LeasesExpired', unit: 'Count' },
  /** Scheduler, each tick (0 when nothing is pending): age of the oldest pending request in the pool. */
  oldestPendingAgeSeconds: { name: 'OldestPendingAgeSeconds', unit: 'Seconds' },
  /** API, per refusal: a submit over its tenant's SUBMITS_PER_SECOND (answered 429). */
  throttledSubmits: { name: 'ThrottledSubmits', unit: 'Count' },
  /** API, per refusal: a long poll over its tenant's LONG_POLLS_PER_TENANT (answered 429). */
  throttledLongPolls: { name: 'ThrottledLongPolls', unit: 'Count' },
  /** API, per refusal: an operator's status read over OPERATOR_READS_PER_SECOND (answered 429). */
  throttledOperatorReads: { name: 'ThrottledOperatorReads', unit: 'Count' },
} as const satisfies Record<string, OpsMetric>;

/** One EMF document: the `_aws` metadata names the metric, the root holds its value and dimension. */
export interface EmfDocument {
  readonly _aws: {
    readonly Timestamp: number;
    readonly CloudWatchMetrics: readonly {
      readonly Namespace: string;
      readonly Dimensions: readonly (readonly string[])[];
      readonly Metrics: readonly { readonly Name: string; readonly Unit: MetricUnit }[];
    }[];
  };
  readonly [key: string]: unknown;
}

export function emfDocument(metric: OpsMetric, value: number, pool: string, timestamp: number): EmfDocument {
  if (!Number.isFinite(value))
    throw new RangeError(`metric ${metric.name} needs a finite value, got ${value}`);
  return {
    _aws: {
      Timestamp: timestamp,
      CloudWatchMetrics: [
        {
          Namespace: METRICS_NAMESPACE,
          Dimensions: [[POOL_DIMENSION]],
          Metrics: [{ Name: metric.name, Unit: metric.unit }],
        },
      ],
    },
    [POOL_DIMENSION]: pool,
    [metric.name]: value,
  };
}

/**
 * Writes one metric datum as a single EMF line. On Lambda, stdout is the function's log stream; the
 * line must stay one line, which is why it bypasses the logger's own formatting.
 */
export function emitMetric(
  metric: OpsMetric,
  value: number,
  pool: string,
  options: { readonly now?: number; readonly write?: (line: string) => void } = {},
): void {
  if (options.write === undefined && !config().emitMetrics) return;
  const write = options.write ?? ((line: string) => process.stdout.write(line));
  write(`${JSON.stringify(emfDocument(metric, value, pool, options.now ?? Date.now()))}\n`);
}
