import { TinkerHttpError } from '../../shared/client/tinker-client.js';
import { type LatencySummary, summarizeLatencies } from './stats.js';

/**
 * What the load clients saw, tallied: submits and their HTTP round trips, futures and their
 * submit-to-terminal times, retrieve_future long polls, throttles (retried) and errors (not retried),
 * each keyed `<endpoint>:<HTTP status or error name>`.
 */

export type Endpoint =
  | 'create_session'
  | 'create_model'
  | 'forward_backward'
  | 'optim_step'
  | 'save_weights_for_sampler'
  | 'create_sampling_session'
  | 'asample'
  | 'retrieve_future';

/** Answers that ask the client to come back later: 408 (retry later), 429 and 503 (busy). */
export const THROTTLE_STATUSES: ReadonlySet<number> = new Set([408, 429, 503]);

export type CallFailure = { readonly kind: 'throttle' | 'error'; readonly key: string };

/** A failed call, classified: a throttle (retried by the caller) or an error (counted, not retried). */
export function classifyFailure(endpoint: Endpoint, error: unknown): CallFailure {
  if (error instanceof TinkerHttpError) {
    return {
      kind: THROTTLE_STATUSES.has(error.status) ? 'throttle' : 'error',
      key: `${endpoint}:${error.status}`,
    };
  }
  // fetch rejects with a TypeError whose cause names the socket error (ECONNRESET, UND_ERR_SOCKET, ...).
  const cause = error instanceof Error ? (error.cause as { code?: unknown } | undefined) : undefined;
  const name =
    typeof cause?.code === 'string' ? cause.code : error instanceof Error ? error.name : typeof error;
  return { kind: 'error', key: `${endpoint}:${name}` };
}

export interface LoadTally {
  /** Submit calls answered 2xx (create_session and create_sampling_session included), by endpoint. */
  readonly submitted: Record<string, number>;
  readonly requests: number;
  /** Futures among them (requests answered with a request_id). */
  readonly futures: number;
  readonly futures_completed: number;
  /** Futures retrieve_future reported failed, by category: errors too. */
  readonly futures_failed: number;
  /** Futures still pending when the run's hard deadline passed (a stuck future). */
  readonly futures_not_terminal: number;
  readonly retrieve_calls: number;
  readonly try_again: number;
  readonly throttles: Record<string, number>;
  readonly throttles_total: number;
  readonly errors: Record<string, number>;
  readonly errors_total: number;
  /** HTTP round trip of each successful submit. */
  readonly submit_latency: LatencySummary;
  /** First submit attempt to the retrieve_future answer that showed it terminal. */
  readonly e2e_latency: LatencySummary;
  readonly e2e_latency_by_type: Record<string, LatencySummary>;
}

function bump(counts: Map<string, number>, key: string, by = 1): void {
  counts.set(key, (counts.get(key) ?? 0) + by);
}

const total = (counts: Map<string, number>) => [...counts.values()].reduce((sum, value) => sum + value, 0);

export class LoadRecorder {
  readonly #submitted = new Map<string, number>();
  readonly #throttles = new Map<string, number>();
  readonly #errors = new Map<string, number>();
  readonly #submitMs: number[] = [];
  readonly #e2eMs = new Map<string, number[]>();
  #futures = 0;
  #completed = 0;
  #failed = 0;
  #notTerminal = 0;
  #retrieveCalls = 0;
  #tryAgain = 0;

  submitted(endpoint: Endpoint, roundTripMs: number, isFuture: boolean): void {
    bump(this.#submitted, endpoint);
    this.#submitMs.push(roundTripMs);
    if (isFuture) this.#futures += 1;
  }

  retrieved(tryAgain: boolean): void {
    this.#retrieveCalls += 1;
    if (tryAgain) this.#tryAgain += 1;
  }

  terminal(endpoint: Endpoint, outcome: 'completed' | 'failed', e2eMs: number, category?: string): void {
    if (outcome === 'completed') this.#completed += 1;
    else {
      this.#failed += 1;
      bump(this.#errors, `${endpoint}:future_failed_${category ?? 'unknown'}`);
    }
    const samples = this.#e2eMs.get(endpoint) ?? [];
    samples.push(e2eMs);
    this.#e2eMs.set(endpoint, samples);
  }

  notTerminal(endpoint: Endpoint): void {
    this.#notTerminal += 1;
    bump(this.#errors, `${endpoint}:not_terminal`);
  }

  throttled(key: string): void {
    bump(this.#throttles, key);
  }

  error(key: string): void {
    bump(this.#errors, key);
  }

  get errorCount(): number {
    return total(this.#errors);
  }

  tally(): LoadTally {
    const byType = Object.fromEntries(
      [...this.#e2eMs]
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([type, ms]) => [type, summarizeLatencies(ms)]),
    );
    const sorted = (counts: Map<string, number>) =>
      Object.fromEntries([...counts].sort(([a], [b]) => a.localeCompare(b)));
    return {
      submitted: sorted(this.#submitted),
      requests: total(this.#submitted),
      futures: this.#futures,
      futures_completed: this.#completed,
      futures_failed: this.#failed,
      futures_not_terminal: this.#notTerminal,
      retrieve_calls: this.#retrieveCalls,
      try_again: this.#tryAgain,
      throttles: sorted(this.#throttles),
      throttles_total: total(this.#throttles),
      errors: sorted(this.#errors),
      errors_total: total(this.#errors),
      submit_latency: summarizeLatencies(this.#submitMs),
      e2e_latency: summarizeLatencies([...this.#e2eMs.values()].flat()),
      e2e_latency_by_type: byType,
    };
  }
}
