import { describe, expect, it } from 'vitest';
import {
  deriveId,
  deriveSeed,
  isRequestId,
  liveKey,
  liveShard,
  mintId,
  mintRequestId,
  requestIdTime,
} from '../../shared/base/ids.js';
import { canonicalJson, serializePayload } from '../../shared/repositories/payloads.js';

describe('request ids', () => {
  it('are 32 lowercase hex digits that carry their minting time', () => {
    const now = Date.UTC(2026, 0, 2, 3, 4, 5, 678);
    const id = mintRequestId(now);
    expect(id).toMatch(/^[0-9a-f]{32}$/);
    expect(isRequestId(id)).toBe(true);
    expect(requestIdTime(id)).toBe(now);
  });

  it('sort as strings in minting-time order, across any ms boundary', () => {
    const times = [0, 1, 15, 16, 255, 256, 1_700_000_000_000, 1_700_000_000_001, 2 ** 48 - 1];
    const ids = times.map((time) => mintRequestId(time));
    expect([...ids].sort()).toEqual(ids);
  });

  it('never collide within one millisecond', () => {
    const ids = new Set(Array.from({ length: 10_000 }, () => mintRequestId(1_700_000_000_000)));
    expect(ids.size).toBe(10_000);
  });

  it('refuse timestamps outside 48 bits', () => {
    expect(() => mintRequestId(-1)).toThrow(RangeError);
    expect(() => mintRequestId(2 ** 48)).toThrow(RangeError);
    expect(() => mintRequestId(1.5)).toThrow(RangeError);
  });

  it('other ids carry their kind and stay within the key alphabet', () => {
    expect(mintId('model')).toMatch(/^model-[0-9a-f]{32}$/);
    expect(mintId('session')).toMatch(/^sess-[0-9a-f]{32}$/);
    expect(mintId('sampling')).toMatch(/^samp-[0-9a-f]{32}$/);
  });

  it('derived ids and seeds are deterministic and distinct per input', () => {
    expect(deriveId('sampling', 'model-a', 3)).toBe(deriveId('sampling', 'model-a', 3));
    expect(deriveId('sampling', 'model-a', 3)).not.toBe(deriveId('sampling', 'model-a', 4));
    // Joined with a separator, so ('ab', 'c') and ('a', 'bc') differ.
    expect(deriveId('sampling', 'ab', 'c')).not.toBe(deriveId('sampling', 'a', 'bc'));
    const seeds = new Set(Array.from({ length: 1000 }, (_, seq) => deriveSeed('samp-x', seq)));
    expect(seeds.size).toBeGreaterThan(995);
    for (const seed of seeds) expect(seed >= 0 && seed < 2 ** 31 && Number.isInteger(seed)).toBe(true);
  });
});

describe('live shards', () => {
  it('are stable per model and within range', () => {
    for (const shards of [1, 4, 7]) {
      for (let i = 0; i < 200; i++) {
        const shard = liveShard(`model-${i}`, shards);
        expect(shard).toBe(liveShard(`model-${i}`, shards));
        expect(shard >= 0 && shard < shards).toBe(true);
      }
    }
  });

  it('spread many models evenly enough over the shards', () => {
    const counts = [0, 0, 0, 0];
    for (let i = 0; i < 4000; i++) counts[liveShard(mintId('model'), 4)]! += 1;
    for (const count of counts) expect(count).toBeGreaterThan(800);
  });

  it('rejects a non-positive shard count and formats the GSI key', () => {
    expect(() => liveShard('m', 0)).toThrow(RangeError);
    expect(liveKey('default', 3)).toBe('default#3');
  });
});

describe('canonical payloads', () => {
  it('serialize the same value to the same bytes whatever the key order', () => {
    const a = { b: 1, a: { y: [3, { q: 1, p: 2 }], x: null }, c: undefined };
    const b = { a: { x: null, y: [3, { p: 2, q: 1 }] }, b: 1 };
    expect(canonicalJson(a)).toBe('{"a":{"x":null,"y":[3,{"p":2,"q":1}]},"b":1}');
    expect(serializePayload(a).digest).toBe(serializePayload(b).digest);
    expect(serializePayload({ a: 1 }).digest).not.toBe(serializePayload({ a: 2 }).digest);
  });
});
