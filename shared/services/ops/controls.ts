import { registryKey } from '../../base/registry-keys.js';

/**
 * Operator controls, stored as small registry items keyed by pool (beside the scheduler's `tick#<pool>`):
 *
 * - `cut#<pool>`: "running workers, cut now". Workers poll it while a work item runs and cut (save the
 *   prefixes of unfinished samples, commit what is done, P1-P2) when it was requested after their work
 *   item started. A later request overwrites an earlier one; old requests expire by TTL and are
 *   harmless meanwhile, since a worker only honours a request newer than its own start.
 * - `drain#<pool>`: "dispatch nothing new". While it exists the scheduler plans no work for the pool;
 *   work in flight finishes and commits. Deleting it (`drain --off`) resumes dispatch.
 */

export const controlKey = { cut: registryKey.cutRequest, drain: registryKey.drain } as const;

/** Pool names appear in registry keys and the `live` index key (`<pool>#<shard>`). */
export const POOL_PATTERN = /^[A-Za-z0-9_.-]{1,64}$/;

/** A cut request stays readable this long; workers poll far more often than that. */
export const CUT_REQUEST_TTL_SECONDS = 24 * 3600;

/** `registry` item `cut#<pool>`. */
export interface CutRequestRecord {
  readonly pk: string;
  readonly pool: string;
  /** Epoch ms of the request. */
  readonly requested_at: number;
  /** Who asked (operator user and host), for the record. */
  readonly requested_by: string;
  /** Epoch seconds (DynamoDB TTL). */
  readonly ttl: number;
}

/** `registry` item `drain#<pool>`; its presence is the flag. */
export interface DrainRecord {
  readonly pk: string;
  readonly pool: string;
  /** Epoch ms since which the pool drains. */
  readonly since: number;
  readonly requested_by: string;
  readonly reason?: string;
}

export function cutRequestRecord(pool: string, now: number, requestedBy: string): CutRequestRecord {
  return {
    pk: controlKey.cut(pool),
    pool,
    requested_at: now,
    requested_by: requestedBy,
    ttl: Math.floor(now / 1000) + CUT_REQUEST_TTL_SECONDS,
  };
}

export function drainRecord(pool: string, now: number, requestedBy: string, reason?: string): DrainRecord {
  return {
    pk: controlKey.drain(pool),
    pool,
    since: now,
    requested_by: requestedBy,
    ...(reason === undefined || reason === '' ? {} : { reason }),
  };
}

/**
 * Whether a worker whose current work item started at `workStartedAt` (epoch ms) must cut: only a
 * request made after that start counts, so a request answered by an earlier work item never cuts the
 * next one.
 */
export function cutRequestedSince(record: CutRequestRecord | undefined, workStartedAt: number): boolean {
  return record !== undefined && record.requested_at > workStartedAt;
}
