import type { Tunables } from '../../base/config.js';
import { TRAINING_REQUEST_TYPES, type TrainingRequestType } from '../records.js';

/** How much one tick may dispatch. Read from the tunables (`planLimitsFrom`) by the scheduler. */
export interface PlanLimits {
  /** Steps of one model in one work item (R2 cap; its commit must fit one transaction, E4). */
  readonly maxStepsPerModel: number;
  /** Actions of one model's commit transaction, model row included (`commitActionsOf`). */
  readonly maxCommitActions: number;
  /** Requests (training steps plus samples) in one work item. */
  readonly maxWorkItemRequests: number;
  /** Tokens in one work item, counted from `LiveRow.tokens` (absent counts as 0). */
  readonly maxWorkItemTokens: number;
  /** K of E2: after K failed attempts the model's first step is failed with a server error. */
  readonly maxAttempts: number;
}

/** DynamoDB TransactWriteItems holds at most 100 actions (docs/design.md#limits). */
export const TRANSACT_WRITE_MAX_ACTIONS = 100;

/** The model row's own action in its commit (E4: SET state_ref, applied_through, REMOVE inflight). */
export const COMMIT_MODEL_ROW_ACTIONS = 1;

export const DEFAULT_PLAN_LIMITS: PlanLimits = {
  maxStepsPerModel: 90,
  maxCommitActions: TRANSACT_WRITE_MAX_ACTIONS,
  maxWorkItemRequests: 256,
  maxWorkItemTokens: 4_194_304,
  maxAttempts: 3,
};

export function planLimitsFrom(
  tunables: Pick<Tunables, 'maxStepsPerModel' | 'maxWorkItemRequests' | 'maxWorkItemTokens' | 'maxAttempts'>,
): PlanLimits {
  return {
    maxStepsPerModel: tunables.maxStepsPerModel,
    maxCommitActions: TRANSACT_WRITE_MAX_ACTIONS,
    maxWorkItemRequests: tunables.maxWorkItemRequests,
    maxWorkItemTokens: tunables.maxWorkItemTokens,
    maxAttempts: tunables.maxAttempts,
  };
}

/**
 * Actions a step adds to its model's commit transaction (E4): its future, plus a write-once
 * checkpoint name record for a save, plus (for an unnamed sampler save) the sampling session the
 * server creates. Over-counting only shortens a run; under-counting would break the commit.
 */
export function commitActionsOf(type: TrainingRequestType): number {
  switch (type) {
    case 'save_weights':
      return 2;
    case 'save_weights_for_sampler':
      return 3;
    default:
      return 1;
  }
}

/** The smallest action budget with which any single step (plus the model row) can still commit. */
export const MIN_COMMIT_ACTIONS =
  COMMIT_MODEL_ROW_ACTIONS + Math.max(...TRAINING_REQUEST_TYPES.map((type) => commitActionsOf(type)));
