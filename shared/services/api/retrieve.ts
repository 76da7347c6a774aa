import { realSleep } from '../../aws/backoff.js';
import { type CommitSignal, type CommitWatch, commitSignal } from '../../base/commit-signal.js';
import { NotFoundError } from '../../base/errors.js';
import { isRequestId } from '../../base/ids.js';
import type { FutureRow } from '../../domain/records.js';
import { withSequenceIds } from '../../domain/sample-sequences.js';
import {
  type FutureHead,
  type FutureOutcome,
  readFutureHead,
  readFutureOutcome,
  readFutureResult,
} from '../../repositories/futures.js';
import { encodeForwardBackwardOutput, encodeSampleResponse } from '../../wire/results.js';
import { BinaryAnswer, PROTOBUF_CONTENT_TYPE } from './bodies.js';
import type { OperationContext } from './operation-context.js';
import { outcomeReads } from './outcome-reads.js';
import { inPollSlot } from './quotas.js';
import { parseRequest } from './request-checks.js';
import { retrieveFutureRequest } from './schemas.js';

/**
 * How often a waiting poll re-reads the row's head. Without a commit signal (AWS, see
 * shared/base/commit-signal.ts) the re-read is how a commit is noticed: every 100 ms for the first 5 s
 * of the wait, where a short step's commit lands, then doubling up to 1 s, so a full 25 s poll makes
 * about 70 eventually consistent reads of the head (0.5 RCU each; docs/architecture.md#the-wake-up-path). With a
 * signal the re-read is only the fallback for commits it cannot see: from 250 ms, doubling to 1 s.
 */
interface PollSchedule {
  readonly firstMs: number;
  readonly capMs: number;
  /** Re-read every `firstMs`, without doubling, while the wait is younger than this. */
  readonly steadyForMs: number;
}
export const SHORT_POLL: PollSchedule = { firstMs: 100, capMs: 1_000, steadyForMs: 5_000 };
export const FALLBACK_POLL: PollSchedule = { firstMs: 250, capMs: 1_000, steadyForMs: 0 };

export interface RetrieveWaits {
  readonly sleep?: (ms: number) => Promise<void>;
  /** Default: the process's installed signal (`commitSignal()`). */
  readonly commits?: CommitSignal;
}

export interface TryAgain {
  readonly type: 'try_again';
  readonly request_id: string;
  readonly queue_state: 'active';
}

export interface FailedAnswer {
  readonly error: string;
  readonly category: 'user' | 'server';
}

function notFound(requestId: string): NotFoundError {
  return new NotFoundError(`future ${requestId} not found`, { context: { field: 'request_id' } });
}

/**
 * retrieve_future: holds the poll open until the row turns terminal or `deadline` (ms since the epoch)
 * passes, woken by the commit signal where there is one and re-reading the row on `PollSchedule`.
 * Completed: the stored result; failed: `{error, category}` with status 200 (the SDK raises
 * RequestFailedError); still pending: try_again. Unknown ids and other tenants' ids are the same
 * 404. A completed forward, forward_backward or sample answers its protobuf message when the client
 * accepts it (W2); which message comes from the stored row, never from the request.
 */
export async function retrieveFuture(
  ctx: OperationContext & { readonly deadline: number; readonly acceptsProtobuf?: boolean },
  body: unknown,
  waits: RetrieveWaits = {},
): Promise<unknown> {
  const { request_id: requestId } = parseRequest(retrieveFutureRequest, body);
  if (!isRequestId(requestId)) throw notFound(requestId);
  // Watching starts before the first read, so a commit that lands just after it still wakes the wait.
  const watch = ctx.deadline > Date.now() ? (waits.commits ?? commitSignal()).watch(requestId) : undefined;
  try {
    // The first read is strong (the client may ask the moment its submit returned) and reads only the
    // row's head: "not yours" and "unknown" then cost the same, whatever the row holds.
    const head: FutureHead | undefined = await readFutureHead(
      ctx.clients.doc,
      ctx.tables.futures,
      requestId,
      true,
    );
    if (head === undefined || head.tenant !== ctx.tenant) throw notFound(requestId);
    if (head.status !== 'pending') return await terminalAnswer(ctx, requestId, undefined);
    if (ctx.deadline <= Date.now()) return tryAgain(requestId);
    const sleep = waits.sleep ?? realSleep;
    const wait = newWait();
    // A poll that ends within POLL_SLOT_AFTER_MS writes nothing (most do: docs/configuration.md#long-polls).
    const slotAt = wait.since + ctx.tunables.pollSlotAfterMs;
    const early = await waitWhilePending(requestId, ctx, {
      until: Math.min(ctx.deadline, slotAt),
      // A poll that never reaches its slot still re-reads at its deadline.
      readAtUntil: slotAt >= ctx.deadline,
      state: wait,
      watch,
      sleep,
    });
    if (early !== 'deadline') return await terminalAnswer(ctx, requestId, early.row);
    if (ctx.deadline <= Date.now()) return tryAgain(requestId);
    // Only a poll that keeps waiting holds an invocation for long: from here it takes one of the
    // tenant's slots (quotas.ts), given back while the answer is read.
    return await inPollSlot(
      ctx.clients.doc,
      ctx.tables.registry,
      { tenant: ctx.tenant, tunables: ctx.tunables, deadline: ctx.deadline },
      () =>
        waitWhilePending(requestId, ctx, {
          until: ctx.deadline,
          readAtUntil: true,
          state: wait,
          watch,
          sleep,
        }),
      async (ended) =>
        ended === 'deadline' ? tryAgain(requestId) : terminalAnswer(ctx, requestId, ended.row),
    );
  } finally {
    watch?.close();
  }
}

