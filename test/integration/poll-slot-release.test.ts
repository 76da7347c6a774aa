import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { inPollSlot } from '../../shared/api/quotas.js';
import { registryKey } from '../../shared/domain/records.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';

/**
 * retrieve_future's poll slot (shared/api/quotas.ts `inPollSlot`) on the local cloud: the slot is
 * given back while the answer is read, not before it, and on every path (the poll or the answer
 * throwing included), before the call settles.
 */

let cloud: TestCloud;
const LIMIT = 1;

beforeAll(async () => {
  cloud = await setupTestCloud();
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
