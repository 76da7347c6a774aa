import { realSleep } from '../../aws/backoff.js';
import { type CommitSignal, type CommitWatch, commitSignal } from '../../base/commit-signal.js';
import { NotFoundError, ValidationError } from '../../base/errors.js';
import { isRequestId } from '../../base/ids.js';
import {
  HOLE_READ_AFTER_MS,
  HOLE_VOID_AFTER_MS,
  type LogEntry,
  type LogWalk,
  sessionLogKey,
  walkLog,
} from '../../domain/session-log.js';
import { readFuture } from '../../repositories/futures.js';
import { cancelQueuedSample } from '../../repositories/samples/cancel.js';
import { markSampleCancelled } from '../../repositories/samples/claims.js';
import { requireSamplingSession } from '../../repositories/sampling-sessions.js';
import { readLogAfter, readLogEntry, takeCloneId, voidLogPosition } from '../../repositories/session-log.js';
import type { OperationContext } from './operation-context.js';
import { inPollSlot } from './quotas.js';
import { parseRequest } from './request-checks.js';
import { FALLBACK_POLL, SHORT_POLL } from './retrieve.js';
import * as schemas from './schemas.js';

/**
 * Session futures (W9, docs/design.md#w9): `retrieve_futures`, one long poll per (sampling session,
 * clone) answering the samples that ended after the client's cursor, in commit order; and the two
 * routes beside it, `join_sampling_session` (a clone's id) and `cancel_future`. Each result and
 * failure is still read through `retrieve_future`; the poll answers only which requests ended.
 *
 * A poll reads its log with one Query of the index, re-read on retrieve_future's schedule while
 * nothing is new (woken at once by the commit signal where there is one), so a waiting client costs
 * the same few reads a second however many of its samples are in flight.
 */

/** Completions per answer; the cursor resumes after the last one, so nothing beyond it is lost. */
export const MAX_COMPLETIONS_PER_POLL = 1_000;

export interface FutureCompletion {
  readonly state: 'finished' | 'failed';
  readonly request_id: string;
  /** Unknown before the result is encoded in the client's wire: null, which reserves nothing. */
  readonly response_payload_uncompressed_size: null;
}

export interface RetrieveFuturesAnswer {
  readonly completions: readonly FutureCompletion[];
  readonly cursor: number;
}

export interface SessionPollWaits {
  readonly sleep?: (ms: number) => Promise<void>;
  readonly commits?: CommitSignal;
}

type PollContext = OperationContext & { readonly deadline: number };

/** One poll's reads of its log: the walk from the client's cursor and how long its first gap is open. */
class LogPoll {
  readonly #ctx: PollContext;
  readonly #logKey: string;
  readonly #cursor: number;
  /** The gap's position and when this poll first saw it. */
  #gap: { readonly position: number; readonly since: number } | undefined;
  /** Entries the index did not show yet, read from the table or voided by this poll. */
  readonly #resolved: LogEntry[] = [];

  constructor(ctx: PollContext, logKey: string, cursor: number) {
    this.#ctx = ctx;
    this.#logKey = logKey;
    this.#cursor = cursor;
  }

