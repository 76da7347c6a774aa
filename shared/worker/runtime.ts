import { awsClients } from '../aws/clients.js';
import { config } from '../config.js';
import { logger } from '../logger.js';
import { INLINE_RESULT_MAX_BYTES } from '../repositories/futures.js';
import type { RunContext } from './context.js';
import { LeaseKeeper } from './lease.js';
import { loadWorkItem, type WorkSource } from './load-work-item.js';
import { runModelPart } from './model-part.js';
import { PassBatcher } from './pass-batcher.js';
import { runSamplePart } from './sample-part.js';
import { SamplerCache } from './sampler-cache.js';
import type { WorkerOptions, WorkItemOutcome } from './types.js';

/**
 * Runs one work item: every model's part and every sample concurrently and independently, each
 * committing as soon as it is done. Never throws for a part's failure (see the outcomes); throws
 * only when the work item itself cannot be read.
 */
export async function runWorkItem(source: WorkSource, options: WorkerOptions): Promise<WorkItemOutcome> {
  const started = performance.now();
  const { tunables } = config();
  const clients = options.clients ?? awsClients();
  const now = options.now ?? Date.now;
  const leaseMs = options.leaseMs ?? tunables.leaseSeconds * 1000;
  const item = await loadWorkItem(source, clients.s3);
  const leases = new LeaseKeeper(clients.doc, leaseMs, options.renewEveryMs ?? Math.max(1, leaseMs / 3), now);
  const onEvent = options.onEvent;
  const ctx: RunContext = {
    backend: options.backend,
    clients,
    maxAttempts: options.maxAttempts ?? tunables.maxAttempts,
    inlineResultMaxBytes: options.inlineResultMaxBytes ?? INLINE_RESULT_MAX_BYTES,
    signal: options.signal,
    now,
    emit: async (event) => {
      if (onEvent !== undefined) await onEvent(event);
    },
    passes: new PassBatcher(options.backend, options.passWindowMs),
    leases,
    samplers: new SamplerCache(options.backend, clients),
  };
  try {
    const [models, samples] = await Promise.all([
      Promise.all(item.models.map((model) => runModelPart(model, ctx))),
      Promise.all(item.samples.map((sample) => runSamplePart(sample, ctx))),
    ]);
    const retry = [...models, ...samples].some(
      (part) => part.outcome === 'failed' || part.outcome === 'abandoned',
    );
    const outcome: WorkItemOutcome = {
      work_item_id: item.work_item_id,
      models,
      samples,
      retry,
      elapsed_ms: Math.round(performance.now() - started),
    };
    logger.info('work item finished', {
      work_item_id: item.work_item_id,
      retry,
      models: models.length,
      samples: samples.length,
      pass_batches: ctx.passes.batches,
    });
    return outcome;
  } finally {
    leases.stop();
  }
}
