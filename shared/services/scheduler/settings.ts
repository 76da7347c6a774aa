import { type Config, config } from '../../base/config.js';
import { laneQueueId } from '../../base/topology.js';
import { type PlanLimits, planLimitsFrom } from '../../domain/planning/limits.js';

/** What a tick needs from the configuration, resolved once per invocation. */
export interface SchedulerSettings {
  readonly pool: string;
  readonly liveShards: number;
  readonly tables: { readonly futures: string; readonly models: string; readonly registry: string };
  readonly bucket: string;
  readonly workQueueUrl: string;
  /** A work lane's queue (S2), read when a work item goes there. */
  readonly laneQueueUrl: (lane: number) => string;
  readonly limits: PlanLimits;
  /** Lease of a claim (model or sample) until a worker renews it (E7). */
  readonly leaseMs: number;
  /** S5's coalescing window (COALESCE_WINDOW_MS; 0: off): see `HeldModels` and `runTick`. */
  readonly coalesceMs: number;
}

export function schedulerSettings(source: Config = config()): SchedulerSettings {
  return {
    pool: source.pool,
    liveShards: source.liveShards,
    tables: {
      futures: source.table('futures'),
      models: source.table('models'),
      registry: source.table('registry'),
    },
    bucket: source.bucket,
    workQueueUrl: source.workQueueUrl,
    laneQueueUrl: (lane) => source.queueUrl(laneQueueId(lane)),
    limits: planLimitsFrom(source.tunables),
    leaseMs: source.tunables.leaseSeconds * 1000,
    coalesceMs: source.tunables.coalesceWindowMs,
  };
}
