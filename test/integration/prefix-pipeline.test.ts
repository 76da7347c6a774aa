import { beforeAll, describe, expect, it } from 'vitest';
import { realSleep } from '../../shared/aws/backoff.js';
import { DEFAULT_READS_IN_FLIGHT_PER_BATCH } from '../../shared/repositories/prefix/store.js';
import type { CutRow, PrefixPointer } from '../../shared/repositories/prefix/types.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import {
  type Call,
  instrumentedStore,
  isPutBatch,
  keysIn,
  row,
  saved,
  unique,
} from '../support/prefix-store-harness.js';

/**
 * The prefix store's pipelining on DynamoDB Local: saves encode and write group by group and yield to
 * the event loop, a failing group answers its calls at once, and restores are answered as soon as
 * the BatchGetItem call holding their rows (and their group's record) is in. Slow and failing calls
 * are injected by SDK middleware on the store's own client.
 */

let cloud: TestCloud;
let tableName: string;

beforeAll(async () => {
  cloud = await setupTestCloud();
  cloud.applyEnv();
  tableName = cloud.names.tables.prefixes;
});

/** A store on this suite's table over a fresh recording client. */
const storeWith = (options: Parameters<typeof instrumentedStore>[2] = {}) =>
  instrumentedStore(cloud.endpoints, tableName, options);

const putKeys = (call: Pick<Call, 'command' | 'input'>): string[] =>
  isPutBatch(call, tableName) ? keysIn(call, tableName) : [];
const at = <T>(promise: Promise<T>): Promise<{ value: T; at: number }> =>
  promise.then((value) => ({ value, at: Date.now() }));

async function savedPointers(count: number, label: string, tokens = 60): Promise<PrefixPointer[]> {
  const { store } = storeWith();
  const rows = Array.from({ length: count }, (_, i) => row(`${unique(label)}-${i}`, tokens));
  const save = store.saveCut(rows, { attempt: 'a1', deadline: Date.now() + 30_000 });
  return (await Promise.all(save.acks)).map(saved);
}