  /**
   * One Query of the log after the cursor, walked to its first gap. A gap older than
   * HOLE_READ_AFTER_MS is read from the table (the index may lag it); one older than
   * HOLE_VOID_AFTER_MS and still empty is voided, so a commit that never lands holds nothing back.
   */
  async read(): Promise<LogWalk> {
    const { doc } = this.#ctx.clients;
    const table = this.#ctx.tables.registry;
    const entries = await readLogAfter(doc, table, this.#logKey, this.#cursor, MAX_COMPLETIONS_PER_POLL);
    for (;;) {
      const walk = walkLog(this.#cursor, [...entries, ...this.#resolved], MAX_COMPLETIONS_PER_POLL);
      if (walk.gap === undefined || walk.answered.length > 0) return walk;
      const now = Date.now();
      if (this.#gap?.position !== walk.gap) this.#gap = { position: walk.gap, since: now };
      const open = now - this.#gap.since;
      if (open < HOLE_READ_AFTER_MS) return walk;
      const found = await readLogEntry(doc, table, this.#logKey, walk.gap);
      if (found !== undefined) {
        this.#resolved.push(found);
        continue;
      }
      if (open < HOLE_VOID_AFTER_MS) return walk;
      if (await voidLogPosition(doc, table, this.#logKey, walk.gap, now)) {
        this.#resolved.push({ position: walk.gap, state: 'void' });
      }
      // Lost the race to the commit: its entry is there now and the next pass reads it.
    }
  }
}

function answerOf(walk: LogWalk): RetrieveFuturesAnswer {
  return {
    completions: walk.answered.map((entry) => ({
      state: entry.state === 'failed' ? 'failed' : 'finished',
      request_id: entry.request_id as string,
      response_payload_uncompressed_size: null,
    })),
    cursor: walk.cursor,
  };
}

/**
 * retrieve_futures: answers at once when the log has entries after `prev_cursor`, else holds until
 * one lands or the deadline passes (then an empty answer with the same cursor). A poll that waits
 * past POLL_SLOT_AFTER_MS takes one of the tenant's long-poll slots, as retrieve_future does.
 */
export async function retrieveFutures(
  ctx: PollContext,
  body: unknown,
  waits: SessionPollWaits = {},
): Promise<RetrieveFuturesAnswer> {
  const request = parseRequest(schemas.retrieveFuturesRequest, body);
  const { sampling_session_id: samplingSessionId, cloned_sampler_id: clone } = request.target;
  await requireSamplingSession(
    ctx.clients.doc,
    ctx.tables.registry,
    samplingSessionId,
    ctx.tenant,
    'target.sampling_session_id',
  );
  const logKey = sessionLogKey(samplingSessionId, clone);
  // Watching starts before the first read, so a commit just after it still wakes the wait.
  const watch = ctx.deadline > Date.now() ? (waits.commits ?? commitSignal()).watch(logKey) : undefined;
  try {
    const poll = new LogPoll(ctx, logKey, request.prev_cursor);
    const first = await poll.read();
    if (first.answered.length > 0 || ctx.deadline <= Date.now()) return answerOf(first);
    const sleep = waits.sleep ?? realSleep;
    const schedule = { since: Date.now(), delay: (watch === undefined ? SHORT_POLL : FALLBACK_POLL).firstMs };
    const slotAt = schedule.since + ctx.tunables.pollSlotAfterMs;
    const early = await waitForEntries(poll, Math.min(ctx.deadline, slotAt), schedule, watch, sleep);
    if (early !== undefined || ctx.deadline <= Date.now()) return answerOf(early ?? first);
    return await inPollSlot(
      ctx.clients.doc,
      ctx.tables.registry,
      { tenant: ctx.tenant, tunables: ctx.tunables, deadline: ctx.deadline },
      () => waitForEntries(poll, ctx.deadline, schedule, watch, sleep),
      async (ended) => answerOf(ended ?? { answered: [], cursor: request.prev_cursor }),
    );
  } finally {
    watch?.close();
  }
}

/** Re-reads the log on retrieve_future's schedule until it has something to answer or `until` passes. */
async function waitForEntries(
  poll: LogPoll,
  until: number,
  schedule: { readonly since: number; delay: number },
  watch: CommitWatch | undefined,
  sleep: (ms: number) => Promise<void>,
): Promise<LogWalk | undefined> {
  const rule = watch === undefined ? SHORT_POLL : FALLBACK_POLL;
  for (;;) {
    const left = until - Date.now();
    if (left <= 0) return undefined;
    const pause = Math.min(schedule.delay, left);
    if (watch === undefined) await sleep(pause);
    else await watch.wait(pause);
    if (Date.now() - schedule.since >= rule.steadyForMs)
      schedule.delay = Math.min(schedule.delay * 2, rule.capMs);
    const walk = await poll.read();
    if (walk.answered.length > 0) return walk;
  }
}

/** join_sampling_session: a new clone id for a client unpickled from this sampling session. */
export async function joinSamplingSession(ctx: OperationContext, body: unknown) {
  const request = parseRequest(schemas.joinSamplingSessionRequest, body);
  await requireSamplingSession(ctx.clients.doc, ctx.tables.registry, request.sampling_session_id, ctx.tenant);
  const clientCounter = await takeCloneId(
    ctx.clients.doc,
    ctx.tables.registry,
    request.sampling_session_id,
    ctx.now,
  );
  return { type: 'join_sampling_session' as const, client_counter: clientCounter };
}

function futureNotFound(requestId: string): NotFoundError {
  return new NotFoundError(`future ${requestId} not found`, { context: { field: 'request_id' } });
}

/**
 * cancel_future: a queued sample is dropped (its future fails with `CANCELLED`); a running one is
 * marked on its claim, and its worker stops it at the engine's next step and ends it the same way
 * (W9, repositories/samples/claims.ts); an ended one is left as it is. `cancelled` says whether the
 * future ends cancelled; the SDK ignores the body.
 */
export async function cancelFuture(ctx: OperationContext, body: unknown) {
  const { request_id: requestId } = parseRequest(schemas.cancelFutureRequest, body);
  if (!isRequestId(requestId)) throw futureNotFound(requestId);
  const row = await readFuture(ctx.clients.doc, ctx.tables.futures, requestId, true);
  if (row === undefined || row.tenant !== ctx.tenant) throw futureNotFound(requestId);
  if (row.request_type !== 'sample') {
    throw new ValidationError(
      `request_id: ${requestId} is a ${row.request_type}; only samples are cancelled`,
      {
        context: { field: 'request_id' },
      },
    );
  }
  const sample = {
    requestId,
    tenant: row.tenant,
    ...(row.session_log === undefined ? {} : { sessionLog: row.session_log }),
  };
  const dropQueued = () => cancelQueuedSample(ctx.clients.doc, ctx.tables, sample, ctx.now);
  // Queued, else running (a live claim), else queued again: a claim whose lease ended meanwhile.
  const cancelled =
    row.status === 'pending' &&
    ((await dropQueued()) ||
      (await markSampleCancelled(ctx.clients.doc, ctx.tables.registry, requestId, ctx.now)) ||
      (await dropQueued()));
  return { type: 'cancel_future' as const, request_id: requestId, cancelled };
}
