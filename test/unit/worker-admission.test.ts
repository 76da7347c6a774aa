import { describe, expect, it } from 'vitest';
import { WorkItemAdmission, type WorkItemModels } from '../../shared/services/worker/admission.js';

/** Admits each in order, recording which ones run; `release(name)` ends one. */
function harness(limit: number) {
  const admission = new WorkItemAdmission(limit);
  const running = new Set<string>();
  const releases = new Map<string, () => void>();
  const outcomes = new Map<string, 'ran' | 'gave up'>();
  const admit = (name: string, models: WorkItemModels, signal?: AbortSignal) =>
    admission.admit(models, signal).then((release) => {
      if (release === undefined) {
        outcomes.set(name, 'gave up');
        return;
      }
      outcomes.set(name, 'ran');
      running.add(name);
      releases.set(name, () => {
        running.delete(name);
        release();
      });
    });
  const settle = () => new Promise((resolve) => setImmediate(resolve));
  return {
    admission,
    running,
    outcomes,
    admit,
    settle,
    release: async (name: string) => {
      releases.get(name)?.();
      await settle();
    },
  };
}

describe('WorkItemAdmission', () => {
  it('runs up to its limit at once, and the next one when a slot frees', async () => {
    const h = harness(2);
    void h.admit('a', []);
    void h.admit('b', []);
    void h.admit('c', []);
    await h.settle();
    expect([...h.running]).toEqual(['a', 'b']);
    expect(h.admission.waiting).toBe(1);
    await h.release('a');
    expect([...h.running].sort()).toEqual(['b', 'c']);
  });

  it('with a limit of 1, runs one at a time in arrival order', async () => {
    const h = harness(1);
    for (const name of ['a', 'b', 'c']) void h.admit(name, []);
    await h.settle();
    expect([...h.running]).toEqual(['a']);
    await h.release('a');
    expect([...h.running]).toEqual(['b']);
    await h.release('b');
    expect([...h.running]).toEqual(['c']);
  });

  it('never runs two work items naming the same model; unrelated ones pass the one that waits', async () => {
    const h = harness(4);
    void h.admit('train m1', ['m1']);
    void h.admit('duplicate of m1', ['m1', 'm2']);
    void h.admit('samples', []);
    void h.admit('train m2', ['m2']);
    void h.admit('train m3', ['m3']);
    await h.settle();
    // m2 waits behind the duplicate, which holds its place for m1 and m2.
    expect([...h.running].sort()).toEqual(['samples', 'train m1', 'train m3']);
    await h.release('train m1');
    expect(h.running.has('duplicate of m1')).toBe(true);
    expect(h.running.has('train m2')).toBe(false);
    await h.release('duplicate of m1');
    expect(h.running.has('train m2')).toBe(true);
  });

  it('runs a work item whose models are unknown alone, and nothing after it until it ended', async () => {
    const h = harness(4);
    void h.admit('samples', []);
    void h.admit('bare manifest', 'all');
    void h.admit('later samples', []);
    await h.settle();
    expect([...h.running]).toEqual(['samples']);
    await h.release('samples');
    expect([...h.running]).toEqual(['bare manifest']);
    await h.release('bare manifest');
    expect([...h.running]).toEqual(['later samples']);
  });

  it('gives up a waiting work item when its signal aborts, and lets the ones behind it run', async () => {
    const h = harness(1);
    const stop = new AbortController();
    void h.admit('a', ['m1']);
    void h.admit('b', 'all', stop.signal);
    void h.admit('c', ['m2']);
    await h.settle();
    stop.abort();
    await h.settle();
    expect(h.outcomes.get('b')).toBe('gave up');
    await h.release('a');
    expect([...h.running]).toEqual(['c']);
    // Already aborted: never admitted.
    await h.admit('d', [], stop.signal);
    expect(h.outcomes.get('d')).toBe('gave up');
  });

  it('a release called twice frees one slot', async () => {
    const admission = new WorkItemAdmission(1);
    const release = await admission.admit([]);
    const next = admission.admit([]);
    release?.();
    release?.();
    await next;
    expect(admission.running).toBe(1);
  });

  it('refuses a limit that is not a positive integer', () => {
    expect(() => new WorkItemAdmission(0)).toThrow(/positive integer/);
    expect(() => new WorkItemAdmission(1.5)).toThrow(/positive integer/);
  });
});
