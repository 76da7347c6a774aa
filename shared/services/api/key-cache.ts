/**
 * A container's memory of the keys it has authenticated (docs/configuration.md#key-lookups): the key lookup
 * is one strongly consistent registry read, and without this every request paid it, polls included.
 * Pure: the lookup itself is passed in (`shared/repositories/api-keys.ts` owns the records), and the
 * clock is injectable so the expiry is tested without waiting.
 *
 * What it keeps and what it never does:
 * - only a lookup that found a live key (a miss, a malformed or a revoked key is looked up afresh
 *   every time, so a key created a moment ago works at once and nobody can fill the cache with junk);
 * - an entry lives `ttlMs` from the moment its lookup *started*, and a hit never extends it, so a key
 *   revoked at time t is refused by every container from t + ttl on, however busy it kept the key;
 * - at most `maxEntries` entries (expired ones go first, then the oldest).
 */

export interface KeyCacheOptions {
  readonly maxEntries?: number;
  readonly now?: () => number;
}

interface Entry {
  readonly principal: string;
  readonly expiresAt: number;
}

/** Enough for every key one container meets between two expiries; each entry is ~200 bytes. */
export const KEY_CACHE_MAX_ENTRIES = 1_000;

export class KeyCache {
  private readonly entries = new Map<string, Entry>();
  private readonly maxEntries: number;
  private readonly now: () => number;

  constructor(options: KeyCacheOptions = {}) {
    this.maxEntries = Math.max(1, options.maxEntries ?? KEY_CACHE_MAX_ENTRIES);
    this.now = options.now ?? Date.now;
  }

  get size(): number {
    return this.entries.size;
  }

  /**
   * `id`'s principal (a tenant or an operator): from the cache while its entry lives, else from
   * `read`, whose answer is kept only when it found one. `ttlMs <= 0` turns the cache off (nothing is
   * kept or served).
   */
  async lookup(
    id: string,
    ttlMs: number,
    read: () => Promise<string | undefined>,
  ): Promise<string | undefined> {
    if (ttlMs <= 0) return read();
    const hit = this.fresh(id);
    if (hit !== undefined) return hit;
    // Counted from before the read: the read may see the key just before a revocation lands.
    const started = this.now();
    const principal = await read();
    if (principal !== undefined) this.keep(id, principal, started + ttlMs);
    return principal;
  }

  private fresh(id: string): string | undefined {
    const entry = this.entries.get(id);
    if (entry === undefined) return undefined;
    if (this.now() < entry.expiresAt) return entry.principal;
    this.entries.delete(id);
    return undefined;
  }

  private keep(id: string, principal: string, expiresAt: number): void {
    this.entries.delete(id);
    if (this.entries.size >= this.maxEntries) {
      const now = this.now();
      for (const [other, entry] of this.entries) if (entry.expiresAt <= now) this.entries.delete(other);
      // Still full of live entries: forget the oldest (it only costs one more lookup).
      while (this.entries.size >= this.maxEntries) {
        const oldest = this.entries.keys().next();
        if (oldest.done === true) break;
        this.entries.delete(oldest.value);
      }
    }
    this.entries.set(id, { principal, expiresAt });
  }
}
