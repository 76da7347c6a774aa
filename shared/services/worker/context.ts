import type { Backend } from '../../backend/backend.js';
import { InfrastructureError } from '../../base/errors.js';
import type { CancelWatch } from './cancel-watch.js';
import type { CommitTables } from './commit-items.js';
import type { WorkItemCut } from './cut.js';
import type { LeaseKeeper } from './lease.js';
import type { OpeningReads } from './opening-reads.js';
import type { PassBatcher } from './pass-batcher.js';
import type { Residency } from './residency.js';
import type { SampleCommits } from './sample-commits.js';
import type { SampleStart } from './sample-resume.js';
import type { SamplerCache } from './sampler-cache.js';
import type { StateCache } from './state-cache.js';
import type { WorkerClients, WorkerEvent } from './types.js';

/** What the parts of one work item share while it runs. */
export interface RunContext {
  readonly backend: Backend;
  readonly clients: WorkerClients;
  /** Resolved once per work item by the runtime; every write below names its table from here. */
  readonly tables: CommitTables;
  /** The bucket of states, checkpoints and results, resolved with the tables. */
  readonly bucket: string;
  /**
   * This run's id (`mintRunId`), in every key it writes and on the rows its commits end (E3, E5): a
   * duplicate delivery of the same work item runs with another, so its writes never land on ours.
   */
  readonly run: string;
  readonly maxAttempts: number;
  readonly inlineResultMaxBytes: number;
  readonly signal: AbortSignal | undefined;
  readonly now: () => number;
  readonly emit: (event: WorkerEvent) => Promise<void>;
  readonly passes: PassBatcher;
  /** The samples' commits, gathered into shared transactions (./sample-commits.ts). */
  readonly sampleCommits: SampleCommits;
  readonly leases: LeaseKeeper;
  readonly samplers: SamplerCache;
  /** The parts' model rows and sample claims, read at once when the work item starts. */
  readonly opening: OpeningReads;
  /** States this process committed, so a base state it wrote is not read back from S3. */
  readonly states: StateCache;
  /** The process's resident model states (S1); absent on a worker that holds nothing between work items. */
  readonly residency?: Residency;
  /** Samples only (absent when the work item has none). */
  readonly sampling?: SamplingContext;
}

/** What the samples of one work item share: where each resumes, the cut, the cancels, the slice size. */
export interface SamplingContext {
  readonly starts: ReadonlyMap<string, Promise<SampleStart>>;
  readonly cut: WorkItemCut;
  /** cancel_future's marks on the running samples' claims (W9). */
  readonly cancels: CancelWatch;
  readonly sliceTokens: number;
  /** The prefix writer's attempt: unique to this run of this work item (P2 row keys). */
  readonly attempt: string;
}

/** The worker was stopped (`WorkerOptions.signal`): abandon, write and commit nothing more. */
export class AbandonedError extends InfrastructureError {
  override readonly name = 'AbandonedError';
  constructor() {
    super('the worker is stopping; the work item is abandoned');
  }
}

/** Throws at a boundary once any of the signals has aborted (the worker stopped, the lease was lost). */
export function stopIfAborted(...signals: readonly (AbortSignal | undefined)[]): void {
  for (const signal of signals) {
    if (signal?.aborted) throw signal.reason instanceof Error ? signal.reason : new AbandonedError();
  }
}
