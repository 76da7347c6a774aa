/**
 * The arithmetic of the per-tenant quotas (docs/configuration.md#limits), pure: fixed one-second windows for
 * request rates, and leases for concurrent long polls. The DynamoDB side is
 * `shared/repositories/quotas.ts`; the API edge's use of both is `shared/services/api/quotas.ts`.
 */

/** Rates are counted per fixed window of this length (a burst may reach twice the rate across an edge). */
export const RATE_WINDOW_MS = 1_000;

export interface Window {
  /** Start of the window `now` falls in, ms since the epoch: names the counter item. */
  readonly start: number;
  /** When the window ends: a refused request may retry then. */
  readonly end: number;
}

export function windowAt(now: number, windowMs: number = RATE_WINDOW_MS): Window {
  const start = Math.floor(now / windowMs) * windowMs;
  return { start, end: start + windowMs };
}

/**
 * Windows this container already saw full, by counter key. A full window's count only grows, so a
 * later request in it is refused without calling DynamoDB: a flood from one tenant costs one
 * refused write per container per window, not one per request.
 */
export class FullWindows {
  private readonly ends = new Map<string, number>();

  constructor(private readonly maxEntries = 1_000) {}

  isFull(key: string, now: number): boolean {
    const end = this.ends.get(key);
    if (end === undefined) return false;
    if (now < end) return true;
    this.ends.delete(key);
    return false;
  }

  markFull(key: string, end: number, now: number): void {
    if (this.ends.size >= this.maxEntries) {
      for (const [other, otherEnd] of this.ends) if (otherEnd <= now) this.ends.delete(other);
      // Still full of live windows: forget the oldest entry (it only costs a refused write).
      if (this.ends.size >= this.maxEntries) {
        const oldest = this.ends.keys().next();
        if (oldest.done !== true) this.ends.delete(oldest.value);
      }
    }
    this.ends.set(key, end);
  }
}

/** A tenant's open long polls: lease token -> when the lease ends (ms since the epoch). */
export type PollHolders = Readonly<Record<string, number>>;

/**
 * Leases one poll record holds at most. Each acquire and release rewrites the record, so its size is
 * the write's cost: 64 leases are about 2 KB (2 WCU), and a tenant's polls spread over several records
 * stay within what one item takes (1,000 WCU/s) when a 128-call RL batch's polls all start at once.
 */
export const POLL_LEASES_PER_RECORD = 64;

/**
 * How a tenant's `limit` open polls are split over its records: as few records as hold at most
 * `POLL_LEASES_PER_RECORD` each, the limit shared evenly; together exactly `limit`.
 */
export function pollRecordLimits(limit: number): number[] {
  const records = Math.max(1, Math.ceil(limit / POLL_LEASES_PER_RECORD));
  return Array.from(
    { length: records },
    (_, record) => Math.floor(limit / records) + (record < limit % records ? 1 : 0),
  );
}

/** Most expired leases one acquire removes (keeps the update expression small). */
export const MAX_REAPED_PER_ACQUIRE = 25;

export type PollDecision =
  | { readonly kind: 'room' }
  /** Full only because of leases a crashed poll never gave back: remove these, then take one. */
  | { readonly kind: 'reap'; readonly expired: readonly string[] }
  /** Full of live polls. */
  | { readonly kind: 'full'; readonly retryAfterMs: number };

/**
 * A live poll may end at any moment (its future completes), long before its lease: a refused poll
 * is told to retry soon rather than when the oldest lease runs out.
 */
export const POLL_RETRY_AFTER_MS = 1_000;

/**
 * Whether a new poll fits among `holders`. A lease outlives its poll by a margin, so an expired
 * lease is one whose poll cannot still be running (its Lambda ended or crashed).
 */
export function decidePoll(holders: PollHolders, limit: number, now: number): PollDecision {
  const entries = Object.entries(holders);
  if (entries.length < limit) return { kind: 'room' };
  const expired = entries
    .filter(([, until]) => until <= now)
    .sort((a, b) => a[1] - b[1])
    .slice(0, MAX_REAPED_PER_ACQUIRE)
    .map(([token]) => token);
  // Room appears once enough expired leases go that the new one fits.
  if (expired.length > 0 && entries.length - expired.length < limit) return { kind: 'reap', expired };
  return { kind: 'full', retryAfterMs: POLL_RETRY_AFTER_MS };
}
