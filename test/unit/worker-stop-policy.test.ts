import { describe, expect, it } from 'vitest';
import {
  CUT_SAVE_MARGIN_MS,
  DEFAULT_DEADLINE_MARGINS,
  DeadlineStop,
  deadlineSaveBy,
  decideAtDeadline,
  GraceStop,
  graceSaveBy,
  type StopTimers,
} from '../../shared/services/worker/stop-policy.js';

/** Timers driven by hand: `advance` moves the clock and fires what falls due, in order. */
class ManualTimers implements StopTimers {
  #now = 1_000_000;
  #next = 0;
  readonly #pending = new Map<number, { at: number; everyMs?: number; run: () => void }>();

  now(): number {
    return this.#now;
  }

  every(ms: number, run: () => void): () => void {
    return this.#add({ at: this.#now + ms, everyMs: ms, run });
  }

  after(ms: number, run: () => void): () => void {
    return this.#add({ at: this.#now + ms, run });
  }

  get pending(): number {
    return this.#pending.size;
  }

  advance(ms: number): void {
    const until = this.#now + ms;
    for (;;) {
      const due = [...this.#pending.entries()]
        .filter(([, timer]) => timer.at <= until)
        .sort((a, b) => a[1].at - b[1].at)[0];
      if (due === undefined) break;
      const [id, timer] = due;
      this.#now = timer.at;
      if (timer.everyMs === undefined) this.#pending.delete(id);
      else timer.at += timer.everyMs;
      timer.run();
    }
    this.#now = until;
  }

  #add(timer: { at: number; everyMs?: number; run: () => void }): () => void {
    const id = this.#next++;
    this.#pending.set(id, timer);
    return () => this.#pending.delete(id);
  }
}

const MARGINS = { cutMarginMs: 3_000, saveMarginMs: 1_500, abandonMarginMs: 1_000, checkEveryMs: 100 };

describe('decideAtDeadline', () => {
  it('cuts strictly below the cut margin and abandons strictly below the abandon margin', () => {
    expect(decideAtDeadline(3_000, MARGINS)).toEqual({ cut: false, abandon: false });
    expect(decideAtDeadline(2_999, MARGINS)).toEqual({ cut: true, abandon: false });
    expect(decideAtDeadline(1_000, MARGINS)).toEqual({ cut: true, abandon: false });
    expect(decideAtDeadline(999, MARGINS)).toEqual({ cut: true, abandon: true });
    expect(decideAtDeadline(0, MARGINS)).toEqual({ cut: true, abandon: true });
  });

  it('defaults to cutting 30 s and abandoning 10 s before the timeout, saving by 15 s before it', () => {
    expect(decideAtDeadline(30_001, DEFAULT_DEADLINE_MARGINS)).toEqual({ cut: false, abandon: false });
    expect(decideAtDeadline(29_999, DEFAULT_DEADLINE_MARGINS)).toEqual({ cut: true, abandon: false });
    expect(decideAtDeadline(9_999, DEFAULT_DEADLINE_MARGINS)).toEqual({ cut: true, abandon: true });
    expect(deadlineSaveBy(0, 300_000, DEFAULT_DEADLINE_MARGINS)).toBe(285_000);
  });
});

describe('DeadlineStop (the worker Lambda)', () => {
  it('latches the cut and then the abandon as the timer sees the remaining time fall', () => {
    const timers = new ManualTimers();
    const timeoutAt = timers.now() + 5_000;
    const stop = new DeadlineStop(() => timeoutAt - timers.now(), MARGINS, timers);
    const { signal, cut } = stop.options;
    timers.advance(1_900);
    expect(cut?.aborted).toBe(false);
    timers.advance(200); // 2,900 ms left: the check at 2,000 ms elapsed saw 3,000 (not below), 2,100 sees 2,900
    expect(cut?.aborted).toBe(true);
    expect(signal?.aborted).toBe(false);
    timers.advance(2_000); // 900 ms left
    expect(signal?.aborted).toBe(true);
    stop.dispose();
    expect(timers.pending).toBe(0);
  });

  it('cuts at a slice boundary before the timer runs, and the save deadline tracks the timeout', () => {
    const timers = new ManualTimers();
    let left = 10_000;
    const stop = new DeadlineStop(() => left, MARGINS, timers);
    const options = stop.options;
    expect(options.cutWhen?.()).toBe(false);
    expect(options.cutDeadline?.()).toBe(timers.now() + 10_000 - 1_500);
    left = 2_000;
    // No timer tick has happened: the boundary check alone trips the cut, and it stays tripped.
    expect(options.cutWhen?.()).toBe(true);
    expect(options.cut?.aborted).toBe(true);
    left = 60_000;
    expect(options.cutWhen?.()).toBe(true);
    stop.dispose();
  });

  it('never stops without a remaining-time source, runs no timer and leaves the save deadline unset', () => {
    const timers = new ManualTimers();
    const stop = new DeadlineStop(undefined, MARGINS, timers);
    expect(timers.pending).toBe(0);
    const options = stop.options;
    expect(options.cutWhen?.()).toBe(false);
    expect('cutDeadline' in options).toBe(false);
    timers.advance(1e9);
    expect(options.cut?.aborted).toBe(false);
    expect(options.signal?.aborted).toBe(false);
  });
});

describe('GraceStop (the long-running worker process)', () => {
  it('stops polling and cuts on the first signal, then abandons when the grace period ends', () => {
    const timers = new ManualTimers();
    const stop = new GraceStop(60_000, timers);
    expect([stop.stop.aborted, stop.cut.aborted, stop.abandon.aborted]).toEqual([false, false, false]);
    const signalledAt = timers.now();
    expect(stop.terminate()).toBe('stopping');
    expect([stop.stop.aborted, stop.cut.aborted, stop.abandon.aborted]).toEqual([true, true, false]);
    // The save deadline is fixed at the signal, leaving CUT_SAVE_MARGIN_MS of the grace.
    timers.advance(10_000);
    expect(stop.cutDeadline()).toBe(signalledAt + 60_000 - CUT_SAVE_MARGIN_MS);
    timers.advance(49_999);
    expect(stop.abandon.aborted).toBe(false);
    timers.advance(1);
    expect(stop.abandon.aborted).toBe(true);
  });

  it('abandons at once on a second signal', () => {
    const timers = new ManualTimers();
    const stop = new GraceStop(60_000, timers);
    stop.terminate();
    timers.advance(5);
    expect(stop.terminate()).toBe('abandoned');
    expect(stop.abandon.aborted).toBe(true);
  });

  it("gives an operator's cut, before any signal, the same time from when it is saved", () => {
    const timers = new ManualTimers();
    const stop = new GraceStop(20_000, timers);
    expect(stop.cutDeadline()).toBe(timers.now() + 15_000);
    timers.advance(7_000);
    expect(stop.cutDeadline()).toBe(timers.now() + 15_000);
    expect(stop.cut.aborted).toBe(false);
  });

  it('keeps at least half of a short grace period for the save', () => {
    expect(graceSaveBy(1_000, 60_000)).toBe(56_000);
    expect(graceSaveBy(1_000, 10_000)).toBe(6_000);
    expect(graceSaveBy(1_000, 8_000)).toBe(5_000);
    expect(graceSaveBy(1_000, 0)).toBe(1_000);
  });

  it('cancels the pending abandon on dispose', () => {
    const timers = new ManualTimers();
    const stop = new GraceStop(1_000, timers);
    stop.terminate();
    stop.dispose();
    timers.advance(2_000);
    expect(stop.abandon.aborted).toBe(false);
  });
});
