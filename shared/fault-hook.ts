/**
 * The only trace of fault injection in production code: named points where tests may simulate a
 * crash (`faultHook.crash('scheduler:after-claim')`). In production the hook does nothing; the test
 * fault library (`test/support/faults.ts`) replaces `crash` with one that throws when the point is
 * armed, and restores the no-op afterwards.
 */
export interface FaultHook {
  crash(point: string): void;
}

export const faultHook: FaultHook = { crash: (_point: string) => {} };