describe('saveCut pipelining', () => {
  it('yields to the event loop while encoding: a timer set after the call fires before the rows are all sent', async () => {
    // Enough write slots that encoding everything first would send every batch before a timer fires.
    const { store, calls } = storeWith({ writeConcurrency: 16 });
    // 240 rows of 6,000 tokens (1.4M tokens, 10 batches): encoding them takes many turns of the loop.
    const rows = Array.from({ length: 240 }, (_, i) => row(`${unique('yield')}-${i}`, 6_000));
    const sentBatches = (): number => calls.filter((call) => isPutBatch(call, tableName)).length;
    const save = store.saveCut(rows, { attempt: 'a1', deadline: Date.now() + 60_000 });
    let sentWhenTimerFired: number | undefined;
    setTimeout(() => {
      sentWhenTimerFired = sentBatches();
    }, 0);
    const report = await save.done;
    expect(sentBatches()).toBe(10);
    expect(sentWhenTimerFired).toBeDefined();
    expect(sentWhenTimerFired).toBeLessThan(10);
    expect(report.groups.map((group) => group.outcome)).toEqual(['committed']);
    expect((await Promise.all(save.acks)).every((ack) => ack.status === 'saved')).toBe(true);
  });

  it('writes the first rows while later ones are still being encoded', async () => {
    let firstWriteAt = Number.POSITIVE_INFINITY;
    const { store } = storeWith({
      writeConcurrency: 2,
      hook: async (command, input, next) => {
        if (isPutBatch({ command, input }, tableName)) firstWriteAt = Math.min(firstWriteAt, Date.now());
        return next();
      },
    });
    const rows: CutRow[] = Array.from({ length: 200 }, (_, i) => row(`${unique('early')}-${i}`, 5_000));
    // The last row notes when its tokens are first read once saveCut has returned: by the encoder.
    const last = rows[rows.length - 1] as CutRow;
    let armed = false;
    let lastReadAt: number | undefined;
    rows[rows.length - 1] = Object.defineProperty({ ...last }, 'tokens', {
      get: () => {
        if (armed) lastReadAt ??= Date.now();
        return last.tokens;
      },
    });
    const save = store.saveCut(rows, { attempt: 'a1', deadline: Date.now() + 60_000 });
    armed = true;
    const acks = await Promise.all(save.acks);
    expect(acks.every((ack) => ack.status === 'saved')).toBe(true);
    expect(lastReadAt).toBeDefined();
    expect(firstWriteAt).toBeLessThan(lastReadAt as number);
  });

  it('answers every call of a group whose write fails at once, before its own slow batch and later groups return', async () => {
    const tag = unique('midfail');
    let slowReturnedAt = Number.POSITIVE_INFINITY;
    const { store } = storeWith({
      limits: { maxRows: 30, maxTokens: 1_000_000 },
      hook: async (command, input, next) => {
        const keys = putKeys({ command, input });
        if (keys.some((key) => key.includes(`${tag}-bad`))) {
          throw Object.assign(new Error('item rejected (injected)'), { name: 'ValidationException' });
        }
        if (keys.some((key) => key.includes(`${tag}-slow`) || key.includes(`${tag}-later`))) {
          await realSleep(800);
          try {
            return await next();
          } finally {
            slowReturnedAt = Math.min(slowReturnedAt, Date.now());
          }
        }
        return next();
      },
    });
    // Group 1: 25 slow rows (first batch) and 5 rows whose batch fails. Group 2: 30 slow rows.
    const failing = [
      ...Array.from({ length: 25 }, (_, i) => row(`${tag}-slow-${i}`, 20)),
      ...Array.from({ length: 5 }, (_, i) => row(`${tag}-bad-${i}`, 20)),
    ];
    const later = Array.from({ length: 30 }, (_, i) => row(`${tag}-later-${i}`, 20));
    const save = store.saveCut([...failing, ...later], { attempt: 'a1', deadline: Date.now() + 30_000 });
    const timed = save.acks.map(at);

    const failedAcks = await Promise.all(timed.slice(0, 30));
    for (const { value, at: answeredAt } of failedAcks) {
      expect(value).toMatchObject({ status: 'failed', reason: 'write-failed' });
      expect(answeredAt).toBeLessThan(slowReturnedAt);
    }
    const laterAcks = await Promise.all(timed.slice(30));
    expect(laterAcks.every(({ value }) => value.status === 'saved')).toBe(true);
    const report = await save.done;
    expect(report.groups.map((group) => [group.outcome, group.reason])).toEqual([
      ['failed', 'write-failed'],
      ['committed', undefined],
    ]);
  });

  it('never encodes or writes a call cancelled before its turn; the rest of its group commits', async () => {
    const tag = unique('skip');
    const { store, calls } = storeWith();
    const cancel = new AbortController();
    const rows = Array.from({ length: 60 }, (_, i) =>
      row(`${tag}-${i}`, 200, i === 45 ? { signal: cancel.signal } : {}),
    );
    const save = store.saveCut(rows, { attempt: 'a1', deadline: Date.now() + 30_000 });
    cancel.abort(new Error('sample cancelled (injected)'));
    const acks = await Promise.all(save.acks);
    expect(acks[45]).toMatchObject({ status: 'failed', reason: 'cancelled' });
    expect(acks.filter((ack) => ack.status === 'saved')).toHaveLength(59);
    const written = calls.flatMap(putKeys);
    expect(written).toHaveLength(59);
    expect(written.some((key) => key.startsWith(`row#${tag}-45#`))).toBe(false);
    const report = await save.done;
    expect(report.groups[0]).toMatchObject({ outcome: 'committed', items: 59, rolledBack: 0 });
  });
});

