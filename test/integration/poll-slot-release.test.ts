import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { NO_COMMIT_SIGNAL } from '../../shared/base/commit-signal.js';
import { readConfig } from '../../shared/base/config.js';
import { mintRequestId } from '../../shared/base/ids.js';
import { registryKey } from '../../shared/domain/records.js';
import { pendingFutureRow } from '../../shared/repositories/futures.js';
import { inPollSlot } from '../../shared/services/api/quotas.js';
import { retrieveFuture } from '../../shared/services/api/retrieve.js';
import { apiDeps, setupTestCloud, type TestCloud } from '../support/cloud.js';

/**
 * retrieve_future's poll slot (shared/services/api/quotas.ts `inPollSlot`) on the local cloud: the slot is
 * given back while the answer is read, not before it, and on every path (the poll or the answer
 * throwing included), before the call settles.
 */

let cloud: TestCloud;
const LIMIT = 1;

beforeAll(async () => {
  cloud = await setupTestCloud();
  cloud.applyEnv();
});

afterEach(() => {
  vi.useRealTimers();
});

async function holders(tenant: string): Promise<Record<string, number>> {
  const answer = await cloud.clients.doc.send(
    new GetCommand({
      TableName: cloud.names.tables.registry,
      Key: { pk: registryKey.polls(tenant) },
      ConsistentRead: true,
    }),
  );
  return (answer.Item?.holders as Record<string, number> | undefined) ?? {};
}

function slot<T, R>(tenant: string, poll: () => Promise<T>, answer: (polled: T) => Promise<R>) {
  return inPollSlot(
    cloud.clients.doc,
    cloud.names.tables.registry,
    { tenant, tunables: { longPollsPerTenant: LIMIT }, deadline: Date.now() + 10_000 },
    poll,
    answer,
  );
}

describe('the poll slot is released off the answer critical path', () => {
  it('the answer starts before the release is answered, and the slot is free once the call settles', async () => {
    // The order of events as the client sees them: the release's UpdateItem answered vs the answer.
    const events: string[] = [];
    const name = 'pollSlotReleaseOrder';
    cloud.clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { UpdateExpression?: unknown };
        const release =
          context.commandName === 'UpdateItemCommand' && input.UpdateExpression === 'REMOVE #h.#t';
        try {
          return await next(args);
        } finally {
          if (release) events.push('release answered');
        }
      },
      { step: 'initialize', name, override: true },
    );
    let heldWhilePolling: Record<string, number> = {};
    try {
      const result = await slot(
        'rel-a',
        async () => {
          heldWhilePolling = await holders('rel-a');
          return 'polled';
        },
        async (polled) => {
          events.push('answer started');
          await holders('rel-a');
          events.push('answer read');
          return `${polled}, answered`;
        },
      );
      events.push('settled');
      expect(result).toBe('polled, answered');
    } finally {
      cloud.clients.doc.middlewareStack.remove(name);
    }
    expect(Object.keys(heldWhilePolling)).toHaveLength(1);
    const at = (event: string) => events.indexOf(event);
    expect(at('answer started')).toBeGreaterThanOrEqual(0);
    expect(at('answer started')).toBeLessThan(at('release answered'));
    expect(at('release answered')).toBeLessThan(at('settled'));
    expect(await holders('rel-a')).toEqual({});
  });

  it('a poll that throws gives its slot back before the error surfaces', async () => {
    let answered = false;
    await expect(
      slot(
        'rel-b',
        async () => {
          expect(Object.keys(await holders('rel-b'))).toHaveLength(1);
          throw new Error('poll failed');
        },
        async () => {
          answered = true;
        },
      ),
    ).rejects.toThrow('poll failed');
    expect(answered).toBe(false);
    expect(await holders('rel-b')).toEqual({});
  });

  it('an answer that throws still gives the slot back before the error surfaces', async () => {
    await expect(
      slot(
        'rel-c',
        async () => 'polled',
        async () => {
          throw new Error('answer failed');
        },
      ),
    ).rejects.toThrow('answer failed');
    expect(await holders('rel-c')).toEqual({});
    // With a limit of one, a slot left behind would refuse the next poll with 429.
    await expect(
      slot(
        'rel-c',
        async () => 1,
        async (n) => n + 1,
      ),
    ).resolves.toBe(2);
    expect(await holders('rel-c')).toEqual({});
  });
});

