import { randomUUID } from 'node:crypto';
import type { BackoffPolicy, Clock } from '../../aws/backoff.js';
import { Limiter } from '../../aws/limiter.js';
import { logger } from '../../base/logger.js';
import { AckSlot } from './ack-slot.js';
import { BatchWriteStoppedError, type WriteRequest, writeBatch } from './batch-write.js';
import { checkCutRow, type EncodedItem, encodeCutRow } from './codec/cut-row.js';
import { commitGroup, type GroupOutcome } from './group-commit.js';
import { type BatchEntry, GroupRun, isEncoded, type PendingCall } from './group-run.js';
import { BATCH_WRITE_MAX_REQUESTS, batchesOf, type GroupLimits, groupRows } from './grouping.js';
import { groupKey, rowItemKey } from './keys.js';
import { Backlog, Pacer } from './pacing.js';
import { committedCallOf, pointerAfter } from './pointer.js';
import type { CommitRecord, RowItemRecord } from './records.js';
import type { PrefixTable } from './table.js';
import type { CutRow, SaveAck, SaveFailureReason } from './types.js';

/**
 * Saving a cut (P1-P3). Rows are grouped by their token counts (known without encoding), then
 * encoded one by one, and each group's items go out in BatchWriteItem calls of 25 as soon as 25 are
 * encoded, through one limiter shared by the cut: encoding the next rows overlaps the writes in
 * flight, the encoder yields to the event loop between rows, and it stays a bounded number of
 * batches ahead of the writes. A group whose items are all durable writes its commit record. Every
 * call has its own acknowledgement promise: it settles as soon as its own outcome is known (its
 * group committed or failed, or its own signal fired), never later because of another group, and
 * cleanup (rollback deletes) never delays it.
 *
 * The caller must not change a row's `tokens` or `logprobs` until that call is acknowledged: they are
 * read while the cut is being written, not copied up front.
 */

export interface SaveCutOptions {
  /** Epoch ms. No row write or commit starts at or after it; cleanup (abort marker, deletes) may. */
  readonly deadline: number;
  /** The writer's attempt; part of every row key. Must be unique per execution of a cut. */
  readonly attempt: string | number;
  /** Aborts the whole cut: groups not committed yet fail, in-flight writes are cancelled. */
  readonly signal?: AbortSignal;
}

export interface SaveCutSettings {
  readonly table: PrefixTable;
  readonly limits: GroupLimits;
  readonly maxItemBytes: number;
  /** BatchWriteItem calls in flight at once, across the cut's groups. */
  readonly writeConcurrency: number;
  readonly ttlSeconds: number;
  readonly backoff: BackoffPolicy;
  /** Retries of rollback deletes; best effort, TTL collects whatever is left. */
  readonly rollbackBackoff: BackoffPolicy;
  readonly clock: Clock;
}

export interface GroupReport {
  readonly groupKey: string;
  readonly calls: number;
  readonly items: number;
  readonly outcome: 'committed' | 'failed' | 'empty';
  readonly reason?: SaveFailureReason;
  /** Row items deleted by rollback (garbage of failed or cancelled calls). */
  readonly rolledBack: number;
}

export interface CutReport {
  readonly writer: string;
  readonly groups: readonly GroupReport[];
}

export interface CutSave {
  /** One acknowledgement per input row, in input order. */
  readonly acks: readonly Promise<SaveAck>[];
  ack(callId: string): Promise<SaveAck>;
  /** Every group settled and its rollback tried. Never rejects. */
  readonly done: Promise<CutReport>;
}

/** Encoding work between two turns of the event loop. */
const ENCODE_SLICE_MS = 4;

/** The longest delay setTimeout honours. */
const MAX_TIMER_MS = 2 ** 31 - 1;

