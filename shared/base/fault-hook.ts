/**
 * The only trace of fault injection in production code: named points where tests may simulate a
 * crash (`faultHook.crash('scheduler:after-claim')`), and `isCrash`, which tells such a simulated
 * crash from a real error. In production the hook does nothing and `isCrash` is always false; the
 * test fault library (`test/support/faults.ts`) replaces `crash` with one that throws when the point is
 * armed (restoring the no-op afterwards) and makes `isCrash` recognize the error it throws.
 */
export interface FaultHook {
  crash(point: string): void;
  /**
   * Whether `error` is a simulated crash. A real crash runs no code after it, so code that cleans up
   * after an error (the scheduler giving back its claims) must skip that for a simulated one, or the
   * tests of crash recovery would test the cleanup instead.
   */
  isCrash(error: unknown): boolean;
}

export const faultHook: FaultHook = {
  crash: (_point: string) => {},
  isCrash: (_error: unknown) => false,
};
