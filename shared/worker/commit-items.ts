import type { TransactItem } from '../aws/transact.js';
import { config } from '../config.js';
import {
  type FutureError,
  registryKey,
  type SamplePrefixRef,
  type SamplingSessionRecord,
} from '../domain/records.js';
import { sha256Hex } from '../ids.js';

/**
 * The commit transactions (E4), as data. Pure: the executor in ./commit.ts runs and settles them.
 *
 * A model's commit, in one TransactWriteItems (at most 100 actions; the planner's `commitActionsOf`
 * budgets them):
 * - the model row: `SET applied_through, last_completed_at, attempts = 0 [, state_ref] [, status]
 *   REMOVE inflight, lease_until` on `inflight = :token AND applied_through = :base`;
 * - each step's future: `SET status, result | result_key | error, updated_at REMOVE live` on
 *   `status = pending`;
 * - a save's checkpoint name record: `SET status = committed, blob_key` on `request_id = :mine`
 *   (write-once: only the request that reserved the name fills it); a failed save deletes its
 *   still-pending reservation on the same condition, so the name is free and never half-made;
 * - an unnamed sampler save's sampling session record: put on `attribute_not_exists(pk)`.
 */

export type StoredOutcome =
  | { readonly status: 'completed'; readonly result: unknown }
  | { readonly status: 'completed'; readonly result_key: string }
  | { readonly status: 'failed'; readonly error: FutureError };

export type CheckpointEffect =
  | { readonly action: 'commit'; readonly pk: string; readonly blob_key: string }
  | { readonly action: 'release'; readonly pk: string };

export interface StepCommit {
  readonly request_id: string;
  readonly outcome: StoredOutcome;
  readonly checkpoint?: CheckpointEffect;
  readonly sampling_session?: SamplingSessionRecord;
}

export interface ModelCommit {
  readonly model_id: string;
  readonly inflight: string;
  readonly base_applied_through: number;
  /** The last step's seq. */
  readonly applied_through: number;
  /** The new state's key, when this work item changed the state (else state_ref stays). */
  readonly state_ref?: string;
  /** An unload_model step completed. */
  readonly unloaded: boolean;
  readonly now: number;
  readonly steps: readonly StepCommit[];
}

/** What each action of a commit is, by position, so cancellation reasons can be read per action. */
export type ActionTarget =
  | { readonly kind: 'model' }
  | { readonly kind: 'future'; readonly request_id: string }
  | { readonly kind: 'checkpoint'; readonly request_id: string }
  | { readonly kind: 'sampling_session'; readonly request_id: string }
  | { readonly kind: 'claim'; readonly request_id: string };

export interface CommitTransaction {
  readonly items: readonly TransactItem[];
  readonly targets: readonly ActionTarget[];
}

const MAX_TOKEN_CHARS = 36;

/**
 * ClientRequestToken of a commit: a function of the work item's in-flight token (and of the
 * transaction's variant after futures were dropped from it), so every retry of one commit sends the
 * same token and a retry of a commit that landed succeeds without applying it twice (E5).
 */
export function commitToken(...parts: readonly (string | number)[]): string {
  return sha256Hex(['commit', ...parts].join('\u0000')).slice(0, MAX_TOKEN_CHARS);
}

export function futureTerminalUpdate(requestId: string, outcome: StoredOutcome, now: number): TransactItem {
  const { status, ...fields } = outcome;
  const [field, value] = Object.entries(fields)[0] as [string, unknown];
  return {
    Update: {
      TableName: config().table('futures'),
      Key: { request_id: requestId },
      UpdateExpression: 'SET #status = :status, #field = :value, updated_at = :now REMOVE live',
      ConditionExpression: '#status = :pending',
      ExpressionAttributeNames: { '#status': 'status', '#field': field },
      ExpressionAttributeValues: { ':status': status, ':value': value, ':now': now, ':pending': 'pending' },
    },
  };
}

function checkpointAction(effect: CheckpointEffect, requestId: string): TransactItem {
  const TableName = config().table('registry');
  if (effect.action === 'commit') {
    return {
      Update: {
        TableName,
        Key: { pk: effect.pk },
        UpdateExpression: 'SET #status = :committed, blob_key = :blob',
        ConditionExpression: 'request_id = :mine',
        ExpressionAttributeNames: { '#status': 'status' },
        ExpressionAttributeValues: {
          ':committed': 'committed',
          ':blob': effect.blob_key,
          ':mine': requestId,
        },
      },
    };
  }
  return {
    Delete: {
      TableName,
      Key: { pk: effect.pk },
      ConditionExpression: 'request_id = :mine AND #status = :pending',
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: { ':mine': requestId, ':pending': 'pending' },
    },
  };
}