function tryAgain(requestId: string): TryAgain {
  return { type: 'try_again', request_id: requestId, queue_state: 'active' };
}

/**
 * The answer of a terminal row: `known` when the wait already read its outcome, else read once,
 * strongly (terminal rows never change again).
 */
async function terminalAnswer(
  ctx: OperationContext & { readonly acceptsProtobuf?: boolean },
  requestId: string,
  known: FutureOutcome | undefined,
): Promise<unknown> {
  const row = known ?? (await readFutureOutcome(ctx.clients.doc, ctx.tables.futures, requestId, true));
  if (row === undefined) throw notFound(requestId);
  if (row.status === 'failed') {
    return {
      error: row.error?.message ?? 'request failed',
      category: row.error?.category ?? 'server',
    } satisfies FailedAnswer;
  }
  const result = await readFutureResult(ctx.clients.s3, ctx.bucket, row);
  if (ctx.acceptsProtobuf === true) return asProtobuf(row, result) ?? result;
  const ids = row.request_type === 'sample' && ctx.sdkFeatures?.resultSequenceIds === true;
  return ids ? withSequenceIds(row.request_id, result) : result;
}

/** Where a poll's re-read schedule stands; kept across the wait before and in the slot. */
interface WaitState {
  readonly since: number;
  delay: number | undefined;
  /** What is left of a pause the wait before the slot ended early (it resumes in the slot). */
  owed: number | undefined;
}

function newWait(): WaitState {
  return { since: Date.now(), delay: undefined, owed: undefined };
}

/**
 * Re-reads the row's outcome until it is terminal (answered with it) or `until` passes. A pending
 * row's outcome is its head alone, so a re-read costs what a read of the head does, and the read that
 * finds the row terminal is the answer's (no second read). At the poll's deadline a last re-read
 * runs (`readAtUntil`); at the end of the wait before the slot none does: the wait in the slot takes
 * the rest of the pause, so the poll makes the same reads at the same times as one slotted at once.
 */
async function waitWhilePending(
  requestId: string,
  ctx: OperationContext,
  wait: {
    readonly until: number;
    readonly readAtUntil: boolean;
    readonly state: WaitState;
    readonly watch: CommitWatch | undefined;
    readonly sleep: (ms: number) => Promise<void>;
  },
): Promise<{ readonly row: FutureOutcome } | 'deadline'> {
  const { state, watch } = wait;
  const schedule = watch === undefined ? SHORT_POLL : FALLBACK_POLL;
  for (;;) {
    const left = wait.until - Date.now();
    if (left <= 0) return 'deadline';
    state.delay ??= schedule.firstMs;
    const wanted = state.owed ?? state.delay;
    state.owed = undefined;
    const pause = Math.min(wanted, left);
    let woken = false;
    if (watch === undefined) await wait.sleep(pause);
    else woken = await watch.wait(pause);
    if (!woken && !wait.readAtUntil && pause < wanted) {
      state.owed = wanted - pause;
      return 'deadline';
    }
    if (Date.now() - state.since >= schedule.steadyForMs)
      state.delay = Math.min(state.delay * 2, schedule.capMs);
    // A woken wait reads strongly: the commit has landed, and an eventually consistent read might
    // not show it yet. Timed re-reads may be stale: a stale one only delays the answer. Where a commit
    // signal wakes polls, the process serves many at once: their re-reads are merged (./outcome-reads.ts).
    const row =
      watch === undefined
        ? await readFutureOutcome(ctx.clients.doc, ctx.tables.futures, requestId, false)
        : await outcomeReads(ctx.clients.doc, ctx.tables.futures).read(requestId, woken);
    if (row !== undefined && row.status !== 'pending') return { row };
  }
}

/** The result's protobuf form for the request types the SDK takes as protobuf; undefined for the rest. */
function asProtobuf(row: Pick<FutureRow, 'request_type'>, result: unknown): BinaryAnswer | undefined {
  switch (row.request_type) {
    case 'forward':
    case 'forward_backward':
      return new BinaryAnswer(
        PROTOBUF_CONTENT_TYPE,
        encodeForwardBackwardOutput(result as Parameters<typeof encodeForwardBackwardOutput>[0]),
      );
    case 'sample':
      return new BinaryAnswer(
        PROTOBUF_CONTENT_TYPE,
        encodeSampleResponse(result as Parameters<typeof encodeSampleResponse>[0]),
      );
    default:
      return undefined;
  }
}
