import type { FutureError, LiveRow, ModelRow, TrainingRequestType } from '../records.js';

/**
 * What one tick decides from (R5): one scan of the `live` index (any order; it may miss rows that
 * the index has not caught up with, and may still show rows that are terminal or already planned)
 * plus the strongly consistent model rows of the models the scan names.
 */
export interface Snapshot {
  readonly live: readonly LiveRow[];
  readonly models: ReadonlyMap<string, ModelRow>;
  /** Request ids of samples already claimed by a work item whose claim has not expired (R4). */
  readonly sampleClaims?: ReadonlySet<string>;
}

/** How a plan decides besides its limits. */
export interface PlanOptions {
  /**
   * S5's coalescing window in ms (`holdUntil` in coalesce.ts); 0 or absent: every plannable model is
   * planned now.
   */
  readonly coalesceMs?: number;
}

export interface PlannedStep {
  readonly request_id: string;
  readonly seq: number;
  readonly request_type: TrainingRequestType;
  /** Counted against the work item's token cap (0 for fail steps, which do not execute). */
  readonly tokens: number;
  /**
   * Set when the step is dispatched only to be failed (R5: only planned work ends a training row):
   * the model is unloaded, or the model exhausted its attempts (E2). The worker records the error
   * as the step's result, changes no state and reads no payload for it.
   */
  readonly fail?: FutureError;
}

/** Why a planned model's run ends where it does; what is beyond waits for a later tick. */
export type RunStop =
  /** The scan shows no further pending seq (nothing more, or index lag: R5 never skips a gap). */
  | 'end_of_run'
  /** The next step is a pass after a barrier (R2). */
  | 'barrier'
  | 'model_steps'
  | 'commit_actions'
  | 'work_item_requests'
  | 'work_item_tokens'
  /** The first step is failed alone after K attempts (E2); the rest runs after its commit. */
  | 'attempts_exhausted'
  /** Two visible rows claim the next seq: a broken intake contract; never guess between them. */
  | 'duplicate_seq';

export interface PlannedModel {
  readonly model_id: string;
  readonly tenant: string;
  /** The epoch read in the snapshot: the claim is conditional on it (E2). */
  readonly expected_epoch: number;
  /** = planned_through + 1 of the snapshot's row. */
  readonly first_seq: number;
  /** The new planned_through. */
  readonly last_seq: number;
  /** Steps first_seq..last_seq, contiguous, in seq order. */
  readonly steps: readonly PlannedStep[];
  readonly base_applied_through: number;
  readonly base_state_ref?: string;
  readonly stopped_by: RunStop;
}

export interface PlannedSample {
  readonly request_id: string;
  readonly model_id: string;
  readonly checkpoint_id?: string;
  readonly tokens: number;
}

/** Why a model with visible pending work got nothing this tick. */
export type DeferReason =
  /** R3: its previous work item has not committed or been re-planned (the sweeper handles expiry). */
  | 'inflight'
  | 'missing_model_row'
  /** Idle but planned_through != applied_through: only a re-plan repairs that; never plan past it. */
  | 'row_inconsistent'
  /** Seq planned_through + 1 is not in the scan yet (index lag, R5). */
  | 'head_not_visible'
  | 'duplicate_seq'
  /** The work item's caps were reached by older work; this model waits for the next tick. */
  | 'work_item_full';

/** A model the plan held back (S5), and until when (the clock of `plan`'s `now`). */
export interface HeldModel {
  readonly model_id: string;
  readonly until: number;
}

export interface DeferredModel {
  readonly model_id: string;
  readonly reason: DeferReason;
}

export interface PlanCounters {
  rows_scanned: number;
  /** The same request id twice in the scan (a terminal copy wins over a pending one). */
  rows_duplicate: number;
  /** Terminal rows the index still shows. */
  rows_not_pending: number;
  /** Training rows at or below their model's planned_through: in flight, or a stale index entry. */
  rows_already_planned: number;
  /** Training rows without a seq, or samples with one: a broken intake contract, ignored. */
  rows_malformed: number;
  /** Rows sharing a (model, seq) with another request id: a broken intake contract. */
  rows_duplicate_seq: number;
  /** In-flight models whose lease has ended: the sweeper re-plans them, the planner never does. */
  models_lease_expired: number;
  steps_planned: number;
  fail_steps_planned: number;
  samples_planned: number;
  samples_already_claimed: number;
  /** Samples of a model whose batch already holds another checkpoint (R4). */
  samples_deferred_checkpoint: number;
  samples_deferred_cap: number;
  /** Models held back for the rest of their SDK step (S5). */
  models_held: number;
  requests: number;
  tokens: number;
}

export interface Plan {
  readonly planned_at: number;
  /** In dispatch order: as the round-robin over tenants first took them (see `plan`). */
  readonly models: readonly PlannedModel[];
  /** In request_id order. */
  readonly samples: readonly PlannedSample[];
  readonly deferred: readonly DeferredModel[];
  /**
   * Models whose run ends with a forward_backward that has just arrived (S5): neither dispatched nor
   * deferred, so the tick plans them again while their holds last. Empty without a coalescing window.
   */
  readonly held: readonly HeldModel[];
  /**
   * A work-item cap stopped the plan while older-first work remained: the caller may claim this
   * plan and plan again at once (claimed models are then in flight, claimed samples claimed).
   */
  readonly cap_reached: boolean;
  readonly counters: Readonly<PlanCounters>;
}
