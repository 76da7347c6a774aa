/**
 * Model states this process wrote and committed, by state key, so the next work item of the same
 * model that names that key (`base_state_ref`) needs no GET of it. Sound because a state key is unique
 * to the run that wrote it (E3: `state/<model>/<epoch>/<run>.bin`; one epoch per claim, never issued
 * again, and a run id per delivery, so two copies of one work item delivered at once never share a
 * key) and an entry is added only once this process knows its own run's commit landed (E4, E5): the
 * key then holds exactly the bytes this process wrote, whatever the backend. A miss (another process
 * committed it, the entry was evicted) reads S3 as before.
 *
 * Bounded by bytes, least recently used first out. A model's entry is replaced when its next state
 * commits, so the cache holds about one state per model this process runs. Each hit hands out a copy:
 * a backend may keep or change the bytes it deserializes.
 */
export class StateCache {
  readonly #entries = new Map<string, Uint8Array>();
  #bytes = 0;

  constructor(readonly maxBytes: number = DEFAULT_STATE_CACHE_BYTES) {}

  get(key: string): Uint8Array | undefined {
    const bytes = this.#entries.get(key);
    if (bytes === undefined) return undefined;
    // Most recently used last.
    this.#entries.delete(key);
    this.#entries.set(key, bytes);
    return bytes.slice();
  }

  /**
   * After the commit naming `key` landed; `replaces` is the state it superseded (no work item names it
   * again). `bytes` undefined: a state written without its bytes here (too large to keep).
   */
  committed(key: string, bytes: Uint8Array | undefined, replaces?: string): void {
    if (replaces !== undefined) this.#drop(replaces);
    this.#drop(key);
    if (bytes === undefined || bytes.length > this.maxBytes) return;
    this.#entries.set(key, bytes.slice());
    this.#bytes += bytes.length;
    for (const [oldest, entry] of this.#entries) {
      if (this.#bytes <= this.maxBytes) break;
      this.#entries.delete(oldest);
      this.#bytes -= entry.length;
    }
  }

  get size(): number {
    return this.#entries.size;
  }

  get bytes(): number {
    return this.#bytes;
  }

  #drop(key: string): void {
    const entry = this.#entries.get(key);
    if (entry === undefined) return;
    this.#entries.delete(key);
    this.#bytes -= entry.length;
  }
}

/** What one process keeps by default: a few reference-backend states per MiB; a large state is never kept. */
export const DEFAULT_STATE_CACHE_BYTES = 64 * 1024 * 1024;

let shared: StateCache | undefined;

/** The process's cache, shared by every work item it runs (a warm Lambda container, a GPU host). */
export function processStateCache(): StateCache {
  shared ??= new StateCache();
  return shared;
}
