import { describe, expect, it } from 'vitest';
import type { Backend, BackendState } from '../../shared/backend/backend.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { Residency, type ResidencyPolicy } from '../../shared/services/worker/residency.js';

/**
 * The residency rules that need no cloud: when a resident state may serve a work item (S1), when a
 * commit carries a snapshot (S3). Let-goes and renewals write to the cloud:
 * test/integration/worker-residency.test.ts.
 */

const POLICY: ResidencyPolicy = {
  maxModels: 4,
  snapshotEverySteps: 10,
  snapshotEveryMs: 60_000,
  idleMs: 3_600_000,
  holdMs: 30_000,
};

/** A store nobody may reach: these tests never let go. */
const UNREACHABLE = () => {
  throw new Error('no cloud in a unit test');
};

function residency(backend: Backend, now: () => number = () => 1000, policy = POLICY): Residency {
  return new Residency(backend, UNREACHABLE, policy, { worker: 'w-unit', lane: 3, now });
}

const state = (weights_version: number): BackendState => ({ kind: 'test', base_model: 'm', weights_version });

function entry(modelId: string, appliedThrough: number, held: BackendState = state(0)) {
  return { modelId, state: held, appliedThrough, epoch: 2, replayLength: 1, unsnapshottedSince: 900 };
}

describe('Residency', () => {
  it('serves a work item only the state after its base_applied_through, once', () => {
    const held = residency(new ReferenceBackend());
    held.keep(entry('m1', 5, state(7)));
    expect(held.take('m1', 4)).toBeUndefined();
    // The stale entry is gone: the next work item rebuilds too.
    expect(held.has('m1')).toBe(false);
    held.keep(entry('m1', 5, state(7)));
    expect(held.take('m1', 5)?.state).toEqual(state(7));
    expect(held.take('m1', 5)).toBeUndefined();
    expect(held.counters).toMatchObject({ hits: 1, misses: 2 });
    expect(held.holder).toEqual({ worker: 'w-unit', lane: 3 });
  });

  it('does not serve a state its backend no longer holds (an engine restarted)', () => {
    const released: BackendState[] = [];
    const backend = Object.assign(Object.create(new ReferenceBackend()) as Backend, {
      holds: (candidate: BackendState) => candidate.weights_version !== 13,
      release: (candidate: BackendState) => {
        released.push(candidate);
      },
    });
    const held = residency(backend);
    held.keep(entry('gone', 2, state(13)));
    expect(held.take('gone', 2)).toBeUndefined();
    expect(released).toEqual([state(13)]);
  });

  it('asks for a snapshot when the replay log reaches its count or its oldest step its age', () => {
    let now = 1000;
    const held = residency(new ReferenceBackend(), () => now);
    expect(held.snapshotDue(9, now)).toBe(false);
    expect(held.snapshotDue(10, now)).toBe(true);
    expect(held.snapshotDue(1, undefined)).toBe(false);
    now += POLICY.snapshotEveryMs;
    expect(held.snapshotDue(1, 1000)).toBe(true);
    expect(held.holdUntil()).toBe(now + POLICY.holdMs);
  });

  it('holds nothing with maxModels 0: every state is released at once', () => {
    const released: BackendState[] = [];
    const backend = Object.assign(Object.create(new ReferenceBackend()) as Backend, {
      release: (candidate: BackendState) => {
        released.push(candidate);
      },
    });
    const off = residency(backend, () => 0, { ...POLICY, maxModels: 0 });
    expect(off.enabled).toBe(false);
    off.keep(entry('m', 1, state(1)));
    expect(off.size).toBe(0);
    expect(released).toEqual([state(1)]);
  });
});
