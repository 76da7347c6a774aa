import { TinkerClient } from '../../shared/client/tinker-client.js';

/**
 * Tenants' HTTP clients that behave like the Tinker SDK under server trouble: a submit answered 408,
 * 429 or 5xx (or a connection error) is sent again, unchanged, with backoff, so the API's
 * idempotency decides what the retry means (R7). 4xx answers are returned as they are.
 */

export interface RetryStats {
  /** Answers retried, by HTTP status (`network` for connection errors). */
  readonly retried: Record<string, number>;
}

const MAX_ATTEMPTS = 30;
const BASE_PAUSE_MS = 25;
const MAX_PAUSE_MS = 1_000;

const pause = (attempt: number) =>
  new Promise((resolve) => setTimeout(resolve, Math.min(MAX_PAUSE_MS, BASE_PAUSE_MS * 2 ** attempt)));

function retryable(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

/** Resolves when the client may submit (see Backpressure); absent: always. */
export type SubmitGate = () => Promise<void>;

export function retryingFetch(stats: RetryStats, gate?: SubmitGate): typeof fetch {
  return async (input, init) => {
    if (gate !== undefined && !String(input).endsWith('/retrieve_future')) await gate();
    for (let attempt = 1; ; attempt++) {
      let response: Response;
      try {
        response = await fetch(input, init);
      } catch (error) {
        if (attempt >= MAX_ATTEMPTS) throw error;
        stats.retried.network = (stats.retried.network ?? 0) + 1;
        await pause(attempt);
        continue;
      }
      if (!retryable(response.status) || attempt >= MAX_ATTEMPTS) return response;
      await response.arrayBuffer();
      stats.retried[response.status] = (stats.retried[response.status] ?? 0) + 1;
      await pause(attempt);
    }
  };
}

export function chaosClient(
  apiUrl: string,
  apiKey: string,
  stats: RetryStats,
  gate?: SubmitGate,
): TinkerClient {
  return new TinkerClient({ baseUrl: apiUrl, apiKey, fetch: retryingFetch(stats, gate) });
}

/**
 * Clients that stop submitting while the system holds `limit` pending requests, as a training loop
 * does that waits for results before it runs too far ahead. Without it the tenants submit everything
 * at once and a sample waiting for its checkpoint's save can wait longer than its client's patience.
 */
export class Backpressure {
  #pending = 0;
  #timer: NodeJS.Timeout | undefined;
  readonly #waiters: (() => void)[] = [];
  /** Time submitters spent waiting, in ms (summed over submits). */
  waitedMs = 0;

  constructor(
    private readonly limit: number,
    private readonly count: () => Promise<number>,
    private readonly everyMs = 500,
  ) {}

  start(): void {
    const poll = async () => {
      this.#pending = await this.count().catch(() => this.#pending);
      if (this.#pending < this.limit) for (const wake of this.#waiters.splice(0)) wake();
      if (this.#timer !== undefined) this.#timer = setTimeout(() => void poll(), this.everyMs);
    };
    this.#timer = setTimeout(() => void poll(), 0);
  }

  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const wake of this.#waiters.splice(0)) wake();
  }

  readonly gate: SubmitGate = async () => {
    if (this.#timer === undefined || this.#pending < this.limit) return;
    const started = performance.now();
    await new Promise<void>((resolve) => this.#waiters.push(resolve));
    this.waitedMs += performance.now() - started;
  };
}
