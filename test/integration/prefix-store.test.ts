import { ProvisionedThroughputExceededException } from '@aws-sdk/client-dynamodb';
import { BatchWriteCommand, DynamoDBDocumentClient, GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import { type Clock, realSleep } from '../../shared/aws/backoff.js';
import { abortGroup, commitGroup, readGroupRecord } from '../../shared/repositories/prefix/group-commit.js';
import type { AbortRecord, CommitRecord } from '../../shared/repositories/prefix/records.js';
import { createPrefixStore } from '../../shared/repositories/prefix/store.js';
import type { PrefixTable } from '../../shared/repositories/prefix/table.js';
import type { CutRow, PrefixPointer, SaveAck } from '../../shared/repositories/prefix/types.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import {
  type Call,
  FAST_BACKOFF,
  type Hook,
  instrumentedClient as instrumentedClientOn,
  instrumentedStore,
  isPutBatch as isPutBatchIn,
  type Json,
  keysIn as keysInTable,
  row,
  saved,
  unique,
} from '../support/prefix-store-harness.js';

/**
 * The prefix store on DynamoDB Local, with what AWS does and DynamoDB Local does not injected by SDK
 * middleware on the store's own client: UnprocessedItems/UnprocessedKeys, throttling, slow calls,
 * lost responses, failing keys.
 */

const DAY_MS = 24 * 3600 * 1000;

let cloud: TestCloud;
let tableName: string;

beforeAll(async () => {
  cloud = await setupTestCloud();
  cloud.applyEnv();
  tableName = cloud.names.tables.prefixes;
});

/** A fresh, recording client on this suite's cloud. */
const instrumentedClient = (hook?: Hook) => instrumentedClientOn(cloud.endpoints, hook);

/** A store on this suite's table over a fresh recording client. */
const storeWith = (options: Parameters<typeof instrumentedStore>[2] = {}) =>
  instrumentedStore(cloud.endpoints, tableName, options);

const plainDoc = (): DynamoDBDocumentClient => localAwsClients(cloud.endpoints).doc;

const keysIn = (call: Call): string[] => keysInTable(call, tableName);
const isPutBatch = (call: Call): boolean => isPutBatchIn(call, tableName);
const isDeleteBatch = (call: Call): boolean => call.command === 'BatchWriteItem' && !isPutBatch(call);

async function exists(key: string): Promise<boolean> {
  const { Item } = await plainDoc().send(
    new GetCommand({ TableName: tableName, Key: { pk: key }, ConsistentRead: true }),
  );
  return Item !== undefined;
}

const table = (): PrefixTable => ({ doc: plainDoc(), tableName });
const fastClock: Clock = { now: () => Date.now(), sleep: realSleep, random: () => Math.random() };

