import { describe, expect, it } from 'vitest';
import { Backlog, Pacer } from '../../shared/repositories/prefix/pacing.js';

function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // Spin: stands in for encoding work.
  }
}

describe('Pacer', () => {
  it('lets a timer fire during a long loop of work, and yields before the first piece', async () => {
    const pacer = new Pacer(2);
    const events: string[] = [];
    const loop = (async () => {
      for (let i = 0; i < 20; i++) {
        await pacer.maybeYield();
        events.push(`work ${i}`);
        busy(1);
      }
    })();
    events.push('caller carries on');
    setTimeout(() => events.push('timer'), 0);
    await loop;
    expect(events[0]).toBe('caller carries on');
    const timer = events.indexOf('timer');
    expect(timer).toBeGreaterThan(0);
    expect(timer).toBeLessThan(events.length - 1);
  });
});

describe('Backlog', () => {
  it('holds the producer while `limit` pieces are outstanding, and releases it as they settle', async () => {
    const backlog = new Backlog(2);
    const releases: (() => void)[] = [];
    const piece = (fail: boolean): Promise<void> =>
      new Promise<void>((resolve, reject) => {
        releases.push(() => (fail ? reject(new Error('write failed')) : resolve()));
      });
    const first = piece(false);
    const second = piece(true);
    backlog.add(first);
    backlog.add(second);
    second.catch(() => undefined);
    let roomAt = 0;
    const room = backlog.room().then(() => {
      roomAt = releases.length;
    });
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect(roomAt).toBe(0);
    releases[1]?.();
    await room;
    expect(roomAt).toBe(2);
    releases[0]?.();
  });
});
