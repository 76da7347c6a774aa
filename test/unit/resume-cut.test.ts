import { beforeAll, describe, expect, it } from 'vitest';
import { logger } from '../../shared/base/logger.js';
import type { SamplePrefixRef } from '../../shared/domain/records.js';
import type { CutSave } from '../../shared/repositories/prefix/save-cut.js';
import type { CutRow, PrefixPointer, SaveAck } from '../../shared/repositories/prefix/types.js';
import { sampleCutTransaction } from '../../shared/services/worker/commit-items.js';
import { WorkItemCut } from '../../shared/services/worker/cut.js';
import { parsePrefixRef } from '../../shared/services/worker/sample-resume.js';

beforeAll(() => {
  logger.setLogLevel('SILENT');
});

const tables = { futures: 'p-futures', models: 'p-models', registry: 'p-registry' };

const row = (callId: string): CutRow => ({
  callId,
  contentId: 'base:m',
  weightVersion: 0,
  tokens: [1, 2],
  logprobs: [-1, -2],
});

/** A save that acknowledges each row as saved, or failed when its call id ends with `!`. */
function recordingSave() {
  const calls: string[][] = [];
  const save = (rows: readonly CutRow[]): CutSave => {
    calls.push(rows.map((r) => r.callId));
    const acks = rows.map(
      (r): Promise<SaveAck> =>
        Promise.resolve(
          r.callId.endsWith('!')
            ? { status: 'failed', callId: r.callId, reason: 'deadline', message: 'late' }
            : {
                status: 'saved',
                callId: r.callId,
                pointer: { callId: r.callId } as PrefixPointer,
                groupKey: 'g',
                rowKeys: [],
              },
        ),
    );
    return {
      acks,
      ack: (id) => acks[rows.findIndex((r) => r.callId === id)] as Promise<SaveAck>,
      done: Promise.resolve({ writer: 'w', groups: [] }),
    };
  };
  return { calls, save };
}

describe('the cut of a work item', () => {
  it('saves once, after every generating sample has handed over or left, and answers each its own acks', async () => {
    const { calls, save } = recordingSave();
    const trigger = new AbortController();
    const cut = new WorkItemCut({ signal: trigger.signal }, save);
    const [a, b, c] = [cut.join(), cut.join(), cut.join()];
    expect(cut.requested).toBe(false);
    trigger.abort();
    expect(cut.requested).toBe(true);

    let answeredA: SaveAck[] | undefined;
    const savedA = a.save([row('a#0'), row('a#1!')]).then((acks) => (answeredA = acks));
    const savedB = b.save([row('b#0')]);
    await Promise.resolve();
    // c is still generating: nothing goes out yet.
    expect(calls).toEqual([]);
    expect(answeredA).toBeUndefined();
    c.leave();
    c.leave(); // idempotent
    await savedA;
    expect(calls).toEqual([['a#0', 'a#1!', 'b#0']]);
    expect(answeredA?.map((ack) => [ack.callId, ack.status])).toEqual([
      ['a#0', 'saved'],
      ['a#1!', 'failed'],
    ]);
    expect((await savedB).map((ack) => ack.callId)).toEqual(['b#0']);
  });

  it('latches a boundary condition, and hands an empty cut back without saving', async () => {
    const { calls, save } = recordingSave();
    let late = false;
    const cut = new WorkItemCut({ when: () => late }, save);
    const member = cut.join();
    expect(cut.requested).toBe(false);
    late = true;
    expect(cut.requested).toBe(true);
    late = false;
    expect(cut.requested).toBe(true);
    expect(await member.save([])).toEqual([]);
    expect(calls).toEqual([]);
    cut.dispose();
  });

  it('a save that throws answers every row as failed rather than leaving samples waiting', async () => {
    const cut = new WorkItemCut({}, () => {
      throw new Error('no table');
    });
    const acks = await cut.join().save([row('x#0')]);
    expect(acks).toEqual([{ status: 'failed', callId: 'x#0', reason: 'write-failed', message: 'no table' }]);
  });
});

describe('returning a cut sample to pending', () => {
  const pointer: PrefixPointer = {
    callId: 'r1#0',
    contentId: 'base:m',
    length: 4,
    chain: 'c',
    weightVersion: 0,
    segments: [{ group: 'g', attempt: 'a', cut: 0, chunks: 1 }],
  };

  it('sets the pointers (or removes them), touches updated_at, keeps status and live, and deletes the claim on its token', () => {
    const ref: SamplePrefixRef = { sequences: [pointer, null], cuts: 1 };
    const withRef = sampleCutTransaction('r1', 'wi-1', ref, 99, tables);
    const update = withRef.items[0]?.Update;
    expect(update?.UpdateExpression).toBe('SET prefix_ref = :ref, updated_at = :now');
    expect(update?.ConditionExpression).toBe('#status = :pending');
    expect(update?.ExpressionAttributeValues).toMatchObject({ ':ref': ref, ':now': 99 });
    expect(update?.UpdateExpression).not.toMatch(/live|status =|result/);
    expect(withRef.items[1]?.Delete).toMatchObject({
      Key: { pk: 'claim#r1' },
      // Not while cancel_future has marked the claim (W9): the sample then ends cancelled.
      ConditionExpression: 'claim_token = :token AND attribute_not_exists(cancel_requested)',
      ExpressionAttributeValues: { ':token': 'wi-1' },
    });
    const without = sampleCutTransaction('r1', 'wi-1', undefined, 99, tables).items[0]?.Update;
    expect(without?.UpdateExpression).toBe('SET updated_at = :now REMOVE prefix_ref');
    expect(without?.ExpressionAttributeValues).not.toHaveProperty(':ref');
  });

  it('reads back a stored prefix_ref, and treats a malformed one as none', () => {
    expect(parsePrefixRef({ sequences: [pointer, null], cuts: 2 })).toEqual({
      sequences: [pointer, null],
      cuts: 2,
    });
    expect(parsePrefixRef(undefined)).toBeUndefined();
    expect(parsePrefixRef({ group_key: 'g', attempt: 1 })).toBeUndefined();
    expect(parsePrefixRef({ sequences: [{ ...pointer, segments: [] }], cuts: 1 })).toBeUndefined();
  });
});