describe('saveCut on the local cloud', () => {
  it('uses the configured table and shared client by default, and restores what it saved', async () => {
    const store = createPrefixStore();
    const save = store.saveCut([row(unique('d'), 40)], { attempt: 1, deadline: Date.now() + 10_000 });
    const pointer = saved(await (save.acks[0] as Promise<SaveAck>));
    const outcome = await store.restore({ pointer, contentId: 'c-ckpt' });
    expect(outcome.kind).toBe('restored');
  });

  it('splits rows into groups and BatchWriteItem calls of 25 as specified, one commit per group', async () => {
    const { store, calls } = storeWith({ limits: { maxRows: 30, maxTokens: 10_000 }, maxItemBytes: 20_000 });
    const small = (n: number) => Array.from({ length: n }, () => row(unique('s'), 50));
    const huge = row(unique('huge'), 12_000);
    const rows = [...small(30), huge, ...small(5)];
    const save = store.saveCut(rows, { attempt: 'a1', deadline: Date.now() + 10_000 });
    const acks = await Promise.all(save.acks);
    const report = await save.done;

    const pointers = acks.map(saved);
    const groupOf = acks.map((ack) => (ack.status === 'saved' ? ack.groupKey : ''));
    expect(new Set(groupOf.slice(0, 30)).size).toBe(1);
    expect(new Set(groupOf).size).toBe(3);
    expect(report.groups.map((g) => [g.calls, g.outcome])).toEqual([
      [30, 'committed'],
      [1, 'committed'],
      [5, 'committed'],
    ]);
    const hugeChunks = pointers[30]?.segments[0]?.chunks ?? 0;
    expect(hugeChunks).toBeGreaterThan(1);
    const batchSizes = calls.filter(isPutBatch).map((call) => keysIn(call).length);
    expect(batchSizes.sort((a, b) => a - b)).toEqual([5, 5, hugeChunks, 25].sort((a, b) => a - b));
    const commits = calls.filter((call) => call.command === 'PutItem');
    expect(commits).toHaveLength(3);
    expect(commits.every((call) => call.input.ConditionExpression === 'attribute_not_exists(pk)')).toBe(true);

    const outcomes = await Promise.all(
      pointers.map((pointer) => store.restore({ pointer, contentId: 'c-ckpt' })),
    );
    outcomes.forEach((outcome, index) => {
      expect(outcome.kind).toBe('restored');
      if (outcome.kind === 'restored') expect(Array.from(outcome.tokens)).toEqual(rows[index]?.tokens);
    });
  });

  it('writes a row over the item limit as several items under 400 KB each', async () => {
    const { store, calls } = storeWith();
    const big = row(unique('big'), 70_000);
    const save = store.saveCut([big], { attempt: 'a1', deadline: Date.now() + 10_000 });
    const pointer = saved(await (save.acks[0] as Promise<SaveAck>));
    expect(pointer.segments[0]?.chunks).toBeGreaterThanOrEqual(2);
    expect(calls.filter(isPutBatch)).toHaveLength(1);
    const outcome = await store.restore({ pointer, contentId: 'c-ckpt' });
    expect(outcome.kind === 'restored' && Array.from(outcome.tokens)).toEqual(big.tokens);
  });

  it('retries UnprocessedItems and throttling with capped, jittered backoff until every row lands', async () => {
    const sleeps: number[] = [];
    const clock: Clock = {
      now: () => Date.now(),
      random: () => 0.5,
      sleep: (ms, signal) => {
        sleeps.push(ms);
        return realSleep(ms, signal);
      },
    };
    let batchCalls = 0;
    const { store, calls } = storeWith({
      clock,
      hook: async (command, input, next) => {
        if (command !== 'BatchWriteItem') return next();
        batchCalls += 1;
        if (batchCalls === 1) {
          // Only half is processed; the rest comes back unprocessed, as under throttling.
          const requests = (input.RequestItems as Record<string, Json[]>)[tableName] ?? [];
          const half = Math.ceil(requests.length / 2);
          const result = await next({ RequestItems: { [tableName]: requests.slice(0, half) } });
          result.output.UnprocessedItems = { [tableName]: requests.slice(half) };
          return result;
        }
        if (batchCalls <= 3) {
          throw new ProvisionedThroughputExceededException({
            message: 'throttled (injected)',
            $metadata: {},
          });
        }
        return next();
      },
    });
    const rows = Array.from({ length: 10 }, () => row(unique('u'), 30));
    const save = store.saveCut(rows, { attempt: 'a1', deadline: Date.now() + 10_000 });
    const pointers = (await Promise.all(save.acks)).map(saved);
    expect(batchCalls).toBe(4);
    const writes = calls.filter(isPutBatch).map(keysIn);
    expect(writes.map((keys) => keys.length)).toEqual([10, 5, 5, 5]);
    // Full jitter at random() = 0.5: half of min(cap, base * 2^retry).
    expect(sleeps).toEqual([1, 2, 4]);
    const outcomes = await Promise.all(
      pointers.map((pointer) => store.restore({ pointer, contentId: 'c-ckpt' })),
    );
    expect(outcomes.every((outcome) => outcome.kind === 'restored')).toBe(true);
  });

  it('refuses a cut at zero generated tokens without writing anything', async () => {
    const { store, calls } = storeWith();
    const save = store.saveCut([row(unique('z'), 0)], { attempt: 'a1', deadline: Date.now() + 10_000 });
    expect(await save.acks[0]).toMatchObject({ status: 'failed', reason: 'zero-tokens' });
    await save.done;
    expect(calls).toHaveLength(0);
  });

  it('on a deadline hit mid-group: acknowledges failure at the deadline, starts no write, rolls back', async () => {
    const slowGroup = unique('slow');
    let fastCommitted: () => void = () => {};
    const fastCommit = new Promise<void>((resolve) => {
      fastCommitted = resolve;
    });
    let slowReturnedAt = Number.POSITIVE_INFINITY;
    const deadline = Date.now() + 800;
    const { store, calls } = storeWith({
      // 5 fast rows of 200 tokens fill one group by tokens; the 30 slow rows of 20 form the next.
      limits: { maxRows: 30, maxTokens: 1_000 },
      writeConcurrency: 1,
      hook: async (command, input, next) => {
        const call = { command, input, at: 0 };
        if (command === 'PutItem') {
          const result = await next();
          fastCommitted();
          return result;
        }
        if (!isPutBatch(call) || !keysIn(call).some((key) => key.includes(slowGroup))) return next();
        // The slow group's first batch is still in flight when the deadline passes.
        await fastCommit;
        await realSleep(deadline + 300 - Date.now());
        try {
          return await next();
        } finally {
          slowReturnedAt = Date.now();
        }
      },
    });
    const fast = Array.from({ length: 5 }, () => row(unique('fast'), 200));
    const slow = Array.from({ length: 30 }, (_, i) => row(`${slowGroup}-${i}`, 20));
    const save = store.saveCut([...fast, ...slow], { attempt: 'a1', deadline });
    const acks = save.acks.map((ack) => ack.then((value) => ({ value, at: Date.now() })));

    const fastPointers = (await Promise.all(acks.slice(0, 5))).map(({ value }) => saved(value));
    const slowAcks = await Promise.all(acks.slice(5));
    for (const { value, at } of slowAcks) {
      expect(value).toMatchObject({ status: 'failed', reason: 'deadline' });
      // Answered at the deadline, before the in-flight write came back.
      expect(at).toBeGreaterThanOrEqual(deadline);
      expect(at).toBeLessThan(slowReturnedAt);
    }
    const report = await save.done;
    expect(report.groups.map((g) => [g.outcome, g.reason, g.rolledBack])).toEqual([
      ['committed', undefined, 0],
      ['failed', 'deadline', 25],
    ]);
    // The slow group's second batch (5 rows) never started; the first (25 rows) was started, so rolled back.
    const putKeys = calls.filter(isPutBatch).flatMap(keysIn);
    expect(putKeys.filter((key) => key.includes(slowGroup))).toHaveLength(25);
    expect(calls.filter((call) => isPutBatch(call) && call.at >= deadline)).toHaveLength(0);
    expect(calls.filter((call) => call.command === 'PutItem')).toHaveLength(1);
    const deleted = calls.filter(isDeleteBatch).flatMap(keysIn);
    expect(deleted).toHaveLength(25);
    for (const key of deleted) expect(await exists(key)).toBe(false);
    expect(await exists(report.groups[1]?.groupKey ?? '')).toBe(false);

    // No acknowledged prefix is missing.
    const outcomes = await Promise.all(
      fastPointers.map((pointer) => store.restore({ pointer, contentId: 'c-ckpt' })),
    );
    expect(outcomes.every((outcome) => outcome.kind === 'restored')).toBe(true);
  });

  it('answers a call that errors during a slow group write at once; bystanders never wait on it', async () => {
    const slowTag = unique('slowwrite');
    let slowReturnedAt = Number.POSITIVE_INFINITY;
    const { store } = storeWith({
      limits: { maxRows: 3, maxTokens: 1_000_000 },
      hook: async (command, input, next) => {
        const call = { command, input, at: 0 };
        if (!isPutBatch(call) || !keysIn(call).some((key) => key.includes(slowTag))) return next();
        await realSleep(1_000);
        try {
          return await next();
        } finally {
          slowReturnedAt = Date.now();
        }
      },
    });
    const crashing = new AbortController();
    const slowRows = [
      row(`${slowTag}-a`, 30),
      row(`${slowTag}-b`, 30, { signal: crashing.signal }),
      row(`${slowTag}-c`, 30),
    ];
    const bystander = row(unique('bystander'), 30);
    const save = store.saveCut([...slowRows, bystander], { attempt: 'a1', deadline: Date.now() + 10_000 });
    const timed = save.acks.map((ack) => ack.then((value) => ({ value, at: Date.now() })));
    setTimeout(() => crashing.abort(new Error('engine crashed (injected)')), 100);

    const crashed = await timed[1];
    expect(crashed?.value).toMatchObject({
      status: 'failed',
      reason: 'cancelled',
      message: 'engine crashed (injected)',
    });
    expect(crashed?.at).toBeLessThan(slowReturnedAt);
    const other = await timed[3];
    expect(other?.value.status).toBe('saved');
    expect(other?.at).toBeLessThan(slowReturnedAt);
    const [a, c] = await Promise.all([timed[0], timed[2]]);
    expect(a?.at).toBeGreaterThanOrEqual(slowReturnedAt);
    const pointers = [saved(a?.value as SaveAck), saved(c?.value as SaveAck)];

    const report = await save.done;
    const record = await readGroupRecord(table(), report.groups[0]?.groupKey ?? '');
    expect(record?.status === 'committed' && record.calls.map((call) => call.call)).toEqual([
      `${slowTag}-a`,
      `${slowTag}-c`,
    ]);
    // The crashed call's row was in the in-flight batch: no record names it, so it was collected.
    expect(report.groups[0]?.rolledBack).toBe(1);
    expect(await exists(`row#${slowTag}-b#a1#0#0`)).toBe(false);
    const outcomes = await Promise.all(
      pointers.map((pointer) => store.restore({ pointer, contentId: 'c-ckpt' })),
    );
    expect(outcomes.map((outcome) => outcome.kind)).toEqual(['restored', 'restored']);
  });

  it('settles a lost commit response by reading the record back', async () => {
    let lost = 0;
    const { store } = storeWith({
      hook: async (command, _input, next) => {
        if (command !== 'PutItem') return next();
        const result = await next();
        lost += 1;
        // The commit landed, but its answer never arrives.
        throw Object.assign(new Error('socket hang up (injected)'), { name: 'TimeoutError', result });
      },
    });
    const save = store.saveCut([row(unique('lost'), 25)], { attempt: 'a1', deadline: Date.now() + 10_000 });
    const pointer = saved(await (save.acks[0] as Promise<SaveAck>));
    expect(lost).toBe(1);
    expect((await store.restore({ pointer, contentId: 'c-ckpt' })).kind).toBe('restored');
  });

  it('settles a commit that failed before landing by aborting the group, and rolls back', async () => {
    const { store, calls } = storeWith({
      hook: async (command, _input, next) => {
        if (command === 'PutItem' && calls.filter((call) => call.command === 'PutItem').length === 1) {
          throw Object.assign(new Error('connection reset (injected)'), { name: 'ECONNRESET' });
        }
        return next();
      },
    });
    const callId = unique('reset');
    const save = store.saveCut([row(callId, 25)], { attempt: 'a1', deadline: Date.now() + 10_000 });
    expect(await save.acks[0]).toMatchObject({ status: 'failed', reason: 'not-committed' });
    const report = await save.done;
    const record = await readGroupRecord(table(), report.groups[0]?.groupKey ?? '');
    expect(record).toMatchObject({ status: 'aborted', writer: report.writer });
    expect(await exists(`row#${callId}#a1#0#0`)).toBe(false);
  });
});

