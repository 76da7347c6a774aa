import { describe, expect, it } from 'vitest';
import {
  checkpointKeyFromRoute,
  expiryOf,
  GC_PENDING_RECHECK_MS,
  gcDecision,
  gcDueBound,
  gcSortKey,
  isLiveCheckpoint,
} from '../../shared/domain/checkpoint-life.js';
import { listSortKey } from '../../shared/domain/listing-keys.js';
import { mayAccess } from '../../shared/repositories/checkpoints/names.js';
import { compileRoutes } from '../../shared/services/api/route-matcher.js';

/** The pure rules of the checkpoint lifecycle (C2-C5): liveness, TTL math, route keys, gc order. */

describe('isLiveCheckpoint (C5)', () => {
  const now = 1_700_000_000_000;
  it('is committed and not yet expired; no expiry means never', () => {
    expect(isLiveCheckpoint({ status: 'committed' }, now)).toBe(true);
    expect(isLiveCheckpoint({ status: 'committed', expires_at: now + 1 }, now)).toBe(true);
    // Expired from the very millisecond it expires, collected or not.
    expect(isLiveCheckpoint({ status: 'committed', expires_at: now }, now)).toBe(false);
    expect(isLiveCheckpoint({ status: 'committed', expires_at: now - 1 }, now)).toBe(false);
    expect(isLiveCheckpoint({ status: 'pending' }, now)).toBe(false);
  });
});

describe('expiryOf (TTL math)', () => {
  it('adds whole seconds to the start; null or absent means no expiry', () => {
    expect(expiryOf(1_000, 60)).toBe(61_000);
    expect(expiryOf(1_000, 1)).toBe(2_000);
    expect(expiryOf(1_000, null)).toBeUndefined();
    expect(expiryOf(1_000, undefined)).toBeUndefined();
  });
});

describe('checkpointKeyFromRoute', () => {
  it("maps the SDK's checkpoint id kinds to the name record's", () => {
    expect(checkpointKeyFromRoute({ run_id: 'model-1', kind: 'weights', name: 'a' })).toEqual({
      modelId: 'model-1',
      kind: 'weights',
      name: 'a',
    });
    expect(checkpointKeyFromRoute({ run_id: 'model-1', kind: 'sampler_weights', name: 'b' })).toEqual({
      modelId: 'model-1',
      kind: 'sampler',
      name: 'b',
    });
  });

  it('refuses other kinds, prototype names and missing parts', () => {
    for (const kind of ['sampler', 'weight', 'constructor', '__proto__', 'toString', ''])
      expect(checkpointKeyFromRoute({ run_id: 'm', kind, name: 'a' }), kind).toBeUndefined();
    expect(checkpointKeyFromRoute({ run_id: 'm', kind: 'weights' })).toBeUndefined();
    expect(checkpointKeyFromRoute({ run_id: '', kind: 'weights', name: 'a' })).toBeUndefined();
  });

  it('takes the parameters of the routes as the router matches them (the id with its slash)', () => {
    const matcher = compileRoutes({
      'training_runs/{run_id}/checkpoints/{kind}/{name}': 'delete',
      'training_runs/{run_id}/checkpoints/{kind}/{name}/archive': 'archive',
    });
    const matched = matcher.match('training_runs/model-9/checkpoints/sampler_weights/samp-x/archive');
    expect(matched?.route).toBe('archive');
    expect(checkpointKeyFromRoute(matched?.params ?? {})).toEqual({
      modelId: 'model-9',
      kind: 'sampler',
      name: 'samp-x',
    });
    expect(matcher.match('training_runs/model-9/checkpoints/weights/a%2Fb')).toBeUndefined();
  });
});

describe('the gc partition order', () => {
  it('sorts entries by due time as strings, and the bound takes exactly those due', () => {
    const now = 1_700_000_000_000;
    const keys = [now - 5_000, now, now + 1, 9_000, now + 10_000_000].map((due) => ({
      due,
      key: gcSortKey(due, `c-${due}`),
    }));
    const bySort = [...keys].sort((a, b) => (a.key < b.key ? -1 : 1)).map((k) => k.due);
    expect(bySort).toEqual([...keys].map((k) => k.due).sort((a, b) => a - b));
    const due = keys.filter((k) => k.key < gcDueBound(now)).map((k) => k.due);
    expect(due.sort((a, b) => a - b)).toEqual([9_000, now - 5_000, now]);
  });

  it('pads creation times to 13 digits in listing keys', () => {
    expect(listSortKey(42, 'model-1', 'weights', 'a')).toBe('0000000000042#model-1#weights#a');
    expect(listSortKey(1_700_000_000_000)).toBe('1700000000000');
  });
});

describe('gcDecision', () => {
  const now = 5_000_000;
  const entry = { content_id: 'c-1' };
  it('collects content nothing live holds', () => {
    expect(gcDecision(entry, undefined, now)).toEqual({ action: 'collect' });
    expect(gcDecision(entry, { content_id: 'c-2', status: 'committed' }, now)).toEqual({ action: 'collect' });
    expect(gcDecision(entry, { content_id: 'c-1', status: 'committed', expires_at: now }, now)).toEqual({
      action: 'collect',
    });
  });

  it('moves an entry whose save is pending, or whose expiry the commit set later; drops one with no TTL', () => {
    expect(gcDecision(entry, { content_id: 'c-1', status: 'pending' }, now)).toEqual({
      action: 'move',
      due: now + GC_PENDING_RECHECK_MS,
    });
    expect(gcDecision(entry, { content_id: 'c-1', status: 'committed', expires_at: now + 7 }, now)).toEqual({
      action: 'move',
      due: now + 7,
    });
    expect(gcDecision(entry, { content_id: 'c-1', status: 'committed' }, now)).toEqual({ action: 'drop' });
  });
});

describe('mayAccess (C4, C6)', () => {
  it('lets the owner do anything, others only read a published checkpoint', () => {
    expect(mayAccess({ tenant: 'a' }, 'a', 'owner')).toBe(true);
    expect(mayAccess({ tenant: 'a', public: true }, 'b', 'read')).toBe(true);
    expect(mayAccess({ tenant: 'a', public: true }, 'b', 'owner')).toBe(false);
    expect(mayAccess({ tenant: 'a' }, 'b', 'read')).toBe(false);
  });
});