function modelRowUpdate(commit: ModelCommit): TransactItem {
  const sets = ['applied_through = :applied', 'last_completed_at = :now', 'attempts = :zero'];
  const values: Record<string, unknown> = {
    ':applied': commit.applied_through,
    ':now': commit.now,
    ':zero': 0,
    ':token': commit.inflight,
    ':base': commit.base_applied_through,
  };
  const names: Record<string, string> = {};
  if (commit.state_ref !== undefined) {
    sets.push('state_ref = :state');
    values[':state'] = commit.state_ref;
  }
  if (commit.unloaded) {
    sets.push('#status = :unloaded');
    names['#status'] = 'status';
    values[':unloaded'] = 'unloaded';
  }
  return {
    Update: {
      TableName: config().table('models'),
      Key: { model_id: commit.model_id },
      UpdateExpression: `SET ${sets.join(', ')} REMOVE inflight, lease_until`,
      ConditionExpression: 'inflight = :token AND applied_through = :base',
      ...(commit.unloaded ? { ExpressionAttributeNames: names } : {}),
      ExpressionAttributeValues: values,
    },
  };
}

export function modelCommitTransaction(commit: ModelCommit): CommitTransaction {
  const items: TransactItem[] = [modelRowUpdate(commit)];
  const targets: ActionTarget[] = [{ kind: 'model' }];
  for (const step of commit.steps) {
    items.push(futureTerminalUpdate(step.request_id, step.outcome, commit.now));
    targets.push({ kind: 'future', request_id: step.request_id });
    if (step.checkpoint !== undefined) {
      items.push(checkpointAction(step.checkpoint, step.request_id));
      targets.push({ kind: 'checkpoint', request_id: step.request_id });
    }
    if (step.sampling_session !== undefined) {
      items.push({
        Put: {
          TableName: config().table('registry'),
          Item: { ...step.sampling_session },
          ConditionExpression: 'attribute_not_exists(pk)',
        },
      });
      targets.push({ kind: 'sampling_session', request_id: step.request_id });
    }
  }
  return { items, targets };
}

/** A sample's commit (R4): its future, and its per-request claim deleted if it is still this one. */
export function sampleCommitTransaction(
  requestId: string,
  claimToken: string,
  outcome: StoredOutcome,
  now: number,
): CommitTransaction {
  return {
    items: [futureTerminalUpdate(requestId, outcome, now), claimDelete(requestId, claimToken)],
    targets: [
      { kind: 'future', request_id: requestId },
      { kind: 'claim', request_id: requestId },
    ],
  };
}

function claimDelete(requestId: string, claimToken: string): TransactItem {
  return {
    Delete: {
      TableName: config().table('registry'),
      Key: { pk: registryKey.sampleClaim(requestId) },
      ConditionExpression: 'claim_token = :token',
      ExpressionAttributeValues: { ':token': claimToken },
    },
  };
}

/**
 * A cut sample back to pending: its future keeps every attribute the client sees (status, `live`, so
 * the scheduler plans it again) and gets the prefix pointers it resumes from, or loses them when it
 * has none left; `updated_at` changes, so the futures stream wakes the scheduler. The claim goes in
 * the same transaction, on its token, so only the worker holding the sample can do this.
 */
export function sampleCutTransaction(
  requestId: string,
  claimToken: string,
  prefixRef: SamplePrefixRef | undefined,
  now: number,
): CommitTransaction {
  const values: Record<string, unknown> = { ':now': now, ':pending': 'pending' };
  if (prefixRef !== undefined) values[':ref'] = prefixRef;
  return {
    items: [
      {
        Update: {
          TableName: config().table('futures'),
          Key: { request_id: requestId },
          UpdateExpression:
            prefixRef === undefined
              ? 'SET updated_at = :now REMOVE prefix_ref'
              : 'SET prefix_ref = :ref, updated_at = :now',
          ConditionExpression: '#status = :pending',
          ExpressionAttributeNames: { '#status': 'status' },
          ExpressionAttributeValues: values,
        },
      },
      claimDelete(requestId, claimToken),
    ],
    targets: [
      { kind: 'future', request_id: requestId },
      { kind: 'claim', request_id: requestId },
    ],
  };
}
