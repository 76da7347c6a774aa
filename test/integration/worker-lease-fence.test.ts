import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelRow } from '../../shared/domain/records.js';
import { resolveTables } from '../../shared/repositories/tables.js';
import { LeaseKeeper, LeaseLostError } from '../../shared/services/worker/lease.js';
import { crossEntropy, textDatum, WorkerHarness } from '../support/worker-harness.js';

/**
 * The fence before a model part writes its blobs (shared/services/worker/lease.ts `stillHeld`), on the local
 * cloud: while more than half the lease it last confirmed is left it answers without a call (no
 * re-plan can take a live lease); past that it renews, and a lease taken over stops the part.
 */

let h: WorkerHarness;

beforeAll(async () => {
  h = await WorkerHarness.start();
});

afterAll(() => h?.cloud.clients.dynamo.destroy());

const LEASE_MS = 60_000;

/** A claimed model (its row in flight) and a keeper on a clock the test moves. */
async function claimed(tenant: string) {
  const t = h.tenant(tenant);
  const created = await t.createModel(2, 3);
  await t.pass('forward_backward', created.model_id, crossEntropy(textDatum('fence')));
  const dispatched = await h.dispatch({ only: (row) => row.model_id === created.model_id });
  const part = dispatched?.item.models[0];
  if (part === undefined) throw new Error('nothing dispatched');
  const row = (await h.modelRow(created.model_id)) as ModelRow;
  let clock = Date.now();
  const updates: string[] = [];
  const name = `fenceUpdates-${tenant}`;
  h.cloud.clients.doc.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === 'UpdateItemCommand') updates.push(context.commandName);
      return next(args);
    },
    { step: 'initialize', name, override: true },
  );
  const keeper = new LeaseKeeper(
    h.cloud.clients.doc,
    resolveTables(['models', 'registry']),
    LEASE_MS,
    3_600_000,
    () => clock,
  );
  return {
    part,
    row,
    keeper,
    updates,
    advance: (ms: number) => (clock += ms),
    at: (time: number) => (clock = time),
    done: () => {
      keeper.stop();
      h.cloud.clients.doc.middlewareStack.remove(name);
    },
  };
}

describe('the fence before a model part writes', () => {
  it('answers without a call while more than half the confirmed lease is left', async () => {
    const c = await claimed('fence-a');
    try {
      const untilOnRow = c.row.lease_until ?? 0;
      expect(untilOnRow).toBeGreaterThan(Date.now());
      c.keeper.hold(c.part.model_id, c.part.inflight, untilOnRow);
      c.at(untilOnRow - LEASE_MS / 2 - 1_000);
      expect(await c.keeper.stillHeld(c.part.inflight)).toBe(true);
      expect(c.updates).toEqual([]);
    } finally {
      c.done();
    }
  });

  it('renews once less than half is left, and the renewal it made counts as confirmed', async () => {
    const c = await claimed('fence-b');
    try {
      c.keeper.hold(c.part.model_id, c.part.inflight, c.row.lease_until ?? 0);
      c.at((c.row.lease_until ?? 0) - LEASE_MS / 2 + 10);
      expect(await c.keeper.stillHeld(c.part.inflight)).toBe(true);
      expect(c.updates).toHaveLength(1);
      expect(((await h.modelRow(c.part.model_id)) as ModelRow).lease_until).toBeGreaterThan(
        c.row.lease_until ?? 0,
      );
      // The lease it wrote is a full one from its clock: the next fence needs no call.
      c.advance(1_000);
      expect(await c.keeper.stillHeld(c.part.inflight)).toBe(true);
      expect(c.updates).toHaveLength(1);
    } finally {
      c.done();
    }
  });

  it('a lease taken over is found by the renewal: the fence fails and the part is stopped', async () => {
    const c = await claimed('fence-c');
    try {
      // Unknown confirmed lease (0): the fence must ask.
      const signal = c.keeper.hold(c.part.model_id, c.part.inflight);
      await h.replan(c.part.model_id, Date.now() + 10 * 60_000);
      expect(await c.keeper.stillHeld(c.part.inflight)).toBe(false);
      expect(signal.aborted).toBe(true);
      expect(signal.reason).toBeInstanceOf(LeaseLostError);
    } finally {
      c.done();
    }
  });
});
