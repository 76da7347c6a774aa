import { describe, expect, it } from 'vitest';
import { InProcessCommitSignal, NO_COMMIT_SIGNAL } from '../../shared/base/commit-signal.js';

describe('the in-process commit signal', () => {
  it('wakes a waiting watch of the committed request, and only that one', async () => {
    const signal = new InProcessCommitSignal();
    const mine = signal.watch('r1');
    const other = signal.watch('r2');
    const waiting = mine.wait(60_000);
    const otherWaiting = other.wait(50);
    signal.committed(['r1', 'r9']);
    expect(await waiting).toBe(true);
    expect(await otherWaiting).toBe(false);
    mine.close();
    other.close();
    expect(signal.watched).toBe(0);
  });

  it('keeps an announcement made between waits (or before the first), and consumes it once', async () => {
    const signal = new InProcessCommitSignal();
    const watch = signal.watch('r1');
    signal.committed(['r1']);
    expect(await watch.wait(60_000)).toBe(true);
    expect(await watch.wait(20)).toBe(false);
    watch.close();
  });

  it('a closed watch hears nothing and its pending wait ends false', async () => {
    const signal = new InProcessCommitSignal();
    const watch = signal.watch('r1');
    const waiting = watch.wait(60_000);
    watch.close();
    expect(await waiting).toBe(false);
    signal.committed(['r1']);
    expect(signal.watched).toBe(0);
  });

  it('AWS has nothing to watch', () => {
    expect(NO_COMMIT_SIGNAL.watch('r1')).toBeUndefined();
  });
});
