import { type AwsClients, awsClients } from '../../aws/clients.js';
import { config } from '../../base/config.js';
import { logger } from '../../base/logger.js';
import { emitMetric, opsMetrics } from '../ops/metrics.js';
import { schedulerAdapters } from '../scheduler/adapters.js';
import type { TickCounters } from '../scheduler/counters.js';
import { type SchedulerSettings, schedulerSettings } from '../scheduler/settings.js';
import { runTick, type TickOptions, type TickOutcome } from '../scheduler/tick.js';
import { type BlobGcCounters, type BlobGcPolicy, collectGarbage, DEFAULT_BLOB_GC_POLICY } from './blob-gc.js';
import { type CheckpointGcCounters, collectCheckpoints, EMPTY_CHECKPOINT_GC } from './checkpoint-gc.js';
import { type ReplanCounters, replanExpiredLeases } from './replan.js';

export interface SweepOptions {
  readonly clients?: Pick<AwsClients, 'doc' | 's3' | 'sqs'>;
  readonly settings?: SchedulerSettings;
  readonly now?: () => number;
  readonly maxAttempts?: number;
  readonly gc?: BlobGcPolicy;
  /** Options of the safety tick (adapters, limits); its clock is the sweep's. */
  readonly tick?: TickOptions;
  readonly remainingMs?: () => number;
}

export interface SweepReport {
  readonly replan: ReplanCounters;
  readonly gc: BlobGcCounters;
  readonly checkpoints: CheckpointGcCounters;
  readonly tick: TickCounters & { readonly status: TickOutcome['status'] };
}

/**
 * The sweeper's round (every minute): re-plan models whose lease ended (E2), delete blobs no
 * committed row references (E5), collect deleted and expired checkpoints (C3, C5), then a safety tick, which also dispatches whatever a lost stream
 * record left waiting. Expired sample claims need no step here: the planner treats them as
 * unclaimed and the next claim replaces them; TTL removes claim items later. Requests that must end
 * without running (an unloaded model, a missing payload, K failed attempts) are ended by fail steps
 * that the tick dispatches, never by writing their rows here (R5).
 */
export async function sweep(options: SweepOptions = {}): Promise<SweepReport> {
  const clients = options.clients ?? awsClients();
  const settings = options.settings ?? schedulerSettings();
  const now = options.now ?? Date.now;
  const maxAttempts = options.maxAttempts ?? config().tunables.maxAttempts;

  const replan = await replanExpiredLeases(clients.doc, settings.tables.models, now(), maxAttempts);
  // The "leases expiring repeatedly" alarm watches this.
  emitMetric(opsMetrics.leasesExpired, replan.replanned, settings.pool);
  const gc = await collectGarbage(
    {
      s3: clients.s3,
      doc: clients.doc,
      bucket: settings.bucket,
      futuresTable: settings.tables.futures,
      modelsTable: settings.tables.models,
    },
    now(),
    options.gc ?? DEFAULT_BLOB_GC_POLICY,
  );
  // A failing collection (the by_owner index still backfilling after a deploy) must not stop the
  // safety tick: it is retried next round.
  const checkpoints = await collectCheckpoints(
    { s3: clients.s3, doc: clients.doc, bucket: settings.bucket, registryTable: settings.tables.registry },
    now(),
  ).catch((error: unknown): CheckpointGcCounters => {
    logger.warn('checkpoint collection failed; the next sweep tries again', {
      error: error instanceof Error ? error.name : String(error),
    });
    return { ...EMPTY_CHECKPOINT_GC, collect_errors: 1 };
  });
  const tick = await runTick({
    settings,
    adapters: schedulerAdapters(settings, clients),
    ...options.tick,
    now,
    ...(options.remainingMs === undefined ? {} : { remainingMs: options.remainingMs }),
  });
  const report: SweepReport = { replan, gc, checkpoints, tick: { status: tick.status, ...tick.counters } };
  logger.info('sweep', { replan, gc, checkpoints, tick: report.tick });
  return report;
}
