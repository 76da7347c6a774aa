import { describe, expect, it } from 'vitest';
import { backoffDelay, exponentialDelay, realSleep } from '../../shared/aws/backoff.js';

describe('backoff', () => {
  it('is full jitter under a capped exponential ceiling', () => {
    const policy = { baseMs: 10, capMs: 300, maxRetries: 5 };
    expect([0, 1, 2, 5, 10].map((retry) => backoffDelay(retry, policy, () => 0.999_999))).toEqual([
      9, 19, 39, 299, 299,
    ]);
    expect(backoffDelay(7, policy, () => 0)).toBe(0);
  });

  it('has an un-jittered ceiling that doubles from its base up to its cap', () => {
    // The local triggers' retry waits and the tick lock's release waits are this ceiling.
    expect([0, 1, 2, 3, 4, 5].map((retry) => exponentialDelay(retry, { baseMs: 100, capMs: 2_000 }))).toEqual(
      [100, 200, 400, 800, 1_600, 2_000],
    );
    expect([1, 2].map((attempt) => exponentialDelay(attempt, { baseMs: 25, capMs: 1_000 }))).toEqual([
      50, 100,
    ]);
  });
});

describe('realSleep', () => {
  it('waits its time, ends early when its signal aborts, and never rejects', async () => {
    const started = Date.now();
    await realSleep(30);
    expect(Date.now() - started).toBeGreaterThanOrEqual(25);

    const controller = new AbortController();
    const early = Date.now();
    const sleeping = realSleep(60_000, controller.signal);
    setTimeout(() => controller.abort(new Error('stop')), 10);
    await expect(sleeping).resolves.toBeUndefined();
    expect(Date.now() - early).toBeLessThan(5_000);

    const aborted = Date.now();
    await realSleep(60_000, controller.signal);
    expect(Date.now() - aborted).toBeLessThan(1_000);
  });
});