describe('the slot is taken only after POLL_SLOT_AFTER_MS, and the re-reads keep their times', () => {
  /**
   * A poll of a pending future until its deadline (try_again), on a clock that only its pauses move
   * (Date alone is faked: the calls to the cloud run in real time). Records, on that clock, when it
   * read the row and when it took its slot.
   */
  async function pollOnClock(tenant: string, slotAfterMs: number, deadlineMs: number) {
    const now = Date.now();
    const requestId = mintRequestId(now);
    await cloud.clients.doc.send(
      new PutCommand({
        TableName: cloud.names.tables.futures,
        Item: pendingFutureRow({
          requestId,
          tenant,
          modelId: 'model-clock',
          requestType: 'optim_step',
          tokens: 0,
          payloadKey: 'none',
          payloadDigest: 'none',
          now,
        }),
      }),
    );
    vi.useFakeTimers({ toFake: ['Date'], now });
    const reads: number[] = [];
    const slots: number[] = [];
    const name = 'pollClock';
    cloud.clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { TableName?: unknown; UpdateExpression?: unknown };
        if (context.commandName === 'GetItemCommand' && input.TableName === cloud.names.tables.futures)
          reads.push(Date.now() - now);
        if (
          context.commandName === 'UpdateItemCommand' &&
          String(input.UpdateExpression).startsWith('SET #h.#t')
        )
          slots.push(Date.now() - now);
        return next(args);
      },
      { step: 'initialize', name, override: true },
    );
    try {
      const tunables = { ...readConfig({}).tunables, pollSlotAfterMs: slotAfterMs, longPollsPerTenant: 4 };
      const answer = await retrieveFuture(
        { ...apiDeps(cloud), tenant, now, tunables, deadline: now + deadlineMs },
        { request_id: requestId },
        {
          commits: NO_COMMIT_SIGNAL,
          sleep: async (ms) => {
            vi.setSystemTime(Date.now() + ms);
          },
        },
      );
      expect(answer).toMatchObject({ type: 'try_again' });
    } finally {
      cloud.clients.doc.middlewareStack.remove(name);
      vi.useRealTimers();
    }
    return { reads, slots, held: await holders(tenant) };
  }

  it('a slot at once, after 1,050 ms, or never (past the deadline): the same reads at the same times', async () => {
    const atOnce = await pollOnClock('clock-a', 0, 1_500);
    const late = await pollOnClock('clock-b', 1_050, 1_500);
    const never = await pollOnClock('clock-c', 5_000, 1_500);
    // The head at 0, then every 100 ms (the AWS schedule) up to and including the deadline.
    const expected = [0, ...Array.from({ length: 15 }, (_, i) => (i + 1) * 100)];
    for (const run of [atOnce, late, never]) {
      expect(run.reads.slice(0, 1)).toEqual([0]);
      // Times on the faked clock may carry the real milliseconds a call took; pauses alone set them.
      expect(run.reads.map((t) => Math.round(t / 100) * 100)).toEqual(expected);
      expect(run.held).toEqual({});
    }
    expect(atOnce.slots).toHaveLength(1);
    expect(atOnce.slots[0]).toBeLessThan(50);
    expect(late.slots).toHaveLength(1);
    expect(late.slots[0]).toBeGreaterThanOrEqual(1_050);
    expect(late.slots[0]).toBeLessThan(1_100);
    expect(never.slots).toEqual([]);
  });
});
