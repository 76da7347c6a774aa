import { awsClients } from '../../aws/clients.js';
import { commitSignal } from '../../base/commit-signal.js';
import { config } from '../../base/config.js';
import { mintRunId } from '../../base/ids.js';
import { logger } from '../../base/logger.js';
import { partIdsOf, type WorkItem, type WorkItemPartIds } from '../../domain/planning/work-item.js';
import { INLINE_RESULT_MAX_BYTES } from '../../repositories/futures.js';
import { createPrefixStore } from '../../repositories/prefix/store.js';
import { resolveTables } from '../../repositories/tables.js';
import { CancelWatch } from './cancel-watch.js';
import type { CommitTables } from './commit-items.js';
import type { RunContext, SamplingContext } from './context.js';
import { DEFAULT_CUT_POLL_MS, WorkItemCut } from './cut.js';
import { LeaseKeeper } from './lease.js';
import { loadWorkItem, type WorkSource } from './load-work-item.js';
import { runModelPart } from './model-part.js';
import { covers, type OpeningReads, openingReads } from './opening-reads.js';
import { PassBatcher } from './pass-batcher.js';
import { SampleCommits } from './sample-commits.js';
import { runSamplePart } from './sample-part.js';
import { loadSampleStarts } from './sample-resume.js';
import { SamplerCache } from './sampler-cache.js';
import { processStateCache } from './state-cache.js';
import type { PartOutcome, WorkerClients, WorkerOptions, WorkItemOutcome } from './types.js';

/** New tokens per sequence per backend call: how far past a cut request a sample may run. */
export const DEFAULT_SLICE_TOKENS = 64;
/** Time a cut's prefix save gets when the driver names no deadline. */
export const DEFAULT_CUT_SAVE_MS = 10_000;

/**
 * The samples' shared context: their starts are read at once, the cut watches its triggers, and the
 * cancel watch their claims' cancel marks.
 */
function samplingContext(
  item: WorkItem,
  options: WorkerOptions,
  clients: WorkerClients,
  tables: CommitTables,
  now: () => number,
  opening: OpeningReads,
  run: string,
): SamplingContext | undefined {
  if (item.samples.length === 0) return undefined;
  const prefixes = options.prefixes ?? createPrefixStore({ client: clients.doc });
  // Unique per run: two deliveries of one work item never write each other's prefix rows (P2).
  const attempt = `${item.work_item_id}.${run}`;
  const cutDeadline = options.cutDeadline ?? (() => now() + DEFAULT_CUT_SAVE_MS);
  const pollMs = options.cutPollMs ?? DEFAULT_CUT_POLL_MS;
  const cut = new WorkItemCut(
    {
      ...(options.cut === undefined ? {} : { signal: options.cut }),
      ...(options.cutWhen === undefined ? {} : { when: options.cutWhen }),
      ...(pollMs > 0
        ? {
            poll: {
              pool: item.pool,
              everyMs: pollMs,
              startedAt: now(),
              doc: clients.doc,
              registryTable: tables.registry,
            },
          }
        : {}),
    },
    (rows) =>
      prefixes.saveCut(rows, {
        attempt,
        deadline: cutDeadline(),
        ...(options.signal === undefined ? {} : { signal: options.signal }),
      }),
  );
  const cancelMs = options.cancelPollMs ?? pollMs;
  return {
    starts: loadSampleStarts(item.samples, opening.prefixRefs, prefixes),
    cut,
    cancels: new CancelWatch(
      cancelMs > 0 ? { everyMs: cancelMs, doc: clients.doc, registryTable: tables.registry } : undefined,
    ),
    sliceTokens: Math.max(1, options.sampleSliceTokens ?? DEFAULT_SLICE_TOKENS),
    attempt,
  };
}

/**
 * Runs one work item: every model's part and every sample concurrently and independently, each
 * committing as soon as it is done. Never throws for a part's failure (see the outcomes); throws
 * only when the work item itself cannot be read.
 */
export async function runWorkItem(source: WorkSource, options: WorkerOptions): Promise<WorkItemOutcome> {
  const started = performance.now();
  const { tunables, bucket } = config();
  const clients = options.clients ?? awsClients();
  // The edge of the worker: its tables and bucket are resolved here, once per work item, and passed down.
  const tables = resolveTables(['futures', 'models', 'registry']);
  const now = options.now ?? Date.now;
  const leaseMs = options.leaseMs ?? tunables.leaseSeconds * 1000;
  // The parts' rows and claims are read while the work item is fetched when the manifest names them.
  const named = namedParts(source);
  const early = named === undefined ? undefined : openingReads(named, clients.doc, tables);
  const item = await loadWorkItem(source, clients.s3, bucket);
  const opening =
    early !== undefined && named !== undefined && covers(named, item)
      ? early
      : openingReads(partIdsOf(item), clients.doc, tables);
  const leases = new LeaseKeeper(
    clients.doc,
    tables,
    leaseMs,
    options.renewEveryMs ?? Math.max(1, leaseMs / 3),
    now,
  );
  const onEvent = options.onEvent;
  const run = options.runId ?? mintRunId();
  const sampling = samplingContext(item, options, clients, tables, now, opening, run);
  const ctx: RunContext = {
    backend: options.backend,
    clients,
    tables,
    bucket,
    run,
    maxAttempts: options.maxAttempts ?? tunables.maxAttempts,
    inlineResultMaxBytes: options.inlineResultMaxBytes ?? INLINE_RESULT_MAX_BYTES,
    signal: options.signal,
    now,
    emit: async (event) => {
      if (onEvent !== undefined) await onEvent(event);
    },
    passes: new PassBatcher(options.backend, options.passWindowMs),
    sampleCommits: new SampleCommits({ doc: clients.doc, tables }, options.sampleCommitWindowMs),
    leases,
    samplers: new SamplerCache(options.backend, clients, bucket, tables.registry),
    opening,
    states: options.states ?? processStateCache(),
    ...(options.residency === undefined ? {} : { residency: options.residency }),
    ...(sampling === undefined ? {} : { sampling }),
  };

  try {
    // Each part's commit is announced as it lands, so a waiting retrieve_future answers at once
    // instead of at its next re-read (shared/base/commit-signal.ts); the other parts may still be running.
    const commits = options.commits ?? commitSignal();
    const announce = <T extends PartOutcome>(outcome: T, requestIds: () => string[]): T => {
      if (outcome.outcome === 'committed') commits.committed(requestIds());
      return outcome;
    };
    const [models, samples] = await Promise.all([
      Promise.all(
        item.models.map(async (model) =>
          announce(await runModelPart(model, ctx), () => model.steps.map((step) => step.request_id)),
        ),
      ),
      Promise.all(
        item.samples.map(async (sample) => {
          const outcome = await runSamplePart(sample, ctx);
          // A session poll (W9) watches its log's key, not the request ids it has not seen yet.
          const log = outcome.outcome === 'committed' ? outcome.session_log : undefined;
          return announce(outcome, () =>
            log === undefined ? [sample.request_id] : [sample.request_id, log],
          );
        }),
      ),
    ]);
    // A cut sample is back to pending and is dispatched again: its message is done.
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
    ctx.sampling?.cut.dispose();
    ctx.sampling?.cancels.dispose();
  }
}

/** The part ids a manifest names (`manifestOf`); undefined for a work item by value or a bare manifest. */
function namedParts(source: WorkSource): WorkItemPartIds | undefined {
  if (!('key' in source) || source.model_ids === undefined || source.sample_ids === undefined)
    return undefined;
  return { model_ids: source.model_ids, sample_ids: source.sample_ids };
}
