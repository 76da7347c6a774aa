import type { TransactItem } from '../../aws/transact.js';
import { sha256Hex } from '../../base/ids.js';
import { TRANSACT_WRITE_MAX_ACTIONS } from '../../domain/planning/limits.js';
import type { SamplePrefixRef, SamplingSessionRecord } from '../../domain/records.js';
import { type CheckpointEffect, checkpointEffectItem } from '../../repositories/checkpoints/names.js';
import { futureCutItem, futureEndItem, type StoredOutcome } from '../../repositories/futures.js';
import { type ModelAdvance, modelAdvanceItem } from '../../repositories/models.js';
import { sampleClaimDeleteItem } from '../../repositories/samples/claims.js';
import { samplingSessionCreateItem } from '../../repositories/sampling-sessions.js';
import { type LogEntryInput, logEntryItem } from '../../repositories/session-log.js';
import type { Tables } from '../../repositories/tables.js';

export type { CheckpointEffect } from '../../repositories/checkpoints/names.js';
export type { StoredOutcome } from '../../repositories/futures.js';

/**
 * The commit transactions (E4), as data. Pure: the executor in ./commit.ts runs and settles them.
 * Each action is its record's repository's item; this module only composes them.
 *
 * A model's commit, in one TransactWriteItems (at most 100 actions; the planner's `commitActionsOf`
 * budgets them):
 * - the model row's advance (`modelAdvanceItem`), on `inflight = :token AND applied_through = :base`;
 * - each step's future's end (`futureEndItem`, recording the run), on `status = pending`;
 * - a save's checkpoint name record (`checkpointEffectItem`): filled, or its reservation freed;
 * - an unnamed sampler save's sampling session record, put on `attribute_not_exists(pk)`.
 */

/** The tables a commit writes. */
export type CommitTables = Tables<'futures' | 'models' | 'registry'>;

export interface StepCommit {
  readonly request_id: string;
  readonly outcome: StoredOutcome;
  readonly checkpoint?: CheckpointEffect;
  readonly sampling_session?: SamplingSessionRecord;
}

export interface ModelCommit extends ModelAdvance {
  readonly steps: readonly StepCommit[];
}

/** What each action of a commit is, by position, so cancellation reasons can be read per action. */
export type ActionTarget =
  | { readonly kind: 'model' }
  | { readonly kind: 'future'; readonly request_id: string }
  | { readonly kind: 'checkpoint'; readonly request_id: string }
  | { readonly kind: 'sampling_session'; readonly request_id: string }
  | { readonly kind: 'claim'; readonly request_id: string }
  | { readonly kind: 'log'; readonly request_id: string };

export interface CommitTransaction {
  readonly items: readonly TransactItem[];
  readonly targets: readonly ActionTarget[];
}

const MAX_TOKEN_CHARS = 36;

/**
 * ClientRequestToken of a commit: a function of the work item's in-flight token, the run (and of the
 * transaction's variant after futures were dropped from it), so every retry of one commit sends the
 * same token and a retry of a commit that landed succeeds without applying it twice (E5). Another
 * run of the same work item sends another token: its commit is judged on its conditions.
 */
export function commitToken(...parts: readonly (string | number)[]): string {
  return sha256Hex(['commit', ...parts].join('\u0000')).slice(0, MAX_TOKEN_CHARS);
}

export function modelCommitTransaction(commit: ModelCommit, tables: CommitTables): CommitTransaction {
  const items: TransactItem[] = [modelAdvanceItem(tables.models, commit)];
  const targets: ActionTarget[] = [{ kind: 'model' }];
  for (const step of commit.steps) {
    items.push(futureEndItem(tables.futures, step.request_id, step.outcome, commit.now, commit.run));
    targets.push({ kind: 'future', request_id: step.request_id });
    if (step.checkpoint !== undefined) {
      items.push(checkpointEffectItem(tables.registry, step.checkpoint, step.request_id, commit.now));
      targets.push({ kind: 'checkpoint', request_id: step.request_id });
    }
    if (step.sampling_session !== undefined) {
      items.push(samplingSessionCreateItem(tables.registry, step.sampling_session));
      targets.push({ kind: 'sampling_session', request_id: step.request_id });
    }
  }
  return { items, targets };
}

const sampleTargets = (requestId: string): readonly ActionTarget[] => [
  { kind: 'future', request_id: requestId },
  { kind: 'claim', request_id: requestId },
];

