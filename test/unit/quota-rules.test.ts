import { describe, expect, it } from 'vitest';
import { readConfig, readDeployContext } from '../../shared/base/config.js';
import { ConfigError } from '../../shared/base/errors.js';
import {
  decidePoll,
  FullWindows,
  MAX_REAPED_PER_ACQUIRE,
  POLL_LEASES_PER_RECORD,
  POLL_RETRY_AFTER_MS,
  pollRecordLimits,
  windowAt,
} from '../../shared/domain/quota-rules.js';

describe('fixed windows', () => {
  it('every instant of a second names the same window; the next second another', () => {
    expect(windowAt(5_000)).toEqual({ start: 5_000, end: 6_000 });
    expect(windowAt(5_999)).toEqual({ start: 5_000, end: 6_000 });
    expect(windowAt(6_000)).toEqual({ start: 6_000, end: 7_000 });
  });

  it('a window seen full stays full until it ends, then is forgotten', () => {
    const full = new FullWindows();
    expect(full.isFull('submit#acme', 5_100)).toBe(false);
    full.markFull('submit#acme', 6_000, 5_100);
    expect(full.isFull('submit#acme', 5_999)).toBe(true);
    expect(full.isFull('submit#zeta', 5_999)).toBe(false);
    expect(full.isFull('submit#acme', 6_000)).toBe(false);
    // Forgotten: a later window is asked of DynamoDB again.
    expect(full.isFull('submit#acme', 6_001)).toBe(false);
  });

  it('stays bounded: ended windows go first, then the oldest entry', () => {
    const full = new FullWindows(2);
    full.markFull('a', 1_000, 0);
    full.markFull('b', 2_000, 0);
    full.markFull('c', 2_000, 1_500); // `a` ended: it goes
    expect([full.isFull('a', 1_500), full.isFull('b', 1_500), full.isFull('c', 1_500)]).toEqual([
      false,
      true,
      true,
    ]);
    full.markFull('d', 2_000, 1_500); // none ended: the oldest (`b`) goes
    expect([full.isFull('b', 1_500), full.isFull('c', 1_500), full.isFull('d', 1_500)]).toEqual([
      false,
      true,
      true,
    ]);
  });
});

describe('long-poll slots', () => {
  it('room below the limit, whatever the leases say', () => {
    expect(decidePoll({}, 1, 0)).toEqual({ kind: 'room' });
    expect(decidePoll({ a: 10 }, 2, 50)).toEqual({ kind: 'room' });
  });

  it('full of live leases: refused, told to retry soon (a live poll may end at any moment)', () => {
    expect(decidePoll({ a: 100, b: 200 }, 2, 50)).toEqual({
      kind: 'full',
      retryAfterMs: POLL_RETRY_AFTER_MS,
    });
  });

  it('full only because of expired leases: they are reaped, oldest first, at most MAX_REAPED_PER_ACQUIRE at a time', () => {
    expect(decidePoll({ a: 100, b: 20, c: 10 }, 3, 50)).toEqual({ kind: 'reap', expired: ['c', 'b'] });
    // An expired lease ends exactly at its instant.
    expect(decidePoll({ a: 50, b: 200 }, 2, 50)).toEqual({ kind: 'reap', expired: ['a'] });
    const many = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`t${i}`, i]));
    const decision = decidePoll(many, 40, 1_000);
    expect(decision.kind).toBe('reap');
    expect(decision.kind === 'reap' && decision.expired.length).toBe(MAX_REAPED_PER_ACQUIRE);
  });

  it("a tenant's slots are split over records of at most 64 leases, evenly, together exactly the limit", () => {
    expect(pollRecordLimits(1)).toEqual([1]);
    expect(pollRecordLimits(POLL_LEASES_PER_RECORD)).toEqual([64]);
    expect(pollRecordLimits(65)).toEqual([33, 32]);
    expect(pollRecordLimits(130)).toEqual([44, 43, 43]);
    expect(pollRecordLimits(256)).toEqual([64, 64, 64, 64]);
    for (let limit = 1; limit <= 600; limit++) {
      const limits = pollRecordLimits(limit);
      expect(limits.reduce((a, b) => a + b, 0)).toBe(limit);
      expect(Math.max(...limits)).toBeLessThanOrEqual(POLL_LEASES_PER_RECORD);
      expect(Math.max(...limits) - Math.min(...limits)).toBeLessThanOrEqual(1);
    }
  });

  it('a limit lowered below the leases held refuses until enough expire', () => {
    // 3 held, limit 2, one expired: removing it still leaves 2, no room for a third.
    expect(decidePoll({ a: 10, b: 100, c: 100 }, 2, 50)).toMatchObject({ kind: 'full' });
  });
});

describe('limits configuration', () => {
  it('quota variables have generous defaults and take positive integers only', () => {
    const defaults = readConfig({}).tunables;
    expect(defaults).toMatchObject({
      submitsPerSecond: 200,
      // An RL batch of 128 calls waits on 128 futures at once, twice over while a second batch starts.
      longPollsPerTenant: 256,
      operatorReadsPerSecond: 5,
    });
    expect(readConfig({ SUBMITS_PER_SECOND: '7' }).tunables.submitsPerSecond).toBe(7);
    expect(() => readConfig({ LONG_POLLS_PER_TENANT: '0' })).toThrow(/LONG_POLLS_PER_TENANT/);
  });

  it('deploy-time limits come from CDK context, and quota context values become the api variables', () => {
    const context = (values: Record<string, unknown>) => (key: string) => values[key];
    expect(readDeployContext(context({}))).toEqual({
      limits: {
        apiRatePerSecond: 500,
        apiBurst: 1000,
        apiReservedConcurrency: 500,
        workerReservedConcurrency: 8,
      },
      apiQuotaEnv: {},
    });
    const set = readDeployContext(
      context({ apiRatePerSecond: '50', longPollsPerTenant: 4, submitsPerSecond: 200 }),
    );
    expect(set.limits.apiRatePerSecond).toBe(50);
    // Only values that differ from the default are passed (the default is the function's own).
    expect(set.apiQuotaEnv).toEqual({ LONG_POLLS_PER_TENANT: '4' });
    expect(() => readDeployContext(context({ apiBurst: 'lots' }))).toThrow(ConfigError);
    expect(() => readDeployContext(context({ apiBurst: 'lots' }))).toThrow(/apiBurst/);
  });

  it('the key cache and the poll slot grace are deploy context too, where 0 (off) is allowed', () => {
    const context = (values: Record<string, unknown>) => (key: string) => values[key];
    expect(
      readDeployContext(context({ apiKeyCacheSeconds: 0, pollSlotAfterMs: '2500' })).apiQuotaEnv,
    ).toEqual({
      API_KEY_CACHE_SECONDS: '0',
      POLL_SLOT_AFTER_MS: '2500',
    });
    // 0 stays refused where it would mean no quota at all.
    expect(() => readDeployContext(context({ longPollsPerTenant: 0 }))).toThrow(/longPollsPerTenant/);
    expect(() => readDeployContext(context({ apiKeyCacheSeconds: -1 }))).toThrow(/0 or more/);
  });
});
