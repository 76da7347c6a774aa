import { Metrics } from '@aws-lambda-powertools/metrics';
import { config } from '../../base/config.js';
import { logger } from '../../base/logger.js';

/**
 * Custom CloudWatch metrics, named in one place: the scheduler, sweeper and api emit them (through
 * Powertools Metrics, as Embedded Metric Format lines on stdout, which Lambda ships to CloudWatch Logs
 * and CloudWatch turns into metrics), and the stack's alarms and dashboard (`cdk/constructs/alarms.ts`, `dashboard.ts`) watch
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

/**
 * One Powertools `Metrics` for the process. Powertools gives every datum a `service` dimension by
 * default; the alarms and the dashboard watch the metrics by `Pool` alone, and CloudWatch files a
 * datum under its exact dimension set, so that default is dropped: each datum has `Pool` only.
 */
const metrics = new Metrics({ namespace: METRICS_NAMESPACE, logger });
metrics.clearDefaultDimensions();

/**
 * Publishes one datum now, as one EMF line on stdout (Lambda ships it to CloudWatch Logs, which turns
 * it into the metric). Published at once rather than at the end of the invocation: a datum then
 * survives an invocation cut short by its timeout, and callers outside a Lambda handler (the local
 * runtime's ticks, tests) need no flush. Off unless `config().emitMetrics`.
 */
export function emitMetric(
  metric: OpsMetric,
  value: number,
  pool: string,
  options: { readonly now?: number } = {},
): void {
  if (!Number.isFinite(value))
    throw new RangeError(`metric ${metric.name} needs a finite value, got ${value}`);
  if (!config().emitMetrics) return;
  metrics.addDimension(POOL_DIMENSION, pool);
  metrics.addMetric(metric.name, metric.unit, value);
  if (options.now !== undefined) metrics.setTimestamp(options.now);
  metrics.publishStoredMetrics();
}
