import type { AdamParams, Backend, BackendState } from '../../shared/backend/backend.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';

/**
 * A backend module for `npm run worker -- --backend <this file>` in the worker-process tests: the
 * reference backend whose optimizer step takes SLOW_OPTIM_MS (default 3 s) and says so on stderr,
 * standing in for a long GPU step.
 */
export function createBackend(): Backend {
  const inner = new ReferenceBackend();
  const slow = Object.create(inner) as Backend;
  const delay = Number(process.env.SLOW_OPTIM_MS ?? 3_000);
  slow.optimStep = async (state: BackendState, params: AdamParams) => {
    process.stderr.write('slow optim_step started\n');
    await new Promise((resolve) => setTimeout(resolve, delay));
    return inner.optimStep(state, params);
  };
  return slow;
}
