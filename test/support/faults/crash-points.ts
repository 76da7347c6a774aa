import { hashString, seedWords, uniformAt } from '../../../shared/backend/reference/prng.js';
import { faultHook } from '../../../shared/base/fault-hook.js';

/** Thrown at an armed crash point: the process "died" there, after everything before it happened. */
export class SimulatedCrash extends Error {
  constructor(readonly point: string) {
    super(`simulated crash at ${point}`);
    this.name = 'SimulatedCrash';
  }
}

// Production code skips its cleanup after a crash (a real one runs no code): it asks the hook. Set
// when this module loads, so every `SimulatedCrash` counts, however it is thrown (an armed point,
// the chaos run's own routing, an adapter a test wraps); no production code ever throws one.
faultHook.isCrash = (error) => error instanceof SimulatedCrash;

export interface CrashArming {
  /** Chance that a hit crashes (default 1), drawn from the registry's seed. */
  readonly probability?: number;
  /** Crash at most this many times, then disarm (default: no limit). */
  readonly times?: number;
  /** Let this many hits pass before any may crash (default 0). */
  readonly skip?: number;
}

interface Armed {
  readonly probability: number;
  readonly times: number;
  readonly skip: number;
  seen: number;
  crashed: number;
}

/**
 * Named crash points. Production code calls `faultHook.crash(point)` at step boundaries; `install()`
 * routes those calls here, where an armed point throws a `SimulatedCrash`. Unarmed points only count
 * their hits, so a test can check that a boundary was reached.
 */
export class CrashPoints {
  /** Hits per point while installed (armed or not). */
  readonly hits: Record<string, number> = {};
  /** Crashes per point. */
  readonly crashes: Record<string, number> = {};
  private readonly armed = new Map<string, Armed>();
  private readonly seed: [number, number];

  constructor(seed = 0) {
    this.seed = seedWords(seed);
  }

  arm(point: string, options: CrashArming = {}): this {
    const probability = options.probability ?? 1;
    if (!(probability >= 0 && probability <= 1)) throw new Error(`crash probability must be within [0, 1]`);
    this.armed.set(point, {
      probability,
      times: options.times ?? Number.POSITIVE_INFINITY,
      skip: options.skip ?? 0,
      seen: 0,
      crashed: 0,
    });
    return this;
  }

  disarm(point?: string): this {
    if (point === undefined) this.armed.clear();
    else this.armed.delete(point);
    return this;
  }

  /** Throws a `SimulatedCrash` when `point` is armed and its turn has come; counts the hit either way. */
  maybeCrash(point: string): void {
    const hit = this.hits[point] ?? 0;
    this.hits[point] = hit + 1;
    const armed = this.armed.get(point);
    if (armed === undefined) return;
    armed.seen++;
    if (armed.seen <= armed.skip || armed.crashed >= armed.times) return;
    if (
      armed.probability < 1 &&
      uniformAt(this.seed[0], this.seed[1], hashString(point), hit) >= armed.probability
    ) {
      return;
    }
    armed.crashed++;
    this.crashes[point] = (this.crashes[point] ?? 0) + 1;
    throw new SimulatedCrash(point);
  }

  /** Total crashes so far. */
  get total(): number {
    return Object.values(this.crashes).reduce((sum, count) => sum + count, 0);
  }

  /** Routes `faultHook.crash` here; the returned function restores the previous hook. */
  install(): () => void {
    const previous = faultHook.crash;
    faultHook.crash = (point) => this.maybeCrash(point);
    return () => {
      faultHook.crash = previous;
    };
  }
}

/** A shared registry for suites that need only one. */
export const crashPoints = new CrashPoints();
