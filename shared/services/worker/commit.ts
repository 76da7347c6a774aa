import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { backoffDelay, realSleep } from '../../aws/backoff.js';
import { type TransactItem, transactWrite } from '../../aws/transact.js';
import { InfrastructureError, isAwsError } from '../../base/errors.js';
import { logger } from '../../base/logger.js';
import type { SamplePrefixRef } from '../../domain/records.js';
import { readFuture } from '../../repositories/futures.js';
import { readModelRow } from '../../repositories/models.js';
import { readSampleClaim } from '../../repositories/samples/claims.js';
import { takeLogPosition, takeLogPositions, voidLogPosition } from '../../repositories/session-log.js';
import {
  type CommitTables,
  commitToken,
  type ModelCommit,
  modelCommitTransaction,
  type SampleCommitInput,
  type StoredOutcome,
  sampleCommitGroups,
  sampleCommitTransaction,
  sampleCutTransaction,
  sampleGroupCommitTransaction,
} from './commit-items.js';

/**
 * Runs the commit transactions of ./commit-items.ts and settles ambiguous outcomes (E5).
 *
 * - Every retry of one transaction sends the same ClientRequestToken, so a retry of a commit that
 *   landed but whose answer was lost succeeds without applying it twice.
 * - TransactionConflict, throttling and "in progress" cancel the whole transaction (nothing written):
 *   retried with backoff, never reported.
 * - Timeouts and other errors after sending are retried a few times with the same token, then, like a
 *   cancellation on the model row's condition, settled by re-reading the model row strongly.
 */

export type CommitResult =
  | { readonly committed: true; readonly settledByReread: boolean }
  | { readonly committed: false };

/**
 * A sample's commit or cut: also `cancelRequested` when it did not land because cancel_future marked
 * the claim, still this work item's (W9); the sample is then to be committed cancelled.
 */
export type SampleCommitResult = CommitResult | { readonly committed: false; readonly cancelRequested: true };

type Decided =
  | { readonly kind: 'ok'; readonly ambiguous: boolean }
  | { readonly kind: 'condition'; readonly codes: readonly string[]; readonly ambiguous: boolean }
  | { readonly kind: 'unknown'; readonly ambiguous: boolean };

/** Sends after an error whose outcome is unknown before settling by re-read. */
const UNKNOWN_RETRIES = 3;
/** Cancellations for contention before giving up (the work item is then re-planned). */
const CONTENTION_RETRIES = 25;
const BACKOFF = { baseMs: 20, capMs: 1_000, maxRetries: CONTENTION_RETRIES };

export type Sleep = (ms: number) => Promise<void>;

/** Where a commit writes: the client and the tables, resolved by the worker's runtime. */
export interface CommitStore {
  readonly doc: DynamoDBDocumentClient;
  readonly tables: CommitTables;
}

async function transactUntilDecided(
  items: readonly TransactItem[],
  token: string,
  doc: DynamoDBDocumentClient,
  sleep: Sleep,
): Promise<Decided> {
  let ambiguous = false;
  let failures = 0;
  let contention = 0;
  for (;;) {
    let outcome: Awaited<ReturnType<typeof transactWrite>>;
    try {
      outcome = await transactWrite(items, token, doc);
    } catch (error) {
      ambiguous = true;
      logger.warn('commit outcome unknown; retrying with the same token', {
        error: error instanceof Error ? error.name : String(error),
      });
      // A mismatch means this token was used with other values (a redelivered run): re-read instead.
      if (isAwsError(error, 'IdempotentParameterMismatchException') || ++failures > UNKNOWN_RETRIES) {
        return { kind: 'unknown', ambiguous };
      }
      await sleep(backoffDelay(failures, BACKOFF, Math.random));
      continue;
    }
    if (outcome.ok) return { kind: 'ok', ambiguous };
    if (outcome.conditionFailed) return { kind: 'condition', codes: outcome.codes, ambiguous };
    if (++contention > CONTENTION_RETRIES) return { kind: 'unknown', ambiguous };
    await sleep(backoffDelay(contention, BACKOFF, Math.random));
  }
}

/**
 * Commits one model (E4). `committed: false` means the model row's condition failed and the row shows
 * a re-plan: this worker is a zombie and changed nothing. Throws `InfrastructureError` when the
 * commit did not land but the work item still holds the model (the caller releases it for re-plan).
 */