/**
 * A sample's commit (R4): its future, and its per-request claim deleted if it is still this one and,
 * unless the sample ends `cancelled`, carries no cancel mark (W9);
 * with its session's completion log entry at the position the commit took (W9), when it has a log.
 */
export function sampleCommitTransaction(
  requestId: string,
  claimToken: string,
  run: string,
  outcome: StoredOutcome,
  now: number,
  tables: CommitTables,
  logEntry?: LogEntryInput,
  cancelled = false,
): CommitTransaction {
  const items = [
    futureEndItem(tables.futures, requestId, outcome, now, run),
    sampleClaimDeleteItem(tables.registry, requestId, claimToken, cancelled),
  ];
  if (logEntry === undefined) return { items, targets: sampleTargets(requestId) };
  return {
    items: [...items, logEntryItem(tables.registry, logEntry)],
    targets: [...sampleTargets(requestId), { kind: 'log', request_id: requestId }],
  };
}

/** One sample's commit, as `sampleCommitTransaction` takes it. */
export interface SampleCommitInput {
  readonly requestId: string;
  readonly claimToken: string;
  readonly run: string;
  readonly outcome: StoredOutcome;
  readonly now: number;
  readonly logEntry?: LogEntryInput;
  readonly cancelled?: boolean;
}

/**
 * Several samples' commits in one transaction: each sample's actions exactly as its own commit's
 * (`sampleCommitTransaction`), so each ends with its future, its claim and its log entry together,
 * and nothing of the group lands unless every condition holds. Callers keep a group within
 * `TRANSACT_WRITE_MAX_ACTIONS` (`sampleCommitGroups`).
 */
export function sampleGroupCommitTransaction(
  samples: readonly SampleCommitInput[],
  tables: CommitTables,
): CommitTransaction {
  const items: TransactItem[] = [];
  const targets: ActionTarget[] = [];
  for (const sample of samples) {
    const one = sampleCommitTransaction(
      sample.requestId,
      sample.claimToken,
      sample.run,
      sample.outcome,
      sample.now,
      tables,
      sample.logEntry,
      sample.cancelled,
    );
    items.push(...one.items);
    targets.push(...one.targets);
  }
  return { items, targets };
}

/** Inline result bytes a group's transaction may carry: the budget a model's commit has (E4's 4 MB). */
export const SAMPLE_GROUP_INLINE_BYTES = 2 * 1024 * 1024;

/**
 * Splits samples' commits, in order, into groups whose transactions hold at most
 * `TRANSACT_WRITE_MAX_ACTIONS` actions (a future, a claim and a log entry each) and
 * `SAMPLE_GROUP_INLINE_BYTES` of inline results. A sample over the byte budget alone goes alone.
 */
export function sampleCommitGroups<T extends Pick<SampleCommitInput, 'outcome'>>(
  samples: readonly T[],
  hasLog: (sample: T) => boolean,
  limits: { readonly actions: number; readonly bytes: number } = {
    actions: TRANSACT_WRITE_MAX_ACTIONS,
    bytes: SAMPLE_GROUP_INLINE_BYTES,
  },
): T[][] {
  const groups: T[][] = [];
  let group: T[] = [];
  let actions = 0;
  let bytes = 0;
  for (const sample of samples) {
    const cost = hasLog(sample) ? 3 : 2;
    const size = inlineBytes(sample.outcome);
    if (group.length > 0 && (actions + cost > limits.actions || bytes + size > limits.bytes)) {
      groups.push(group);
      group = [];
      actions = 0;
      bytes = 0;
    }
    group.push(sample);
    actions += cost;
    bytes += size;
  }
  if (group.length > 0) groups.push(group);
  return groups;
}

/** The bytes an outcome puts on its row: an inline result's JSON text (./outputs.ts), else next to none. */
function inlineBytes(outcome: StoredOutcome): number {
  return 'result' in outcome && typeof outcome.result === 'string' ? Buffer.byteLength(outcome.result) : 0;
}

/**
 * A cut sample back to pending (`futureCutItem`). The claim goes in the same transaction, on its
 * token, so only the worker holding the sample can do this.
 */
export function sampleCutTransaction(
  requestId: string,
  claimToken: string,
  prefixRef: SamplePrefixRef | undefined,
  now: number,
  tables: CommitTables,
): CommitTransaction {
  return {
    items: [
      futureCutItem(tables.futures, requestId, prefixRef, now),
      sampleClaimDeleteItem(tables.registry, requestId, claimToken),
    ],
    targets: sampleTargets(requestId),
  };
}
