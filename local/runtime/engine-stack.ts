import { createWorkerHandler } from '../../functions/worker/handler.js';
import type { EngineBackend } from '../../shared/backend/engine/engine-backend.js';
import {
  type EngineName,
  engineBaseModels,
  resolveBaseModel,
  startEngineBackend,
} from '../../shared/backend/engine/installed-engines.js';
import { BASE_MODELS_VAR, COALESCE_WINDOW_VAR, engineCoalesceWindowMs } from '../../shared/base/config.js';
import { Residency } from '../../shared/services/worker/residency.js';
import type { LocalStackOptions } from './stack.js';

export interface EngineStack {
  /** The base model as every tool names it (a folder by its absolute path). */
  readonly baseModel: string;
  /** Started and greeted; the caller stops it after the stack. */
  readonly backend: EngineBackend;
  /**
   * The worker's resident model states (S1): the local worker keeps the engine between work items, as
   * a GPU host's worker does. The caller lets go of them (`letGoAll`) before the local cloud stops.
   */
  readonly residency: Residency;
  /** For `startLocalStack`: the pool serves `baseModel` alone, and the worker runs on the engine. */
  readonly options: Pick<LocalStackOptions, 'extraEnv' | 'runtime'>;
}

/**
 * The variables of a local stack whose workers run an engine on `baseModel`: the pool serves that
 * model alone (G6), and S5's coalescing window is on (`engineCoalesceWindowMs`: an engine's work item
 * costs more than waiting for a step's optim_step). `npm start -- --engine X --workers N` sets them
 * without an in-process engine (each worker process starts its own).
 */
export function engineStackEnv(baseModel: string): Record<string, string> {
  return {
    [BASE_MODELS_VAR]: JSON.stringify(engineBaseModels(baseModel)),
    [COALESCE_WINDOW_VAR]: String(engineCoalesceWindowMs()),
  };
}

/**
 * A local stack's worker on an engine, as `npm start -- --engine <name> [--base-model X]` runs it
 * (the SDK tier's engine scenario starts its stack the same way): the engine started on the base
 * model (by default the tiny local model), BASE_MODELS naming that model alone (G6), the worker
 * handler on the engine's backend, and S5's coalescing window on (`engineCoalesceWindowMs`: an
 * engine's work item costs more than waiting for a step's optim_step).
 */
export async function engineStack(
  name: EngineName,
  rawBaseModel: string | undefined,
  worker: string,
): Promise<EngineStack> {
  const baseModel = resolveBaseModel(rawBaseModel);
  const backend = await startEngineBackend(name, { baseModel, worker });
  // Its store is resolved at the first let-go or renewal, once the stack has set the environment.
  const residency = new Residency(backend);
  return {
    baseModel,
    backend,
    residency,
    options: {
      extraEnv: engineStackEnv(baseModel),
      runtime: { handlers: { worker: createWorkerHandler({ backend, worker: { residency } }) } },
    },
  };
}