export async function commitModel(
  commit: ModelCommit,
  epoch: number,
  store: CommitStore,
  sleep: Sleep = realSleep,
): Promise<CommitResult> {
  const { doc, tables } = store;
  let steps = commit.steps;
  for (let variant = 0; ; variant++) {
    const transaction = modelCommitTransaction({ ...commit, steps }, tables);
    const decided = await transactUntilDecided(
      transaction.items,
      commitToken(commit.inflight, commit.run, variant),
      doc,
      sleep,
    );
    if (decided.kind === 'ok') return { committed: true, settledByReread: false };
    if (decided.kind === 'condition' && decided.codes[0] === 'None') {
      // The model row passed, so this work item holds the model, yet another action failed. A future
      // that is already terminal keeps its outcome (first writer wins) and the rest commits; anything
      // else is a broken invariant, reported as an infrastructure error.
      const failed = decided.codes.flatMap((code, index) =>
        code === 'ConditionalCheckFailed' ? [transaction.targets[index]] : [],
      );
      const terminal = new Set<string>();
      for (const target of failed) {
        if (target?.kind !== 'future') continue;
        const row = await readFuture(doc, tables.futures, target.request_id, true);
        if (row !== undefined && row.status !== 'pending') terminal.add(target.request_id);
      }
      if (terminal.size === 0 || terminal.size !== failed.length) {
        throw new InfrastructureError(
          `commit of ${commit.inflight} failed a condition other than its model's`,
          {
            context: { codes: decided.codes.join(',') },
          },
        );
      }
      logger.warn('futures already terminal were left out of the commit', {
        inflight: commit.inflight,
        request_ids: [...terminal].join(','),
      });
      steps = steps.filter((step) => !terminal.has(step.request_id));
      continue;
    }
    return settleModelCommit(commit, epoch, store);
  }
}

/**
 * E5: re-read the model row strongly. Mine landed when the row holds my state key (unique to this
 * run), or when the row is still at my epoch with nothing in flight, my last seq applied and my run
 * as its `last_run` (only a commit of this epoch can get there: every re-plan and claim bumps the
 * epoch; and of the runs of this epoch, a duplicate delivery's included, only the one that landed).
 */
async function settleModelCommit(
  commit: ModelCommit,
  epoch: number,
  store: CommitStore,
): Promise<CommitResult> {
  const row = await readModelRow(store.doc, store.tables.models, commit.model_id);
  if (row === undefined) throw new InfrastructureError(`model ${commit.model_id} vanished during its commit`);
  const landed =
    (commit.state_ref !== undefined && row.state_ref === commit.state_ref) ||
    (row.epoch === epoch &&
      row.inflight === undefined &&
      row.applied_through >= commit.applied_through &&
      row.last_run === commit.run);
  if (landed) return { committed: true, settledByReread: true };
  if (row.inflight === commit.inflight) {
    throw new InfrastructureError(`commit of ${commit.inflight} did not land`, {
      context: { model_id: commit.model_id },
    });
  }
  return { committed: false };
}

/** Where a sample's end is logged for its session's poll (W9): the log and the sample's tenant. */
export interface SampleLog {
  readonly logKey: string;
  readonly tenant: string;
}

/**
 * Commits one sample (R4): its future and the deletion of its claim, if the claim is still this work
 * item's, and its session log entry (W9) at a position taken just before. A position a poll voided
 * meanwhile fails only the entry's condition: the commit takes a new position and tries again.
 * Settled by re-reading the claim and the future. Only a `cancelled` commit lands on a claim that
 * cancel_future marked (`cancelRequested` otherwise).
 */