describe('restore pipelining', () => {
  it('answers a restore whose rows are in the first call before a slowed later call returns', async () => {
    // 150 rows and 1 group record: calls of 51 keys (the record first) and 100 keys.
    const pointers = await savedPointers(150, 'firstcall');
    const group = pointers[0]?.segments[0]?.group ?? '';
    let slowReturnedAt = Number.POSITIVE_INFINITY;
    const { store, calls } = storeWith({
      hook: async (command, input, next) => {
        if (command !== 'BatchGetItem' || keysIn({ input }, tableName).includes(group)) return next();
        await realSleep(1_000);
        try {
          return await next();
        } finally {
          slowReturnedAt = Date.now();
        }
      },
    });
    const timed = store
      .restoreMany(pointers.map((pointer) => ({ pointer, contentId: 'c-ckpt' })))
      .map((outcome) => at(outcome));
    const results = await Promise.all(timed);
    expect(results.every(({ value }) => value.kind === 'restored')).toBe(true);

    const reads = calls
      .filter((call) => call.command === 'BatchGetItem')
      .map((call) => keysIn(call, tableName));
    expect(reads.map((keys) => keys.length).sort((a, b) => a - b)).toEqual([51, 100]);
    const firstCall = new Set(reads.find((keys) => keys.includes(group)));
    expect(firstCall.size).toBe(51);
    let early = 0;
    pointers.forEach((pointer, index) => {
      const { at: answeredAt } = results[index] as { at: number };
      const rowKey = `row#${encodeURIComponent(pointer.callId)}#a1#0#0`;
      if (firstCall.has(rowKey)) {
        early += 1;
        expect(answeredAt).toBeLessThan(slowReturnedAt);
      } else {
        expect(answeredAt).toBeGreaterThanOrEqual(slowReturnedAt);
      }
    });
    expect(early).toBe(50);
  });

  it("sends one batch's calls a few at a time, each next call as soon as one returns", async () => {
    // 450 rows and 1 group record: 5 calls (51 keys, then 4 of 100).
    const pointers = await savedPointers(450, 'inflight', 8);
    const inFlightDuring = async (readsInFlightPerBatch?: number) => {
      let inFlight = 0;
      let most = 0;
      const { store, calls } = storeWith({
        ...(readsInFlightPerBatch === undefined ? {} : { readsInFlightPerBatch }),
        hook: async (command, _input, next) => {
          if (command !== 'BatchGetItem') return next();
          inFlight += 1;
          most = Math.max(most, inFlight);
          try {
            await realSleep(40);
            return await next();
          } finally {
            inFlight -= 1;
          }
        },
      });
      const outcomes = await Promise.all(
        store.restoreMany(pointers.map((pointer) => ({ pointer, contentId: 'c-ckpt' }))),
      );
      expect(outcomes.every((outcome) => outcome.kind === 'restored')).toBe(true);
      expect(calls.filter((call) => call.command === 'BatchGetItem')).toHaveLength(5);
      return most;
    };
    expect(await inFlightDuring()).toBe(DEFAULT_READS_IN_FLIGHT_PER_BATCH);
    expect(await inFlightDuring(1)).toBe(1);
    // The store-wide bound (8) still applies above it.
    expect(await inFlightDuring(16)).toBe(5);
    expect(() => storeWith({ readsInFlightPerBatch: 0 })).toThrow(RangeError);
  });

  it('reads a group record shared by every restore of a batch once, in the first call', async () => {
    // Two groups (rows 0-99 and 100-199): each record is read once for the 200 restores.
    const first = await savedPointers(100, 'shared-a');
    const second = await savedPointers(100, 'shared-b');
    const pointers = [...first, ...second];
    const groups = [...new Set(pointers.map((pointer) => pointer.segments[0]?.group ?? ''))];
    expect(groups).toHaveLength(2);
    const { store, calls } = storeWith();
    // Each pointer asked twice, through the window rather than restoreMany.
    const outcomes = await Promise.all(
      [...pointers, ...pointers].map((pointer) => store.restore({ pointer, contentId: 'c-ckpt' })),
    );
    expect(outcomes.every((outcome) => outcome.kind === 'restored')).toBe(true);
    const reads = calls
      .filter((call) => call.command === 'BatchGetItem')
      .map((call) => keysIn(call, tableName));
    const everyKey = reads.flat();
    for (const group of groups) expect(everyKey.filter((key) => key === group)).toHaveLength(1);
    // 202 distinct keys in the fewest calls, the odd-sized one first with both records at its head.
    expect(reads.map((keys) => keys.length).sort((a, b) => a - b)).toEqual([2, 100, 100]);
    expect(reads.find((keys) => keys.length === 2)?.sort()).toEqual([...groups].sort());
  });
});
