import { describe, expect, it } from 'vitest';
import { readConfig } from '../../shared/base/config.js';
import { KeyCache } from '../../shared/services/api/key-cache.js';

/**
 * The API's per-container key cache (shared/services/api/key-cache.ts), on an injected clock: what it keeps,
 * for how long, and that a revoked key is never served past the TTL, however often it is used.
 */

/** A registry stand-in: keys map to principals; revoking deletes one. Counts the reads it answers. */
class FakeRegistry {
  readonly live = new Map<string, string>();
  reads = 0;
  /** Runs while a read is "in flight": lets a test revoke between the read and its answer. */
  during?: () => void;

  read(id: string): () => Promise<string | undefined> {
    return async () => {
      this.reads++;
      const found = this.live.get(id);
      this.during?.();
      return found;
    };
  }
}

function setup(maxEntries?: number) {
  let now = 1_000_000;
  const clock = {
    now: () => now,
    advance: (ms: number) => {
      now += ms;
    },
  };
  const cache = new KeyCache({ now: clock.now, ...(maxEntries === undefined ? {} : { maxEntries }) });
  return { cache, clock, registry: new FakeRegistry() };
}

const TTL = 10_000;

describe('the key cache', () => {
  it('serves a found key from memory until its TTL, then reads again', async () => {
    const { cache, clock, registry } = setup();
    registry.live.set('k1', 'acme');
    expect(await cache.lookup('k1', TTL, registry.read('k1'))).toBe('acme');
    clock.advance(TTL - 1);
    expect(await cache.lookup('k1', TTL, registry.read('k1'))).toBe('acme');
    expect(registry.reads).toBe(1);
    clock.advance(1);
    expect(await cache.lookup('k1', TTL, registry.read('k1'))).toBe('acme');
    expect(registry.reads).toBe(2);
  });

  it('never keeps a miss: a key created after a failed lookup works on the next request', async () => {
    const { cache, registry } = setup();
    expect(await cache.lookup('k1', TTL, registry.read('k1'))).toBeUndefined();
    expect(await cache.lookup('k1', TTL, registry.read('k1'))).toBeUndefined();
    expect(registry.reads).toBe(2);
    registry.live.set('k1', 'acme');
    expect(await cache.lookup('k1', TTL, registry.read('k1'))).toBe('acme');
    expect(cache.size).toBe(1);
  });

  it('a revoked key keeps working for at most the TTL, however busy, and is then refused every time', async () => {
    const { cache, clock, registry } = setup();
    registry.live.set('k1', 'acme');
    await cache.lookup('k1', TTL, registry.read('k1'));
    clock.advance(3_000);
    registry.live.delete('k1'); // revoked at t = 3 s after the lookup
    // Used every 100 ms after the revocation: hits never push the expiry back.
    const served: number[] = [];
    for (let t = 3_000; t < 15_000; t += 100) {
      if ((await cache.lookup('k1', TTL, registry.read('k1'))) !== undefined) served.push(t);
      clock.advance(100);
    }
    expect(Math.max(...served)).toBe(TTL - 100);
    expect(served).toHaveLength((TTL - 3_000) / 100);
    // Refused from the TTL on, and each refusal is a fresh read (a revoked key is never kept).
    expect(registry.reads).toBe(1 + (15_000 - TTL) / 100);
  });

  it('counts the TTL from before the read, so a revocation landing during the read is still bounded', async () => {
    const { cache, clock, registry } = setup();
    registry.live.set('k1', 'acme');
    // The read sees the key live, then 400 ms pass before its answer arrives; revoked meanwhile.
    registry.during = () => {
      clock.advance(400);
      registry.live.delete('k1');
    };
    expect(await cache.lookup('k1', TTL, registry.read('k1'))).toBe('acme');
    registry.during = undefined;
    clock.advance(TTL - 400 - 1);
    expect(await cache.lookup('k1', TTL, registry.read('k1'))).toBe('acme');
    clock.advance(1);
    // TTL after the read started: refused, although the answer arrived only TTL - 400 ms ago.
    expect(await cache.lookup('k1', TTL, registry.read('k1'))).toBeUndefined();
  });

  it('a TTL of 0 turns it off: every lookup reads, nothing is kept', async () => {
    const { cache, registry } = setup();
    registry.live.set('k1', 'acme');
    for (let i = 0; i < 3; i++) expect(await cache.lookup('k1', 0, registry.read('k1'))).toBe('acme');
    expect(registry.reads).toBe(3);
    expect(cache.size).toBe(0);
    registry.live.delete('k1');
    expect(await cache.lookup('k1', 0, registry.read('k1'))).toBeUndefined();
  });

  it('holds at most maxEntries: expired entries go first, then the oldest', async () => {
    const { cache, clock, registry } = setup(3);
    for (const id of ['a', 'b', 'c', 'd', 'e']) registry.live.set(id, `tenant-${id}`);
    await cache.lookup('a', 1_000, registry.read('a'));
    await cache.lookup('b', TTL, registry.read('b'));
    await cache.lookup('c', TTL, registry.read('c'));
    clock.advance(1_000); // a has expired
    await cache.lookup('d', TTL, registry.read('d'));
    expect(cache.size).toBe(3);
    registry.reads = 0;
    await cache.lookup('b', TTL, registry.read('b'));
    await cache.lookup('c', TTL, registry.read('c'));
    expect(registry.reads).toBe(0);
    // Full of live entries: the oldest (b) makes room for e.
    await cache.lookup('e', TTL, registry.read('e'));
    expect(cache.size).toBe(3);
    await cache.lookup('c', TTL, registry.read('c'));
    await cache.lookup('d', TTL, registry.read('d'));
    expect(registry.reads).toBe(1);
    await cache.lookup('b', TTL, registry.read('b'));
    expect(registry.reads).toBe(2);
    expect(cache.size).toBe(3);
  });

  it('keeps a key of one id apart from another (ids carry the table and the key kind)', async () => {
    const { cache, registry } = setup();
    registry.live.set('table-a\u0000tenant\u0000h', 'acme');
    expect(
      await cache.lookup('table-a\u0000tenant\u0000h', TTL, registry.read('table-a\u0000tenant\u0000h')),
    ).toBe('acme');
    expect(
      await cache.lookup('table-a\u0000operator\u0000h', TTL, registry.read('table-a\u0000operator\u0000h')),
    ).toBeUndefined();
  });
});

describe('its configuration', () => {
  it('API_KEY_CACHE_SECONDS defaults to 10 and takes 0 (off); POLL_SLOT_AFTER_MS defaults to 1000 and takes 0', () => {
    expect(readConfig({}).tunables).toMatchObject({ apiKeyCacheSeconds: 10, pollSlotAfterMs: 1_000 });
    expect(readConfig({ API_KEY_CACHE_SECONDS: '0', POLL_SLOT_AFTER_MS: '0' }).tunables).toMatchObject({
      apiKeyCacheSeconds: 0,
      pollSlotAfterMs: 0,
    });
    expect(() => readConfig({ API_KEY_CACHE_SECONDS: '-1' })).toThrow(/API_KEY_CACHE_SECONDS/);
    expect(() => readConfig({ POLL_SLOT_AFTER_MS: '0.5' })).toThrow(/POLL_SLOT_AFTER_MS/);
    // Other tunables stay positive.
    expect(() => readConfig({ LONG_POLL_SECONDS: '0' })).toThrow(/positive integer/);
  });
});