export async function commitSample(
  requestId: string,
  claimToken: string,
  run: string,
  outcome: StoredOutcome,
  now: number,
  store: CommitStore,
  sleep: Sleep = realSleep,
  log?: SampleLog,
  cancelled = false,
  prior?: PriorGroupCommit,
): Promise<SampleCommitResult> {
  const { doc, tables } = store;
  let ambiguous = prior?.ambiguous ?? false;
  let decided: Decided;
  // A group's position is unfilled unless the group landed: used first, so its log has no hole.
  let taken = prior?.position;
  // The position of the last attempt: voided when the commit is refused for a cancel (the cancelled
  // commit takes its own), so the session's polls do not wait at it.
  let lastPosition: number | undefined;
  for (;;) {
    const position =
      log === undefined
        ? undefined
        : (taken ?? (await takeLogPosition(doc, tables.registry, log.logKey, now)));
    taken = undefined;
    lastPosition = position;
    const entry =
      log === undefined || position === undefined
        ? undefined
        : {
            logKey: log.logKey,
            position,
            requestId,
            state: outcome.status === 'completed' ? ('finished' as const) : ('failed' as const),
            tenant: log.tenant,
            now,
          };
    const transaction = sampleCommitTransaction(
      requestId,
      claimToken,
      run,
      outcome,
      now,
      tables,
      entry,
      cancelled,
    );
    decided = await transactUntilDecided(
      transaction.items,
      commitToken(requestId, claimToken, run, ...(position === undefined ? [] : [position])),
      doc,
      sleep,
    );
    ambiguous ||= decided.ambiguous;
    if (decided.kind === 'ok') return { committed: true, settledByReread: false };
    const onlyTheEntry =
      decided.kind === 'condition' &&
      decided.codes.every((code, index) =>
        transaction.targets[index]?.kind === 'log' ? code === 'ConditionalCheckFailed' : code === 'None',
      );
    if (!onlyTheEntry) break;
  }
  const [claim, future] = await Promise.all([
    readSampleClaim(doc, tables.registry, requestId),
    readFuture(doc, tables.futures, requestId, true),
  ]);
  if (claim?.claim_token === claimToken && claim.cancel_requested !== undefined && !cancelled) {
    if (log !== undefined && lastPosition !== undefined) {
      await voidLogPosition(doc, tables.registry, log.logKey, lastPosition, now).catch(() => false);
    }
    return { committed: false, cancelRequested: true };
  }
  if (claim?.claim_token === claimToken) {
    throw new InfrastructureError(`commit of sample ${requestId} did not land`, {
      context: { request_id: requestId },
    });
  }
  // The claim is gone or another's. Only an attempt of mine whose answer was lost can have ended the
  // future with my run while leaving no claim behind (a duplicate delivery's run holds the same claim).
  if (
    ambiguous &&
    claim === undefined &&
    future !== undefined &&
    future.status !== 'pending' &&
    future.run === run
  ) {
    return { committed: true, settledByReread: true };
  }
  return { committed: false };
}

/**
 * What a sample's own commit knows of the group commit it was part of (`commitSamples`): the log
 * position the group took for it, and whether the group's outcome was ambiguous (it may have landed).
 */
export interface PriorGroupCommit {
  readonly position?: number;
  readonly ambiguous: boolean;
}

/** One sample's commit for `commitSamples`: `commitSample`'s arguments. */
export interface SampleCommitRequest {
  readonly requestId: string;
  readonly claimToken: string;
  readonly run: string;
  readonly outcome: StoredOutcome;
  readonly now: number;
  readonly log?: SampleLog;
  readonly cancelled?: boolean;
}

/**
 * Commits several samples (R4) in as few transactions as fit (`sampleCommitGroups`), each sample's
 * actions exactly those of its own commit: its future, its claim's deletion and its log entry (W9).
 * A group takes its log positions with one ADD per log. A group that does not land whole (a claim
 * taken over or marked cancelled, a voided position, an unknown outcome) changes nothing, unless it
 * landed ambiguously: each of its samples is then committed on its own (`commitSample`), starting
 * from the position the group took for it and knowing the group may have landed, so each answer is
 * exactly the one its own commit would give. A single sample is committed on its own at once.
 * Answers in the order of `samples`; an error of one sample's commit is its answer alone.
 */
export async function commitSamples(
  samples: readonly SampleCommitRequest[],
  store: CommitStore,
  sleep: Sleep = realSleep,
): Promise<(SampleCommitResult | Error)[]> {
  const groups = sampleCommitGroups(
    samples.map((sample, index) => ({ ...sample, index })),
    (sample) => sample.log !== undefined,
  );
  const answers: (SampleCommitResult | Error)[] = new Array(samples.length);
  await Promise.all(
    groups.map(async (group) => {
      const results = await commitGroup(group, store, sleep);
      for (const [at, sample] of group.entries())
        answers[sample.index] = results[at] as SampleCommitResult | Error;
    }),
  );
  return answers;
}

