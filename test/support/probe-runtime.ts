import { type MockInstance, vi } from 'vitest';
import type { LocalRuntime } from '../../local/runtime/lambda-runtime.js';
import { logger } from '../../shared/base/logger.js';
import {
  FUNCTION_IDS,
  type FunctionDecl,
  type FunctionId,
  type Topology,
  topology,
} from '../../shared/base/topology.js';
import type { TestCloud } from './cloud.js';
import { startCloudRuntime } from './runtime.js';

/** What a probe gave back: its value, or the error it threw. */
export type ProbeOutcome = { readonly value: unknown } | { readonly name: string; readonly message: string };

export interface ProbeRuntime {
  /** Runs `probe` as `functionId`'s handler, through the runtime's invoker, and returns its outcome. */
  runAs(functionId: FunctionId, probe: () => unknown): Promise<ProbeOutcome>;
  /** Runs `probe` outside any trigger under `functionId`'s scope (`LocalRuntime.runAs`, a process loop). */
  runAsProcess(functionId: FunctionId, probe: () => Promise<unknown>): Promise<ProbeOutcome>;
  /**
   * The logger's warnings while the runtime runs: it logs each denial and hidden read as well as
   * throwing it, and probes cause them on purpose, so they are captured here instead of printed.
   */
  readonly warnings: MockInstance<typeof logger.warn>;
  stop(): Promise<void>;
}

/**
 * The local runtime with the real topology's grants, every function's handler replaced by one probe
 * and its triggers by a schedule: a test fires a function and gets back what the probe did inside
 * that function's scope (its grants, its environment).
 */
export async function startProbeRuntime(cloud: TestCloud): Promise<ProbeRuntime> {
  let probe: () => unknown = () => undefined;
  const outcomeOf = async (call: () => unknown): Promise<ProbeOutcome> => {
    try {
      return { value: await call() };
    } catch (error) {
      if (!(error instanceof Error)) throw error;
      return { name: error.name, message: error.message };
    }
  };
  const probeHandler = () => outcomeOf(probe);
  const functions: Partial<Record<FunctionId, FunctionDecl>> = {};
  for (const id of FUNCTION_IDS) {
    functions[id] = { ...topology.functions[id], triggers: [{ kind: 'schedule', rateMinutes: 60 }] };
  }
  const probed: Topology = { ...topology, functions: functions as Topology['functions'] };
  const warnings = vi.spyOn(logger, 'warn').mockImplementation(() => undefined);
  const runtime: LocalRuntime = await startCloudRuntime(cloud, {
    topology: probed,
    handlers: Object.fromEntries(FUNCTION_IDS.map((id) => [id, probeHandler])),
  });
  return {
    runAs: async (functionId, call) => {
      probe = call;
      return (await runtime.runSchedule(functionId)) as ProbeOutcome;
    },
    runAsProcess: (functionId, call) => runtime.runAs(functionId, () => outcomeOf(call)),
    warnings,
    stop: async () => {
      warnings.mockRestore();
      await runtime.stop();
    },
  };
}
