import type { WorkerOptions } from './types.js';

/**
 * When a worker driver cuts running samples and abandons what still runs. Both drivers hand the
 * runtime the same three things: an abandon signal (stop at the next boundary, commit nothing more), a
 * cut signal (running samples save their prefixes and go back to pending, P1-P6) and the epoch ms a
 * cut's prefix save must be durable by. They differ in what starts the stop:
 * - the Lambda (`DeadlineStop`): the invocation's remaining time, checked on a timer and at every slice
 *   boundary, against three margins before the timeout;
 * - the long-running process (`GraceStop`): SIGTERM / SIGINT, with a grace period after the first
 *   signal and an immediate abandon on the second.
 * The decisions are pure functions; the timers are injected so tests can drive them by hand.
 */

/** What the runtime gets from a driver's stop policy (`processWorkMessage` options). */
export type StopOptions = Pick<WorkerOptions, 'signal' | 'cut' | 'cutWhen' | 'cutDeadline'>;

/** The clock and timers a policy runs on; `realStopTimers` in production. */
export interface StopTimers {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Runs `run` every `ms` until the returned function is called. */
  every(ms: number, run: () => void): () => void;
  /** Runs `run` once after `ms`, unless the returned function is called first. */
  after(ms: number, run: () => void): () => void;
}

/** Node timers, unref'd: a pending stop timer never keeps the process alive. */
export const realStopTimers: StopTimers = {
  now: () => Date.now(),
  every(ms, run) {
    const timer = setInterval(run, ms);
    timer.unref();
    return () => clearInterval(timer);
  },
  after(ms, run) {
    const timer = setTimeout(run, ms);
    timer.unref();
    return () => clearTimeout(timer);
  },
};

export interface DeadlineMargins {
  /** Cut running samples below this remaining time. */
  readonly cutMarginMs: number;
  /** A cut's prefix save must be durable this long before the timeout. */
  readonly saveMarginMs: number;
  /** Stop starting new boundaries this long before the timeout. */
  readonly abandonMarginMs: number;
  /** How often the remaining time is checked between slice boundaries. */
  readonly checkEveryMs: number;
}

/** Of the worker Lambda's 300 s timeout (`shared/base/topology.ts`). */
export const DEFAULT_DEADLINE_MARGINS: DeadlineMargins = {
  cutMarginMs: 30_000,
  saveMarginMs: 15_000,
  abandonMarginMs: 10_000,
  checkEveryMs: 250,
};

/** What `remainingMs` left before the timeout calls for. */
export function decideAtDeadline(
  remainingMs: number,
  margins: Pick<DeadlineMargins, 'cutMarginMs' | 'abandonMarginMs'>,
): { readonly cut: boolean; readonly abandon: boolean } {
  return { cut: remainingMs < margins.cutMarginMs, abandon: remainingMs < margins.abandonMarginMs };
}

/** Epoch ms a cut's prefix save must end by, `saveMarginMs` before the timeout. */
export function deadlineSaveBy(
  nowMs: number,
  remainingMs: number,
  margins: Pick<DeadlineMargins, 'saveMarginMs'>,
): number {
  return nowMs + remainingMs - margins.saveMarginMs;
}

/**
 * The Lambda's policy for one invocation. Without a remaining-time source (a direct call, as tests
 * make) nothing ever stops: no timer runs and no save deadline is set, so the runtime's default holds.
 */
export class DeadlineStop {
  readonly #abandon = new AbortController();
  readonly #cut = new AbortController();
  readonly #remaining: (() => number) | undefined;
  readonly #margins: DeadlineMargins;
  readonly #timers: StopTimers;
  readonly #cancel: (() => void) | undefined;

  constructor(
    remaining: (() => number) | undefined,
    margins: DeadlineMargins = DEFAULT_DEADLINE_MARGINS,
    timers: StopTimers = realStopTimers,
  ) {
    this.#remaining = remaining;
    this.#margins = margins;
    this.#timers = timers;
    this.#cancel = remaining === undefined ? undefined : timers.every(margins.checkEveryMs, this.check);
  }

  /** Latches the signals the remaining time calls for; true once samples are to be cut. */
  readonly check = (): boolean => {
    if (this.#remaining === undefined) return false;
    const decision = decideAtDeadline(this.#remaining(), this.#margins);
    if (decision.abandon) this.#abandon.abort();
    if (decision.cut) this.#cut.abort();
    return this.#cut.signal.aborted;
  };

  get options(): StopOptions {
    const remaining = this.#remaining;
    return {
      signal: this.#abandon.signal,
      cut: this.#cut.signal,
      // Also checked at every slice boundary, so a cut never waits for the timer.
      cutWhen: this.check,
      ...(remaining === undefined
        ? {}
        : { cutDeadline: () => deadlineSaveBy(this.#timers.now(), remaining(), this.#margins) }),
    };
  }

  /** Stops the timer (the invocation answered). */
  dispose(): void {
    this.#cancel?.();
  }
}

/** What a cut leaves of the grace period after its prefix save, for putting samples back to pending. */
export const CUT_SAVE_MARGIN_MS = 5_000;

/** Epoch ms a cut made at `cutAtMs` must have saved its prefixes by, within a grace of `graceMs`. */
export function graceSaveBy(cutAtMs: number, graceMs: number): number {
  return cutAtMs + Math.max(graceMs - CUT_SAVE_MARGIN_MS, graceMs / 2);
}

/**
 * The long-running process's policy. The first termination signal stops polling, cuts the running
 * samples at once and abandons whatever still runs `graceMs` later; a second abandons at once.
 */
export class GraceStop {
  readonly #stop = new AbortController();
  readonly #abandon = new AbortController();
  readonly #cut = new AbortController();
  readonly #graceMs: number;
  readonly #timers: StopTimers;
  #cutAt: number | undefined;
  #cancel: (() => void) | undefined;

  constructor(graceMs: number, timers: StopTimers = realStopTimers) {
    this.#graceMs = graceMs;
    this.#timers = timers;
  }

  /** Stop polling; the current work item still finishes. */
  get stop(): AbortSignal {
    return this.#stop.signal;
  }

  /** Abandon the current work item without committing. */
  get abandon(): AbortSignal {
    return this.#abandon.signal;
  }

  /** Cut the running samples. */
  get cut(): AbortSignal {
    return this.#cut.signal;
  }

  /**
   * The prefix save ends before the grace does, leaving time to put the samples back to pending. A cut
   * asked by the operator (`cut#<pool>`), with no signal yet, gets the same time from when it is saved.
   */
  readonly cutDeadline = (): number => graceSaveBy(this.#cutAt ?? this.#timers.now(), this.#graceMs);

  /** A termination signal arrived: `stopping` for the first, `abandoned` for any later one. */
  terminate(): 'stopping' | 'abandoned' {
    if (this.#stop.signal.aborted) {
      this.#abandon.abort();
      return 'abandoned';
    }
    this.#stop.abort();
    this.#cutAt = this.#timers.now();
    this.#cut.abort();
    this.#cancel = this.#timers.after(this.#graceMs, () => this.#abandon.abort());
    return 'stopping';
  }

  /** Cancels the pending abandon (the process is exiting). */
  dispose(): void {
    this.#cancel?.();
  }
}
