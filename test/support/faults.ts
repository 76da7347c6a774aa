/**
 * The fault library for tests (see `faults/injector.ts` for the SDK faults and `faults/crash-points.ts`
 * for crash points). Nothing here is imported by production code, which knows only the no-op
 * `shared/base/fault-hook.ts`.
 *
 *   const faults = createFaultInjector({ seed: 7, rates: { throttle: 0.05, timeoutAfterWrite: 0.02 } });
 *   const detach = faults.attach(clients);      // AwsClients, or single SDK clients
 *   ...; faults.off(); console.log(faults.counts);
 *
 * Handlers run in-process by the local runtime use the shared `awsClients()`: attach to those after the
 * runtime started (starting it resets them). Crash points:
 *
 *   const points = new CrashPoints(seed); const uninstall = points.install();
 *   points.arm('scheduler:after-claim', { probability: 0.1 });   // production calls faultHook.crash(...)
 */
export { type CrashArming, CrashPoints, crashPoints, SimulatedCrash } from './faults/crash-points.js';
export { INJECTED_ERROR_NAMES } from './faults/errors.js';
export {
  createFaultInjector,
  FAULT_KINDS,
  type FaultInjector,
  type FaultKind,
  type FaultPlan,
  type FaultRates,
  type FaultTarget,
  WRITE_OPERATIONS,
} from './faults/injector.js';
export { DEFAULT_STALE_INDEX, type StaleIndexOptions } from './faults/stale-index.js';