async function commitGroup(
  group: readonly SampleCommitRequest[],
  store: CommitStore,
  sleep: Sleep,
): Promise<(SampleCommitResult | Error)[]> {
  const alone = (sample: SampleCommitRequest, prior?: PriorGroupCommit) =>
    commitSample(
      sample.requestId,
      sample.claimToken,
      sample.run,
      sample.outcome,
      sample.now,
      store,
      sleep,
      sample.log,
      sample.cancelled ?? false,
      prior,
    ).catch((error: unknown) => (error instanceof Error ? error : new Error(String(error))));
  const [only] = group;
  if (only === undefined || group.length === 1) return only === undefined ? [] : [await alone(only)];
  const { doc, tables } = store;
  let positions: (number | undefined)[];
  try {
    positions = await groupLogPositions(group, store);
  } catch {
    // Each sample takes its own position, as its own commit does; any position taken here stays
    // unfilled and is voided by a poll (shared/domain/session-log.ts), as a failed commit's is.
    return Promise.all(group.map((sample) => alone(sample)));
  }
  const inputs: SampleCommitInput[] = group.map((sample, at) => {
    const position = positions[at];
    return {
      requestId: sample.requestId,
      claimToken: sample.claimToken,
      run: sample.run,
      outcome: sample.outcome,
      now: sample.now,
      cancelled: sample.cancelled ?? false,
      ...(sample.log === undefined || position === undefined
        ? {}
        : {
            logEntry: {
              logKey: sample.log.logKey,
              position,
              requestId: sample.requestId,
              state: sample.outcome.status === 'completed' ? ('finished' as const) : ('failed' as const),
              tenant: sample.log.tenant,
              now: sample.now,
            },
          }),
    };
  });
  const transaction = sampleGroupCommitTransaction(inputs, tables);
  const token = commitToken(
    'samples',
    ...group.flatMap((sample, at) => [sample.requestId, sample.claimToken, sample.run, positions[at] ?? '']),
  );
  const decided = await transactUntilDecided(transaction.items, token, doc, sleep);
  if (decided.kind === 'ok') return group.map(() => ({ committed: true, settledByReread: false }));
  logger.info('a group of sample commits did not land whole; committing each on its own', {
    samples: group.length,
    outcome: decided.kind,
  });
  const ambiguous = decided.ambiguous || decided.kind === 'unknown';
  return Promise.all(
    group.map((sample, at) => {
      const position = positions[at];
      return alone(sample, { ambiguous, ...(position === undefined ? {} : { position }) });
    }),
  );
}

/** The log positions of a group's samples: one ADD per log, for as many samples as it has there. */
async function groupLogPositions(
  group: readonly SampleCommitRequest[],
  store: CommitStore,
): Promise<(number | undefined)[]> {
  const counts = new Map<string, { count: number; now: number }>();
  for (const sample of group) {
    if (sample.log === undefined) continue;
    const entry = counts.get(sample.log.logKey);
    counts.set(sample.log.logKey, { count: (entry?.count ?? 0) + 1, now: entry?.now ?? sample.now });
  }
  const firsts = new Map(
    await Promise.all(
      [...counts].map(
        async ([logKey, { count, now }]) =>
          [logKey, await takeLogPositions(store.doc, store.tables.registry, logKey, count, now)] as const,
      ),
    ),
  );
  return group.map((sample) => {
    if (sample.log === undefined) return undefined;
    const next = firsts.get(sample.log.logKey) as number;
    firsts.set(sample.log.logKey, next + 1);
    return next;
  });
}

/**
 * Returns a cut sample to pending (see `sampleCutTransaction`). `committed: false` when the claim is
 * no longer this work item's or the future already ended: someone else owns the sample, and nothing
 * changed; `cancelRequested` when cancel_future marked the claim (it is to be committed cancelled). Throws `InfrastructureError` when it did not land while the claim is still ours.
 */
export async function returnSampleToPending(
  requestId: string,
  claimToken: string,
  prefixRef: SamplePrefixRef | undefined,
  now: number,
  attempt: string,
  store: CommitStore,
  sleep: Sleep = realSleep,
): Promise<SampleCommitResult> {
  const { doc, tables } = store;
  const transaction = sampleCutTransaction(requestId, claimToken, prefixRef, now, tables);
  const decided = await transactUntilDecided(
    transaction.items,
    commitToken('cut', requestId, claimToken, attempt),
    doc,
    sleep,
  );
  if (decided.kind === 'ok') return { committed: true, settledByReread: false };
  const [claim, future] = await Promise.all([
    readSampleClaim(doc, tables.registry, requestId),
    readFuture(doc, tables.futures, requestId, true),
  ]);
  if (claim?.claim_token === claimToken && future?.status === 'pending') {
    if (claim.cancel_requested !== undefined) return { committed: false, cancelRequested: true };
    throw new InfrastructureError(`sample ${requestId} could not be returned to pending`, {
      context: { request_id: requestId },
    });
  }
  // Only an attempt of mine whose answer was lost deletes my claim and leaves the future pending.
  if (decided.ambiguous && claim === undefined && future?.status === 'pending') {
    return { committed: true, settledByReread: true };
  }
  return { committed: false };
}
