import type { Backend } from '../../shared/backend/backend.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';

/**
 * A backend module for `npm run worker -- --backend <this file>` in the resume suites: the reference
 * backend generating one token per sequence per call, each call taking SLOW_SAMPLE_MS (default 200 ms)
 * and saying so on stderr with the request's seed (`slow sample slice seed=<seed>`, which tells the
 * samples of a run apart), standing in for a long generation that a SIGTERM interrupts. In-process,
 * `busyMs` makes each call hold the CPU instead (it never yields, like a CPU backend mid-slice).
 */
export function createBackend(options: { readonly busyMs?: number } = {}): Backend {
  const inner = new ReferenceBackend();
  const slow = Object.create(inner) as Backend;
  const delay = Number(process.env.SLOW_SAMPLE_MS ?? 200);
  slow.sample = async (sampler, request, sampleOptions) => {
    if (options.busyMs === undefined) {
      process.stderr.write(`slow sample slice seed=${request.sampling_params.seed}\n`);
      await new Promise((resolve) => setTimeout(resolve, delay));
    } else {
      const until = performance.now() + options.busyMs;
      while (performance.now() < until) {
        // Holding the CPU: no timer or I/O callback runs meanwhile.
      }
    }
    const maxNewTokens = Math.min(sampleOptions?.maxNewTokens ?? 1, 1);
    return inner.sample(sampler, request, { ...sampleOptions, maxNewTokens });
  };
  return slow;
}
