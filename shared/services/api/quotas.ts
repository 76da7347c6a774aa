import { randomBytes } from 'node:crypto';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { config, type Tunables } from '../../base/config.js';
import { QuotaExceededError } from '../../base/errors.js';
import { logger } from '../../base/logger.js';
import { FullWindows, windowAt } from '../../domain/quota-rules.js';
import { acquirePollLease, countRequest, releasePollLease } from '../../repositories/quotas.js';
import { emitMetric, type OpsMetric, opsMetrics } from '../ops/metrics.js';

/**
 * The API's quotas (docs/configuration.md#limits), checked after authentication and before anything is stored,
 * so a refused request stores nothing and an unauthenticated one never counts against anyone:
 * - submits: requests that store something, SUBMITS_PER_SECOND per tenant;
 * - long polls: retrieve_future calls still waiting after POLL_SLOT_AFTER_MS, LONG_POLLS_PER_TENANT
 *   open at once per tenant (a shorter poll takes no slot);
 * - operator reads: the status page's data, OPERATOR_READS_PER_SECOND for all operators together.
 * Each refusal is a 429 with Retry-After and one datum of its metric.
 */

/** Windows this container saw full (per process: a Lambda container serves one request at a time). */
const fullWindows = new FullWindows();

/** A poll's lease outlives its deadline by this much, so only a poll that is gone can lose it. */
const POLL_LEASE_MARGIN_MS = 5_000;

function refused(metric: OpsMetric, message: string, retryAfterMs: number, subject: string): never {
  logger.warn('quota refused', { metric: metric.name, subject });
  // The pool is every function's setting; only read when the datum is written.
  if (config().emitMetrics) emitMetric(metric, 1, config().pool);
  throw new QuotaExceededError(message, retryAfterMs);
}

/** A per-second quota: the metric of its refusals, and what its 429 says, given the limit. */
interface RateQuota {
  readonly metric: OpsMetric;
  readonly refusal: (limit: number) => string;
}

const RATE_QUOTAS = {
  submit: {
    metric: opsMetrics.throttledSubmits,
    refusal: (limit) =>
      `too many requests: this tenant may submit ${limit} per second (SUBMITS_PER_SECOND); retry after the Retry-After header's seconds`,
  },
  'operator-read': {
    metric: opsMetrics.throttledOperatorReads,
    refusal: (limit) =>
      `too many status reads: operators may read the queue status ${limit} times per second together (OPERATOR_READS_PER_SECOND)`,
  },
} as const satisfies Readonly<Record<string, RateQuota>>;

/** Counts one request against `subject`'s budget of the `scope` quota, or refuses it with 429. */
async function countOrRefuse(
  doc: DynamoDBDocumentClient,
  table: string,
  scope: keyof typeof RATE_QUOTAS,
  input: { readonly subject: string; readonly limit: number; readonly now: number },
): Promise<void> {
  const { metric, refusal } = RATE_QUOTAS[scope];
  const memo = `${scope}#${input.subject}`;
  const refuse = (windowEnd: number) =>
    refused(metric, refusal(input.limit), Math.max(1, windowEnd - input.now), input.subject);
  if (fullWindows.isFull(memo, input.now)) refuse(windowAt(input.now).end);
  const count = await countRequest(doc, table, { scope, ...input });
  if (count.allowed) return;
  fullWindows.markFull(memo, count.windowEnd, input.now);
  refuse(count.windowEnd);
}

export function checkSubmitQuota(
  doc: DynamoDBDocumentClient,
  table: string,
  tenant: string,
  tunables: Pick<Tunables, 'submitsPerSecond'>,
  now: number,
): Promise<void> {
  return countOrRefuse(doc, table, 'submit', { subject: tenant, limit: tunables.submitsPerSecond, now });
}

export function checkOperatorReadQuota(
  doc: DynamoDBDocumentClient,
  table: string,
  tunables: Pick<Tunables, 'operatorReadsPerSecond'>,
  now: number,
): Promise<void> {
  // One budget for every operator: the data read spans every shard of the live index.
  const limit = tunables.operatorReadsPerSecond;
  return countOrRefuse(doc, table, 'operator-read', { subject: 'all', limit, now });
}

/**
 * Runs a long poll that ends by `deadline` in one of the tenant's LONG_POLLS_PER_TENANT slots, or
 * refuses it with 429, then `answer`s from what the poll found. The slot is given back once `poll`
 * settles, while `answer` runs (its reads of the result need no slot), so the release's write is off
 * the answer's critical path; both are awaited before this settles, on every path, so a Lambda never
 * freezes with a release in flight. A slot that a crash never gives back expires
 * `POLL_LEASE_MARGIN_MS` after the deadline.
 */
export async function inPollSlot<T, R>(
  doc: DynamoDBDocumentClient,
  table: string,
  input: {
    readonly tenant: string;
    readonly tunables: Pick<Tunables, 'longPollsPerTenant'>;
    readonly deadline: number;
  },
  poll: () => Promise<T>,
  answer: (polled: T) => Promise<R>,
): Promise<R> {
  const limit = input.tunables.longPollsPerTenant;
  const lease = await acquirePollLease(doc, table, {
    tenant: input.tenant,
    token: randomBytes(9).toString('base64url'),
    limit,
    until: input.deadline + POLL_LEASE_MARGIN_MS,
    now: Date.now(),
  });
  if (!lease.acquired) {
    refused(
      opsMetrics.throttledLongPolls,
      `too many open retrieve_future polls: this tenant may hold ${limit} at once (LONG_POLLS_PER_TENANT); retry after the Retry-After header's seconds`,
      lease.retryAfterMs,
      input.tenant,
    );
  }
  // Never rejects: a failed release leaves the lease to expire on its own, and the answer stands.
  const release = (): Promise<void> =>
    releasePollLease(doc, table, { tenant: input.tenant, token: lease.token, record: lease.record }).catch(
      (error: unknown) => {
        logger.warn('poll lease release failed', {
          error: error instanceof Error ? error.name : typeof error,
        });
      },
    );
  let polled: T;
  try {
    polled = await poll();
  } catch (error) {
    await release();
    throw error;
  }
  const released = release();
  try {
    return await answer(polled);
  } finally {
    await released;
  }
}
