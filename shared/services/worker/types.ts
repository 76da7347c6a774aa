import type { S3Client } from '@aws-sdk/client-s3';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { Backend } from '../../backend/backend.js';
import type { CommitSignal } from '../../base/commit-signal.js';
import type { PrefixStore } from '../../repositories/prefix/store.js';
import type { Residency } from './residency.js';
import type { StateCache } from './state-cache.js';

/** The two clients the runtime uses; tests inject ones with fault-injecting middleware. */
export interface WorkerClients {
  readonly doc: DynamoDBDocumentClient;
  readonly s3: S3Client;
}

/**
 * Something the runtime reached, reported to `onEvent` before it goes on. Drivers log from it; tests
 * pause or abort there to stand in for a crash at that boundary.
 */
export type WorkerEvent =
  | { readonly kind: 'model-started'; readonly model_id: string; readonly inflight: string }
  | { readonly kind: 'step-done'; readonly model_id: string; readonly seq: number; readonly failed: boolean }
  /** State, large results and checkpoint blobs are in S3; the commit comes next. */
  | { readonly kind: 'model-written'; readonly model_id: string; readonly state_ref: string | undefined }
  | { readonly kind: 'sample-done'; readonly request_id: string }
  /** Where each sequence of a sample starts: restored from its prefix, regenerated (P4a), or fresh. */
  | {
      readonly kind: 'sample-resumed';
      readonly request_id: string;
      readonly sequences: readonly SequenceStartReport[];
    }
  /** A slice of generation ended; `tokens` is each sequence's length so far. A cut may follow. */
  | { readonly kind: 'sample-slice'; readonly request_id: string; readonly tokens: readonly number[] }
  /** A cut sample is back to pending; see `SampleCutReport`. */
  | { readonly kind: 'sample-cut'; readonly request_id: string; readonly report: SampleCutReport };

export type SequenceStartReport =
  | { readonly from: 'start' }
  | { readonly from: 'restored'; readonly tokens: number }
  | { readonly from: 'regenerate'; readonly reason: string };

/** What a cut did to one sample, by sequence count. */
export interface SampleCutReport {
  /** Sequences whose new tokens were saved and acknowledged: their pointer moved forward. */
  readonly saved: number;
  /** Sequences that keep the pointer they had (nothing new to save, or their save failed). */
  readonly kept: number;
  /** Sequences with no pointer: they start over when the sample is dispatched again. */
  readonly restart: number;
  /** Saves that were attempted and failed (their sequences are counted in `kept` or `restart`). */
  readonly failed: number;
}

export interface WorkerOptions {
  readonly backend: Backend;
  readonly clients?: WorkerClients;
  /** Lease length set by each renewal (default: LEASE_SECONDS). */
  readonly leaseMs?: number;
  /** Renewal period (default: a third of the lease). */
  readonly renewEveryMs?: number;
  /** K of E2, used when this worker releases a model for re-plan (default: MAX_ATTEMPTS). */
  readonly maxAttempts?: number;
  /** Results whose JSON is larger go to S3 under `results/<request_id>/<run>.json` (default 64 KiB). */
  readonly inlineResultMaxBytes?: number;
  /** How long the first pass of a fused batch waits for passes of other models (default 0: same tick). */
  readonly passWindowMs?: number;
  /** How long a sample's commit waits for others to share its transaction (default 2 ms, ./sample-commits.ts). */
  readonly sampleCommitWindowMs?: number;
  /**
   * Stands for the process being killed or shut down: every part not yet committing is abandoned at
   * its next boundary, writes nothing more and releases nothing (its lease expires;
   * docs/operations.md#gpu-workers-and-engines).
   */
  readonly signal?: AbortSignal;
  readonly onEvent?: (event: WorkerEvent) => void | Promise<void>;
  readonly now?: () => number;
  /**
   * Cut trigger (the worker process's SIGTERM): when it aborts, every running sample stops at its next
   * slice boundary, its unfinished sequences are saved in one `saveCut`, and it goes back to pending
   * with a prefix pointer on its future (P1-P4). Model parts are not affected.
   */
  readonly cut?: AbortSignal;
  /** Also a cut trigger, checked at every slice boundary (the Lambda's remaining time under a margin). */
  readonly cutWhen?: () => boolean;
  /** Epoch ms by which a cut's prefix save must be durable (default: the cut + DEFAULT_CUT_SAVE_MS). */
  readonly cutDeadline?: () => number;
  /** Period of the `cut#<pool>` poll while samples run (default DEFAULT_CUT_POLL_MS; 0: no polling). */
  readonly cutPollMs?: number;
  /** Period of the running samples' cancel poll (default: the cut poll's period; 0: no polling). */
  readonly cancelPollMs?: number;
  /** New tokens per sequence per backend call; cuts happen between slices (default DEFAULT_SLICE_TOKENS). */
  readonly sampleSliceTokens?: number;
  /** Prefix store for cuts and restores (default: the configured `prefixes` table, the runtime's client). */
  readonly prefixes?: PrefixStore;
  /** Told each part's request ids once its commit landed (default: the installed `commitSignal()`). */
  readonly commits?: CommitSignal;
  /**
   * The run's id, in every key it writes (E3); default: a fresh `mintRunId()`. Only tests pin it, to
   * stand for two runs that write the same keys.
   */
  readonly runId?: string;
  /** Committed states kept in memory for the next work item (default: the process's `processStateCache()`). */
  readonly states?: StateCache;
  /**
   * The process's resident model states (S1, ./residency.ts): a worker process that keeps its backend
   * between work items passes one; without it every commit writes the whole state.
   */
  readonly residency?: Residency;
}

/**
 * How one model's part ended.
 * - `committed`: its commit landed (directly, or found by re-reading after an ambiguous answer).
 * - `not_inflight`: the model row no longer names this work item (a redelivery after the commit, or
 *   a re-plan): nothing was run or written.
 * - `lost`: its commit failed the model row's condition (re-planned meanwhile): nothing changed.
 * - `lease_lost`: a renewal found another owner; stopped before committing.
 * - `failed`: an infrastructure error; nothing committed; `released` says whether the model was handed
 *   back for re-plan at once (otherwise its lease expires and the sweeper re-plans it).
 * - `abandoned`: the worker was stopped (`signal`) before committing.
 * - `cut` (samples only): a cut stopped it; it is back to pending, with its prefixes saved where they
 *   could be, and its claim released, so the scheduler dispatches it again.
 */
export type PartOutcome =
  | {
      readonly outcome: 'committed';
      readonly settled_by_reread: boolean;
      /** A sample's session completion log, told to the commit signal with its request id (W9). */
      readonly session_log?: string;
    }
  | { readonly outcome: 'not_inflight' }
  | { readonly outcome: 'lost' }
  | { readonly outcome: 'lease_lost' }
  | { readonly outcome: 'failed'; readonly error: string; readonly released: boolean }
  | { readonly outcome: 'abandoned' }
  | ({ readonly outcome: 'cut' } & SampleCutReport);

export type ModelOutcome = PartOutcome & { readonly model_id: string };
export type SampleOutcome = PartOutcome & { readonly request_id: string };

export interface WorkItemOutcome {
  readonly work_item_id: string;
  readonly models: readonly ModelOutcome[];
  readonly samples: readonly SampleOutcome[];
  /** Some part failed with an infrastructure error or was abandoned: the message should be retried. */
  readonly retry: boolean;
  readonly elapsed_ms: number;
}
