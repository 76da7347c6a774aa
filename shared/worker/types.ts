import type { S3Client } from '@aws-sdk/client-s3';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { Backend } from '../backend/backend.js';

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
  | { readonly kind: 'sample-done'; readonly request_id: string };

export interface WorkerOptions {
  readonly backend: Backend;
  readonly clients?: WorkerClients;
  /** Lease length set by each renewal (default: LEASE_SECONDS). */
  readonly leaseMs?: number;
  /** Renewal period (default: a third of the lease). */
  readonly renewEveryMs?: number;
  /** K of E2, used when this worker releases a model for re-plan (default: MAX_ATTEMPTS). */
  readonly maxAttempts?: number;
  /** Results whose JSON is larger go to S3 under `results/<request_id>.json` (default 64 KiB). */
  readonly inlineResultMaxBytes?: number;
  /** How long the first pass of a fused batch waits for passes of other models (default 0: same tick). */
  readonly passWindowMs?: number;
  /**
   * Stands for the process being killed or shut down: every part not yet committing is abandoned at
   * its next boundary, writes nothing more and releases nothing (its lease expires; see README).
   */
  readonly signal?: AbortSignal;
  readonly onEvent?: (event: WorkerEvent) => void | Promise<void>;
  readonly now?: () => number;
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
 */
export type PartOutcome =
  | { readonly outcome: 'committed'; readonly settled_by_reread: boolean }
  | { readonly outcome: 'not_inflight' }
  | { readonly outcome: 'lost' }
  | { readonly outcome: 'lease_lost' }
  | { readonly outcome: 'failed'; readonly error: string; readonly released: boolean }
  | { readonly outcome: 'abandoned' };

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
