import { describe, expect, it } from 'vitest';
import { StateCache } from '../../shared/services/worker/state-cache.js';

const bytes = (length: number, fill: number) => new Uint8Array(length).fill(fill);

describe('the worker process state cache', () => {
  it('hands out what was committed under a key, as a copy the caller may change', () => {
    const cache = new StateCache(100);
    const written = bytes(10, 7);
    cache.committed('state/m/1.bin', written);
    // The writer's buffer is not the cached one.
    written.fill(0);
    const first = cache.get('state/m/1.bin');
    expect(first).toEqual(bytes(10, 7));
    first?.fill(9);
    expect(cache.get('state/m/1.bin')).toEqual(bytes(10, 7));
    expect(cache.get('state/m/2.bin')).toBeUndefined();
  });

  it('drops the state a commit superseded, so it holds one state per model', () => {
    const cache = new StateCache(100);
    cache.committed('state/m/1.bin', bytes(10, 1));
    cache.committed('state/m/2.bin', bytes(10, 2), 'state/m/1.bin');
    expect(cache.get('state/m/1.bin')).toBeUndefined();
    expect(cache.get('state/m/2.bin')).toEqual(bytes(10, 2));
    expect({ size: cache.size, bytes: cache.bytes }).toEqual({ size: 1, bytes: 10 });
  });

  it('stays within its bytes, least recently used out first, and never keeps a state larger than it', () => {
    const cache = new StateCache(30);
    cache.committed('a', bytes(10, 1));
    cache.committed('b', bytes(10, 2));
    cache.committed('c', bytes(10, 3));
    // `a` was used last, so `b` is the oldest when `d` arrives.
    expect(cache.get('a')).toBeDefined();
    cache.committed('d', bytes(10, 4));
    expect(cache.get('b')).toBeUndefined();
    expect(['a', 'c', 'd'].map((key) => cache.get(key)?.[0])).toEqual([1, 3, 4]);
    expect(cache.bytes).toBe(30);
    cache.committed('huge', bytes(31, 5));
    expect(cache.get('huge')).toBeUndefined();
    expect(cache.bytes).toBe(30);
    // The same key committed again (a redelivery of the same epoch) is counted once.
    cache.committed('d', bytes(10, 6));
    expect({ size: cache.size, bytes: cache.bytes, d: cache.get('d')?.[0] }).toEqual({
      size: 3,
      bytes: 30,
      d: 6,
    });
  });

  it('a state committed without its bytes (written through a file, too large to keep) drops what it replaces', () => {
    const cache = new StateCache(30);
    cache.committed('old', bytes(10, 1));
    cache.committed('new', undefined, 'old');
    expect(cache.get('old')).toBeUndefined();
    expect(cache.get('new')).toBeUndefined();
    expect(cache.bytes).toBe(0);
  });
});
