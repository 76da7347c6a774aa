import { afterEach, describe, expect, it } from 'vitest';
import { faultHook } from '../../shared/base/fault-hook.js';
import { CrashPoints, SimulatedCrash } from '../support/faults.js';

/** Crash points: a no-op hook in production code, a seeded crash when a test arms the point. */

let uninstall: (() => void) | undefined;
afterEach(() => {
  uninstall?.();
  uninstall = undefined;
});

/** A step with a boundary in the middle, as the scheduler and worker have them. */
async function twoWrites(log: string[]): Promise<void> {
  log.push('claimed');
  faultHook.crash('test:after-claim');
  await Promise.resolve();
  log.push('sent');
}

describe('the production hook', () => {
  it('does nothing unless a test installs crash points', async () => {
    const log: string[] = [];
    await twoWrites(log);
    expect(log).toEqual(['claimed', 'sent']);
  });
});

describe('telling a simulated crash from an error (faultHook.isCrash)', () => {
  it("knows the fault library's crash however it is thrown, and nothing else", () => {
    expect(faultHook.isCrash(new SimulatedCrash('test:anywhere'))).toBe(true);
    expect(faultHook.isCrash(new Error('simulated crash at test:anywhere'))).toBe(false);
    expect(faultHook.isCrash(Object.assign(new Error('x'), { name: 'InternalFailure' }))).toBe(false);
    expect(faultHook.isCrash('SimulatedCrash')).toBe(false);
  });
});

describe('crash points', () => {
  it('an armed point crashes after the work before it and before the work after it', async () => {
    const points = new CrashPoints();
    uninstall = points.install();
    points.arm('test:after-claim');
    const log: string[] = [];
    const crash = await twoWrites(log).catch((error: unknown) => error);
    expect(crash).toBeInstanceOf(SimulatedCrash);
    expect(crash).toMatchObject({ name: 'SimulatedCrash', point: 'test:after-claim' });
    expect(log).toEqual(['claimed']);
    expect(points.crashes).toEqual({ 'test:after-claim': 1 });
  });

  it('unarmed points only count their hits; disarm stops crashes', async () => {
    const points = new CrashPoints();
    uninstall = points.install();
    await twoWrites([]);
    await twoWrites([]);
    expect(points.hits).toEqual({ 'test:after-claim': 2 });
    points.arm('test:after-claim').disarm('test:after-claim');
    await expect(twoWrites([])).resolves.toBeUndefined();
    expect(points.total).toBe(0);
  });

  it('skip and times choose which hits crash', () => {
    const points = new CrashPoints();
    points.arm('p', { skip: 2, times: 2 });
    const outcomes = Array.from({ length: 6 }, () => {
      try {
        points.maybeCrash('p');
        return 'ok';
      } catch {
        return 'crash';
      }
    });
    expect(outcomes).toEqual(['ok', 'ok', 'crash', 'crash', 'ok', 'ok']);
    expect(points.hits.p).toBe(6);
  });

  it('a probability crashes about that share of hits, the same ones for the same seed', () => {
    const run = (seed: number) => {
      const points = new CrashPoints(seed);
      points.arm('worker:mid-item', { probability: 0.2 });
      return Array.from({ length: 500 }, () => {
        try {
          points.maybeCrash('worker:mid-item');
          return 0;
        } catch {
          return 1;
        }
      });
    };
    const first = run(5);
    const crashes = first.reduce<number>((sum, crashed) => sum + crashed, 0);
    const sd = Math.sqrt(500 * 0.2 * 0.8);
    expect(crashes).toBeGreaterThanOrEqual(100 - 4.5 * sd);
    expect(crashes).toBeLessThanOrEqual(100 + 4.5 * sd);
    expect(run(5)).toEqual(first);
    expect(run(6)).not.toEqual(first);
  });

  it('uninstalling restores the no-op hook', async () => {
    const points = new CrashPoints();
    const restore = points.install();
    points.arm('test:after-claim');
    await expect(twoWrites([])).rejects.toBeInstanceOf(SimulatedCrash);
    restore();
    await expect(twoWrites([])).resolves.toBeUndefined();
    expect(points.hits['test:after-claim']).toBe(1);
  });
});