function failed(callId: string, reason: SaveFailureReason, message: string): SaveAck {
  return { status: 'failed', callId, reason, message };
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** A call's first row key: every cut has at least one item, so it names the call's cut in a group. */
function firstRowKey(input: CutRow, attempt: string): string {
  return rowItemKey(input.callId, attempt, input.previous?.segments.length ?? 0, 0);
}

function reasonText(signal: AbortSignal): string {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason.message : String(reason ?? 'aborted');
}

export function saveCut(
  rows: readonly CutRow[],
  options: SaveCutOptions,
  settings: SaveCutSettings,
): CutSave {
  const attempt = String(options.attempt);
  const writer = randomUUID();
  const { clock } = settings;
  const ttl = Math.floor(clock.now() / 1000) + settings.ttlSeconds;
  const slots = rows.map((row) => new AckSlot(row.callId));
  const byCall = new Map<string, AckSlot>();
  const accepted: PendingCall[] = [];

  // Cheap checks only (no pass over the tokens): the rows are encoded later, as they are written.
  rows.forEach((input, index) => {
    const slot = slots[index] as AckSlot;
    if (byCall.has(input.callId)) {
      slot.settle(failed(input.callId, 'invalid-row', 'the same call appears twice in one cut'));
      return;
    }
    byCall.set(input.callId, slot);
    if (options.signal?.aborted) {
      slot.settle(failed(input.callId, 'aborted', reasonText(options.signal)));
      return;
    }
    if (input.signal?.aborted) {
      slot.settle(failed(input.callId, 'cancelled', reasonText(input.signal)));
      return;
    }
    if ((input.previous?.length ?? 0) + input.tokens.length === 0) {
      slot.settle(failed(input.callId, 'zero-tokens', 'no generated tokens to save: the call regenerates'));
      return;
    }
    try {
      checkCutRow(input);
      accepted.push({ input, slot });
    } catch (error) {
      slot.settle(failed(input.callId, 'invalid-row', messageOf(error)));
    }
  });

  const groups = groupRows(accepted, (call) => call.input.tokens.length, settings.limits).map(
    (calls) =>
      new GroupRun(
        groupKey(
          attempt,
          calls.map((call) => firstRowKey(call.input, attempt)),
        ),
        calls,
      ),
  );

  // A call's own signal answers it at once; while its group is still writing, it also leaves the commit.
  for (const group of groups) {
    for (const call of group.calls) {
      const signal = call.input.signal;
      if (signal === undefined) continue;
      const onAbort = (): void => {
        if (group.phase === 'writing') group.live.delete(call);
        call.slot.settle({
          status: 'failed',
          callId: call.input.callId,
          reason: 'cancelled',
          message: reasonText(signal),
          groupKey: group.key,
        });
      };
      signal.addEventListener('abort', onAbort, { once: true });
      call.slot.onSettle(() => signal.removeEventListener('abort', onAbort));
    }
  }

  const stopReason = (group: GroupRun): SaveFailureReason | undefined => {
    if (group.phase !== 'writing') return group.failure ?? 'not-committed';
    if (options.signal?.aborted) return 'aborted';
    if (clock.now() >= options.deadline) return 'deadline';
    return undefined;
  };
  const failAllWriting = (reason: SaveFailureReason, message: string): void => {
    for (const group of groups) group.fail(reason, message);
  };
  const watchdog = setTimeout(
    () => failAllWriting('deadline', 'the cut deadline passed before the group committed'),
    // setTimeout fires at once for delays past 2^31-1 ms (or infinite): clamp a far deadline.
    Math.min(MAX_TIMER_MS, Math.max(0, options.deadline - clock.now())),
  );
  const onCutAbort = (): void => failAllWriting('aborted', reasonText(options.signal as AbortSignal));
  options.signal?.addEventListener('abort', onCutAbort, { once: true });

  const limiter = new Limiter(settings.writeConcurrency);
  // Up to two batches per write slot queued or in flight: the next ones are ready when a slot frees.
  const backlog = new Backlog(2 * settings.writeConcurrency);
  const pacer = new Pacer(ENCODE_SLICE_MS);

  const writeGroupBatch = async (group: GroupRun, batch: readonly BatchEntry[]): Promise<void> => {
    const stop = stopReason(group);
    if (stop !== undefined) throw new BatchWriteStoppedError(stop, `group stopped: ${stop}`);
    // Rows of calls cancelled before their batch started are not written at all.
    const entries = batch.filter((entry) => group.live.has(entry.call));
    if (entries.length === 0) return;
    const requests: WriteRequest[] = entries.map((entry) => {
      group.started.add(entry.item);
      const item: RowItemRecord = {
        pk: entry.item.key,
        kind: 'row',
        group: group.key,
        ttl,
        data: entry.item.bytes,
      };
      return { PutRequest: { Item: { ...item } } };
    });
    await writeBatch(settings.table, requests, {
      clock,
      backoff: settings.backoff,
      signal: group.controller.signal,
      mayStart: () => stopReason(group),
    });
  };

  const rollback = async (items: readonly EncodedItem[]): Promise<number> => {
    let deleted = 0;
    for (const batch of batchesOf(items)) {
      try {
        await writeBatch(
          settings.table,
          batch.map((item) => ({ DeleteRequest: { Key: { pk: item.key } } })),
          { clock, backoff: settings.rollbackBackoff, mayStart: () => undefined },
        );
        deleted += batch.length;
      } catch (error) {
        // Best effort: whatever stays behind expires by TTL, and no commit record names it.
        logger.warn('prefix rollback delete failed; TTL will collect', { items: batch.length, error });
      }
    }
    return deleted;
  };

  /** Queues one batch; a failed batch fails its group at once (P3), so the promise never rejects. */
  const queueBatch = (group: GroupRun, batch: readonly BatchEntry[]): void => {
    const write = limiter
      .run(() => writeGroupBatch(group, batch))
      .catch((error: unknown) => {
        const reason = error instanceof BatchWriteStoppedError ? error.reason : 'write-failed';
        group.fail(reason === 'deadline' || reason === 'aborted' ? reason : 'write-failed', messageOf(error));
      });
    group.writes.push(write);
    backlog.add(write);
  };

  /** Encodes the groups' rows in order, queueing each group's batches as they fill. */
  const encodeAll = async (): Promise<void> => {
    for (const group of groups) {
      let batch: BatchEntry[] = [];
      for (const call of group.calls) {
        await pacer.maybeYield();
        if (group.phase !== 'writing') break;
        if (!group.live.has(call)) continue;
        try {
          call.row = encodeCutRow(call.input, attempt, { maxItemBytes: settings.maxItemBytes });
        } catch (error) {
          group.live.delete(call);
          call.slot.settle(failed(call.input.callId, 'invalid-row', messageOf(error)));
          continue;
        }
        for (const item of call.row.items) {
          batch.push({ call, item });
          group.items += 1;
          if (batch.length === BATCH_WRITE_MAX_REQUESTS) {
            queueBatch(group, batch);
            batch = [];
            await backlog.room();
          }
        }
      }
      if (batch.length > 0 && group.phase === 'writing') queueBatch(group, batch);
      group.finishQueueing();
    }
  };

  const runGroup = async (group: GroupRun): Promise<GroupReport> => {
    await group.queued;
    await Promise.all(group.writes);
    const report = (outcome: GroupReport['outcome'], rolledBack: number): GroupReport => ({
      groupKey: group.key,
      calls: group.calls.length,
      items: group.items,
      outcome,
      ...(group.failure === undefined ? {} : { reason: group.failure }),
      rolledBack,
    });

    const stop = stopReason(group);
    if (stop !== undefined) group.fail(stop, `group stopped before commit: ${stop}`);
    if (group.phase === 'done') return report('failed', await rollback([...group.started]));
    if (group.live.size === 0) {
      group.phase = 'done';
      return report('empty', await rollback([...group.started]));
    }

    group.phase = 'committing';
    // Every live call was encoded (queueing ended with the group still writing).
    const committed = [...group.live].filter(isEncoded);
    const record: CommitRecord = {
      pk: group.key,
      kind: 'group',
      status: 'committed',
      writer,
      attempt,
      ttl,
      at: clock.now(),
      calls: committed.map((call) => committedCallOf(call.row)),
    };
    const outcome: GroupOutcome = await commitGroup(settings.table, record, {
      clock,
      backoff: settings.backoff,
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      mayStartWrite: () => !options.signal?.aborted && clock.now() < options.deadline,
    });
    group.phase = 'done';
    const inRecord = new Set(committed.flatMap((call) => call.row.items));
    if (outcome.state === 'committed' && outcome.mine) {
      for (const call of committed) {
        call.slot.settle({
          status: 'saved',
          callId: call.row.callId,
          pointer: pointerAfter(call.row, call.input.previous, group.key),
          groupKey: group.key,
          rowKeys: call.row.items.map((item) => item.key),
        });
      }
      // Rows of calls cancelled before the commit are named by no record: garbage.
      return report('committed', await rollback([...group.started].filter((item) => !inRecord.has(item))));
    }
    group.failure = 'not-committed';
    const message =
      outcome.state === 'unknown'
        ? 'the group commit could not be settled'
        : `the group record says ${outcome.state}${outcome.mine ? '' : ' by another writer'}`;
    for (const call of group.calls) {
      call.slot.settle({
        status: 'failed',
        callId: call.input.callId,
        reason: 'not-committed',
        message,
        groupKey: group.key,
      });
    }
    // Only an abort makes the rows certain garbage; a record of unknown or foreign authorship may
    // name them, so those are left for TTL.
    const rolledBack = outcome.state === 'aborted' ? await rollback([...group.started]) : 0;
    return report('failed', rolledBack);
  };

  const encoding = encodeAll().catch((error: unknown) => {
    // Not expected (a bad row fails alone); stop every group rather than leave one waiting.
    failAllWriting('write-failed', `prefix save failed: ${messageOf(error)}`);
    for (const group of groups) group.finishQueueing();
  });
  const done = Promise.all([encoding, ...groups.map(runGroup)]).then(
    ([, ...reports]) => ({ writer, groups: reports as GroupReport[] }),
    (error: unknown) => {
      // Not expected (every step catches); answer every call rather than leave one hanging.
      const message = `prefix save failed: ${String(error)}`;
      for (const group of groups) {
        for (const call of group.calls) call.slot.settle(failed(call.input.callId, 'write-failed', message));
      }
      return { writer, groups: [] };
    },
  );
  void done.finally(() => {
    clearTimeout(watchdog);
    options.signal?.removeEventListener('abort', onCutAbort);
  });

  return {
    acks: slots.map((slot) => slot.promise),
    ack: (callId) => {
      const slot = byCall.get(callId);
      if (slot === undefined) throw new RangeError(`no call ${callId} in this cut`);
      return slot.promise;
    },
    done,
  };
}
