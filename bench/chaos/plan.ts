import { BASE_MODELS_VAR, DEFAULT_BASE_MODEL } from '../../shared/base/config.js';
import type { ResidencyPolicy } from '../../shared/services/worker/residency.js';
import type { CrashArming, FaultRates } from '../../test/support/faults.js';
import { BAD_DATUM_VOCABULARY } from '../../test/support/tenant-driver.js';

/**
 * What the chaos run injects, and the local stack's settings that make recovery quick enough to
 * watch: short leases (a dead worker's model is re-planned seconds later), a short visibility timeout
 * on the work queue (an unacknowledged message comes back soon), a frequent sweeper.
 */

/** SDK faults, per call (per row for the index kinds). Every kind the fault library has. */
export const FAULT_RATES: FaultRates = {
  throttle: 0.005,
  serverError: 0.005,
  transactionConflict: 0.05,
  unprocessed: 0.1,
  timeoutAfterWrite: 0.005,
  latency: 0.03,
  lateRow: 0.05,
  lingeringRow: 0.2,
};

/**
 * Crash points (the production hook's names) and how often a hit crashes. A hit is per tick with
 * claims, per step, per model part, per sample slice or per message; the rates aim at a few percent of
 * work items each. A worker's death fails every model of its work item (up to all of them, when the
 * backlog is large) and charges each an attempt, so per-step rates near 1% would exhaust E2 on
 * their own.
 */
export const CRASH_ARMING: Readonly<Record<string, CrashArming>> = {
  'scheduler:after-claim': { probability: 0.02 },
  'scheduler:after-write-work-item': { probability: 0.02 },
  'worker:mid-item': { probability: 0.002 },
  'worker:after-state-write': { probability: 0.005 },
  'worker:after-commit': { probability: 0.02 },
  'worker:mid-sample': { probability: 0.003 },
  'worker:after-result-write': { probability: 0.01 },
  'worker:after-cut-save': { probability: 0.1 },
};

/** Harness-side crash: a worker Lambda invocation killed at its deadline. */
export const LAMBDA_TIMEOUT_POINT = 'worker:lambda-timeout';

export interface ChaosSettings {
  /** Share of worker Lambda invocations given a deadline of `timeoutAfterMs`. */
  readonly lambdaTimeout: number;
  readonly timeoutAfterMs: { readonly min: number; readonly max: number };
  /** SQS deliveries: an immediate duplicate, a late copy. */
  readonly duplicateDelivery: number;
  readonly lateDelivery: number;
  readonly lateDelayMs: { readonly min: number; readonly max: number };
  /** Zombie workers: invocations that stall after writing state until the model is re-planned. */
  readonly zombies: number;
  /** Chance per worker Lambda invocation of turning zombie, while zombies are wanted. */
  readonly zombieShare: number;
  /** Tenants pause their submits while this many requests are pending (see Backpressure). */
  readonly maxPending: number;
  /** `npm run worker` loops beside the worker Lambda's pollers. */
  readonly processWorkers: number;
  readonly leaseSeconds: number;
  /**
   * K of E2. Raised from the default 3: the injected rates are per call after the SDK's own retries,
   * far above AWS's, and one failure re-plans many models at once (a tick that fails after claiming,
   * a worker that dies with a work item of many models), so with K = 3 some models would end requests
   * with server errors and leave R1 less to compare. E2's give-up path has its own tests; a server
   * failure the run does see must still be E2's.
   */
  readonly maxAttempts: number;
  readonly visibilitySeconds: number;
  readonly sweepEveryMs: number;
  /** New tokens per sample slice: small, so Lambda deadlines cut samples mid-generation (P1-P6). */
  readonly sliceTokens: number;
  /** Sample requests to cut with the operator's `cut#<pool>` while they generate (see ChaosStack). */
  readonly operatorCuts: number;
  /** Period of the workers' `cut#<pool>` poll: short, so an operator cut lands mid-sample. */
  readonly cutPollMs: number;
  /**
   * The worker processes' resident state (S1-S4): few models held, short holds, frequent snapshots
   * and idle let-goes, so a short run kills holders, replays logs and lets go many times.
   */
  readonly residency: ResidencyPolicy;
}

export function chaosSettings(requests: number): ChaosSettings {
  return {
    lambdaTimeout: 0.05,
    timeoutAfterMs: { min: 500, max: 1_500 },
    duplicateDelivery: 0.05,
    lateDelivery: 0.05,
    lateDelayMs: { min: 1_000, max: 6_000 },
    zombies: Math.max(2, Math.round(requests / 200)),
    zombieShare: 0.1,
    maxPending: 300,
    processWorkers: 2,
    leaseSeconds: 3,
    maxAttempts: 8,
    visibilitySeconds: 10,
    sweepEveryMs: 1_500,
    sliceTokens: 2,
    operatorCuts: Math.max(3, Math.round(requests / 200)),
    cutPollMs: 100,
    residency: { maxModels: 4, snapshotEverySteps: 3, snapshotEveryMs: 5_000, idleMs: 2_000, holdMs: 3_000 },
  };
}

/** The functions' extra environment for the run. */
export function chaosEnv(settings: ChaosSettings, logLevel: string): Record<string, string> {
  return {
    LEASE_SECONDS: String(settings.leaseSeconds),
    MAX_ATTEMPTS: String(settings.maxAttempts),
    POWERTOOLS_LOG_LEVEL: logLevel,
    // The workload's `bad` datums must reach execution (E6): intake checks token ids against this (B2).
    [BASE_MODELS_VAR]: JSON.stringify([{ name: DEFAULT_BASE_MODEL, vocab_size: BAD_DATUM_VOCABULARY }]),
  };
}