describe('group commit races', () => {
  it('a commit racing an abort settles one way only, and both sides agree', async () => {
    const results = { committed: 0, aborted: 0 };
    const round = async (i: number): Promise<void> => {
      const key = unique('race-group');
      const ttl = Math.floor(Date.now() / 1000) + 600;
      const record: CommitRecord = {
        pk: key,
        kind: 'group',
        status: 'committed',
        writer: 'writer',
        attempt: 'a1',
        ttl,
        at: Date.now(),
        calls: [],
      };
      const abort: AbortRecord = {
        pk: key,
        kind: 'group',
        status: 'aborted',
        writer: 'aborter',
        attempt: 'a1',
        ttl,
        at: Date.now(),
      };
      const ctx = { clock: fastClock, backoff: FAST_BACKOFF, mayStartWrite: () => true };
      // Half the rounds lose the commit's response, so the committer must settle by reading back.
      const lossy: PrefixTable =
        i % 2 === 0
          ? table()
          : {
              tableName,
              doc: DynamoDBDocumentClient.from(
                instrumentedClient(async (command, _input, next) => {
                  const result = await next();
                  if (command === 'PutItem')
                    throw Object.assign(new Error('lost (injected)'), { name: 'TimeoutError' });
                  return result;
                }).dynamo,
              ),
            };
      // Alternate who starts first, so both orders of arrival occur.
      const [committed, aborted] =
        i % 4 < 2
          ? await Promise.all([commitGroup(lossy, record, ctx), abortGroup(table(), abort, ctx)])
          : await Promise.all([
              realSleep(1).then(() => commitGroup(lossy, record, ctx)),
              abortGroup(table(), abort, ctx),
            ]);
      const stored = await readGroupRecord(table(), key);
      if (stored?.status === 'committed') {
        results.committed += 1;
        expect(stored.writer).toBe('writer');
        expect(committed).toEqual({ state: 'committed', mine: true });
        expect(aborted).toEqual({ state: 'committed', mine: false });
      } else {
        results.aborted += 1;
        expect(stored).toMatchObject({ status: 'aborted' });
        expect(committed.state).toBe('aborted');
        expect(aborted.state).toBe('aborted');
        // Exactly one side wrote the marker (the committer writes one when settling an unknown outcome).
        expect(
          committed.state === 'aborted' && committed.mine !== (aborted.state === 'aborted' && aborted.mine),
        ).toBe(true);
      }
    };
    // Rounds are independent (one group each): eight at a time.
    for (let wave = 0; wave < 5; wave++) {
      await Promise.all(Array.from({ length: 8 }, (_, j) => round(wave * 8 + j)));
    }
    expect(results.committed + results.aborted).toBe(40);
    console.info(`commit/abort race: ${results.committed} committed, ${results.aborted} aborted`);
  });

  it("a late retry of a rolled-back attempt cannot touch a later attempt's committed prefix", async () => {
    const callId = unique('late');
    let captured: Json | undefined;
    const zombie = storeWith({
      hook: async (command, input, next) => {
        if (command === 'BatchWriteItem' && isPutBatch({ command, input, at: 0 })) {
          captured = structuredClone(input);
          await realSleep(700);
        }
        return next();
      },
    });
    // Attempt a1 is cut off by its deadline while its write is in flight; it lands late, then rolls back.
    const first = zombie.store.saveCut([row(callId, 40)], { attempt: 'a1', deadline: Date.now() + 150 });
    expect(await first.acks[0]).toMatchObject({ status: 'failed', reason: 'deadline' });

    // Attempt a2 saves the same call (different tokens) and commits while a1's write is still in flight.
    const { store } = storeWith();
    const replacement = row(callId, 40, {
      tokens: Array.from({ length: 40 }, (_, i) => i),
      weightVersion: 3,
    });
    const second = store.saveCut([replacement], { attempt: 'a2', deadline: Date.now() + 10_000 });
    const pointer = saved(await (second.acks[0] as Promise<SaveAck>));

    await first.done;
    expect(await exists(`row#${callId}#a1#0#0`)).toBe(false);
    // A truly late retry of a1's batch, after its rollback, re-puts only a1's keys.
    await plainDoc().send(
      new BatchWriteCommand(captured as unknown as ConstructorParameters<typeof BatchWriteCommand>[0]),
    );
    expect(await exists(`row#${callId}#a1#0#0`)).toBe(true);
    // And a late commit of a1 would only vouch for a1's rows.
    const outcome = await store.restore({ pointer, contentId: 'c-ckpt' });
    expect(outcome.kind).toBe('restored');
    if (outcome.kind === 'restored') expect(Array.from(outcome.tokens)).toEqual(replacement.tokens);
  });
});

describe('restore on the local cloud', () => {
  async function savedPointers(
    count: number,
    label: string,
  ): Promise<{ pointers: PrefixPointer[]; rows: CutRow[] }> {
    const { store } = storeWith();
    const rows = Array.from({ length: count }, (_, i) => row(`${unique(label)}-${i}`, 60));
    const save = store.saveCut(rows, { attempt: 'a1', deadline: Date.now() + 10_000 });
    return { pointers: (await Promise.all(save.acks)).map(saved), rows };
  }

  it('merges concurrent restores into one shared, deduplicated, strongly consistent read', async () => {
    const { pointers, rows } = await savedPointers(8, 'merge');
    const { store, calls } = storeWith();
    // Each pointer asked twice: the read holds each key once.
    const outcomes = await Promise.all(
      [...pointers, ...pointers].map((pointer) => store.restore({ pointer, contentId: 'c-ckpt' })),
    );
    outcomes.forEach((outcome, index) => {
      expect(outcome.kind === 'restored' && Array.from(outcome.tokens)).toEqual(rows[index % 8]?.tokens);
    });
    const reads = calls.filter((call) => call.command === 'BatchGetItem');
    expect(reads).toHaveLength(1);
    // 16 requests of 2 keys each; all rows share one group record: 8 rows + 1 record.
    expect(keysIn(reads[0] as Call)).toHaveLength(9);
    const request = ((reads[0] as Call).input.RequestItems as Record<string, Json>)[tableName];
    expect(request?.ConsistentRead).toBe(true);
  });

  it('reads at most 100 keys a call and retries UnprocessedKeys', async () => {
    const { pointers } = await savedPointers(150, 'many');
    let first = true;
    const { store, calls } = storeWith({
      hook: async (command, input, next) => {
        if (command !== 'BatchGetItem' || !first) return next();
        first = false;
        const request = (input.RequestItems as Record<string, { Keys: Json[]; ConsistentRead: boolean }>)[
          tableName
        ];
        const keys = request?.Keys ?? [];
        const result = await next({ RequestItems: { [tableName]: { ...request, Keys: keys.slice(0, 10) } } });
        result.output.UnprocessedKeys = { [tableName]: { ...request, Keys: keys.slice(10) } };
        return result;
      },
    });
    const outcomes = await Promise.all(
      store.restoreMany(pointers.map((pointer) => ({ pointer, contentId: 'c-ckpt' }))),
    );
    expect(outcomes.every((outcome) => outcome.kind === 'restored')).toBe(true);
    const sizes = calls.filter((call) => call.command === 'BatchGetItem').map((call) => keysIn(call).length);
    // 151 distinct keys (150 rows, 1 group record): calls of 100 and 51, then the first one's unprocessed rest.
    expect(sizes).toHaveLength(3);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(100);
    expect(sizes.slice(0, 2).sort((a, b) => a - b)).toEqual([51, 100]);
    expect(sizes[2]).toBe((sizes[0] as number) - 10);
  });

  it('fails only the requesters of a corrupt, missing or unreadable row; the rest of the batch restores', async () => {
    const { pointers } = await savedPointers(6, 'bad');
    const [corrupt, missing, unreadable] = pointers as [PrefixPointer, PrefixPointer, PrefixPointer];
    const corruptKey = `row#${encodeURIComponent(corrupt.callId)}#a1#0#0`;
    const { Item } = await plainDoc().send(new GetCommand({ TableName: tableName, Key: { pk: corruptKey } }));
    if (!(Item?.data instanceof Uint8Array)) throw new Error('saved row has no data');
    const data = Item.data.slice();
    data[20] = (data[20] as number) ^ 0x40;
    await plainDoc().send(new PutCommand({ TableName: tableName, Item: { ...Item, data } }));
    await plainDoc().send(
      new BatchWriteCommand({
        RequestItems: { [tableName]: [{ DeleteRequest: { Key: { pk: `row#${missing.callId}#a1#0#0` } } }] },
      }),
    );
    const poisoned = `row#${unreadable.callId}#a1#0#0`;
    const { store, calls } = storeWith({
      hook: async (command, input, next) => {
        if (command === 'BatchGetItem' && keysIn({ command, input, at: 0 }).includes(poisoned)) {
          throw Object.assign(new Error('key rejected (injected)'), { name: 'ValidationException' });
        }
        return next();
      },
    });
    const outcomes = await Promise.all(
      pointers.map((pointer) => store.restore({ pointer, contentId: 'c-ckpt' })),
    );
    expect(
      outcomes.map((outcome) => (outcome.kind === 'regenerate' ? outcome.reason : outcome.kind)),
    ).toEqual(['corrupt', 'missing', 'read-failed', 'restored', 'restored', 'restored']);
    // One shared read of all 7 keys (6 rows, 1 group record), then bisection isolating the poisoned key.
    const reads = calls.filter((call) => call.command === 'BatchGetItem').map(keysIn);
    expect(reads[0]).toHaveLength(7);
    expect(reads.filter((keys) => keys.length === 1 && keys[0] === poisoned)).toHaveLength(1);
  });

  it('does not use an expired row that TTL has not deleted yet', async () => {
    const { pointers } = await savedPointers(1, 'expired');
    const pointer = pointers[0] as PrefixPointer;
    const later = storeWith({ clock: { ...fastClock, now: () => Date.now() + DAY_MS + 60_000 } });
    const outcome = await later.store.restore({ pointer, contentId: 'c-ckpt' });
    expect(outcome).toMatchObject({ kind: 'regenerate', reason: 'expired' });
    expect(await exists(`row#${pointer.callId}#a1#0#0`)).toBe(true);
  });

  it("regenerates when the sample's checkpoint differs, without reading", async () => {
    const { pointers } = await savedPointers(1, 'content');
    const { store, calls } = storeWith();
    const outcome = await store.restore({ pointer: pointers[0] as PrefixPointer, contentId: 'c-other' });
    expect(outcome).toMatchObject({ kind: 'regenerate', reason: 'content-mismatch' });
    expect(calls).toHaveLength(0);
  });

  it('cancelling one waiter drops only its result; the shared read serves the others', async () => {
    const { pointers } = await savedPointers(3, 'cancel');
    let readReturnedAt = Number.POSITIVE_INFINITY;
    const { store, calls } = storeWith({
      hook: async (command, _input, next) => {
        if (command !== 'BatchGetItem') return next();
        await realSleep(400);
        try {
          return await next();
        } finally {
          readReturnedAt = Date.now();
        }
      },
    });
    const cancel = new AbortController();
    const [kept, dropped, alsoKept] = pointers.map((pointer, index) =>
      store.restore({ pointer, contentId: 'c-ckpt', ...(index === 1 ? { signal: cancel.signal } : {}) }),
    );
    setTimeout(() => cancel.abort(new Error('sample cancelled (injected)')), 50);
    await expect(dropped).rejects.toThrow('sample cancelled (injected)');
    expect(Date.now()).toBeLessThan(readReturnedAt);
    expect((await kept)?.kind).toBe('restored');
    expect((await alsoKept)?.kind).toBe('restored');
    expect(calls.filter((call) => call.command === 'BatchGetItem')).toHaveLength(1);
  });

  it('restoreMany reads at once instead of waiting for the window', async () => {
    const { pointers } = await savedPointers(4, 'many-now');
    const { store } = storeWith({ readWindowMs: 2_000 });
    const started = Date.now();
    const outcomes = await Promise.all(
      store.restoreMany(pointers.map((pointer) => ({ pointer, contentId: 'c-ckpt' }))),
    );
    expect(outcomes.every((outcome) => outcome.kind === 'restored')).toBe(true);
    expect(Date.now() - started).toBeLessThan(1_000);
  });

  it('restores a prefix saved over several cuts by different attempts', async () => {
    const { store } = storeWith();
    const callId = unique('multi');
    const first = row(callId, 50);
    const p1 = saved(
      await (store.saveCut([first], { attempt: 'a1', deadline: Date.now() + 10_000 })
        .acks[0] as Promise<SaveAck>),
    );
    const second = row(callId, 30, {
      tokens: Array.from({ length: 30 }, (_, i) => i * 3),
      previous: p1,
      weightVersion: 3,
    });
    const p2 = saved(
      await (store.saveCut([second], { attempt: 'a2', deadline: Date.now() + 10_000 })
        .acks[0] as Promise<SaveAck>),
    );
    expect(p2.segments.map((segment) => [segment.attempt, segment.cut])).toEqual([
      ['a1', 0],
      ['a2', 1],
    ]);
    const outcome = await store.restore({ pointer: p2, contentId: 'c-ckpt' });
    expect(outcome.kind === 'restored' && Array.from(outcome.tokens)).toEqual([
      ...Array.from(first.tokens),
      ...Array.from(second.tokens),
    ]);
    expect(outcome.kind === 'restored' && outcome.weightVersion).toBe(3);
  });
});
