import { QueryCommand as RawQueryCommand } from '@aws-sdk/client-dynamodb';
import { PutCommand, QueryCommand } from '@aws-sdk/lib-dynamodb';
import { describe, expect, it } from 'vitest';
import type { AwsClients } from '../../shared/aws/clients.js';
import { liveKey } from '../../shared/base/ids.js';
import { LIVE_INDEX } from '../../shared/base/topology.js';
import { scanLiveIndex } from '../../shared/repositories/live-index.js';
import { FakeWire } from '../support/faults/fake-wire.js';
import { createFaultInjector, type FaultPlan } from '../support/faults.js';

/**
 * Stale and partial pages of the `live` index, read with the scheduler's own scan: rows appear late
 * (never vanishing again once shown), terminal rows linger with their old image (never coming back
 * once gone), only within the page whose key range holds them.
 */

const TABLE = 'futures';
const POOL = 'default';
const SHARD_KEY = liveKey(POOL, 0);

function rig(plan: Partial<FaultPlan>) {
  const wire = new FakeWire({ [TABLE]: 'request_id' });
  const clients = wire.clients();
  const faults = createFaultInjector({ seed: 11, ...plan });
  faults.attach(clients);
  return { wire, clients, faults, clean: wire.clients() };
}

const id = (index: number) => `r${String(index).padStart(3, '0')}`;

async function pendingRows(clients: AwsClients, count: number): Promise<string[]> {
  const ids = Array.from({ length: count }, (_, index) => id(index));
  for (const requestId of ids) {
    await clients.doc.send(
      new PutCommand({
        TableName: TABLE,
        Item: {
          request_id: requestId,
          live: SHARD_KEY,
          model_id: 'm',
          seq: 1,
          request_type: 'forward',
          status: 'pending',
        },
      }),
    );
  }
  return ids;
}

/** What the worker's commit does to a row: terminal, out of the sparse index. */
function finish(wire: FakeWire, requestId: string): void {
  const item = wire.table(TABLE).get(JSON.stringify({ S: requestId }));
  if (item === undefined) throw new Error(`no row ${requestId}`);
  delete item.live;
  item.status = { S: 'completed' };
}

async function scan(clients: AwsClients) {
  const { rows } = await scanLiveIndex(clients.doc, TABLE, POOL, 1);
  return rows;
}

describe('rows appearing late', () => {
  it('hides about the configured share of new rows, never hides a row once shown, shows all in the end', async () => {
    const { clients, clean, faults } = rig({ rates: { lateRow: 0.5 } });
    const ids = await pendingRows(clean, 40);
    let shown = new Set<string>();
    const sizes: number[] = [];
    for (let tick = 0; tick < 25 && shown.size < ids.length; tick++) {
      const rows = await scan(clients);
      const now = new Set(rows.map((row) => row.request_id));
      for (const seen of shown) expect(now.has(seen)).toBe(true);
      expect(rows.map((row) => row.request_id)).toEqual([...now].sort());
      shown = now;
      sizes.push(now.size);
    }
    expect(shown).toEqual(new Set(ids));
    // First scan: each of 40 rows hidden with probability 0.5 (within 4.5 standard deviations).
    expect(sizes[0]).toBeGreaterThanOrEqual(20 - 14);
    expect(sizes[0]).toBeLessThanOrEqual(20 + 14);
    expect(sizes.length).toBeGreaterThan(1);
    // Every hidden row of every scan was counted.
    const hidden = sizes.reduce((sum, size) => sum + (ids.length - size), 0);
    expect(faults.counts.lateRow).toBe(hidden);
    expect(faults.byOperation.Query?.lateRow).toBe(hidden);
  });

  it('is the same for the same seed', async () => {
    const first = rig({ rates: { lateRow: 0.3 } });
    const second = rig({ rates: { lateRow: 0.3 } });
    await pendingRows(first.clean, 30);
    await pendingRows(second.clean, 30);
    expect(await scan(second.clients)).toEqual(await scan(first.clients));
  });
});

describe('terminal rows lingering', () => {
  it('shows some finished rows with their old image, then drops each for good', async () => {
    const { wire, clients, clean, faults } = rig({ rates: { lingeringRow: 0.6 } });
    const ids = await pendingRows(clean, 30);
    expect(await scan(clients)).toHaveLength(30);
    const finished = ids.filter((_, index) => index % 3 === 0);
    for (const requestId of finished) finish(wire, requestId);
    const live = ids.filter((requestId) => !finished.includes(requestId));

    let lingering = new Set(finished);
    let total = 0;
    const perScan: number[] = [];
    for (let tick = 0; tick < 30 && lingering.size > 0; tick++) {
      const rows = await scan(clients);
      const now = new Set(rows.map((row) => row.request_id));
      for (const requestId of live) expect(now.has(requestId)).toBe(true);
      const stale = rows.filter((row) => finished.includes(row.request_id));
      // The old image: still pending, as the index last saw it.
      for (const row of stale) expect(row.status).toBe('pending');
      const staleIds = new Set(stale.map((row) => row.request_id));
      for (const requestId of staleIds) expect(lingering.has(requestId)).toBe(true);
      lingering = staleIds;
      total += staleIds.size;
      perScan.push(staleIds.size);
    }
    expect(lingering.size).toBe(0);
    expect(perScan[0]).toBeGreaterThan(0);
    expect(faults.counts.lingeringRow).toBe(total);
  });

  it('re-adds a lingering row only on the page whose key range holds it, in key order', async () => {
    const { wire, clients, clean, faults } = rig({ rates: { lingeringRow: 1 } });
    const ids = await pendingRows(clean, 20);
    const readPages = async () => {
      const pages: string[][] = [];
      let start: Record<string, unknown> | undefined;
      do {
        const page = await clients.doc.send(
          new QueryCommand({
            TableName: TABLE,
            IndexName: LIVE_INDEX,
            KeyConditionExpression: '#live = :key',
            ExpressionAttributeNames: { '#live': 'live' },
            ExpressionAttributeValues: { ':key': SHARD_KEY },
            Limit: 5,
            ExclusiveStartKey: start,
          }),
        );
        pages.push((page.Items ?? []).map((item) => String(item.request_id)));
        start = page.LastEvaluatedKey;
      } while (start !== undefined);
      return pages;
    };
    expect((await readPages()).flat()).toEqual(ids);
    for (const requestId of [id(3), id(11), id(18)]) finish(wire, requestId);
    const pages = await readPages();
    expect(pages.flat()).toEqual(ids);
    for (const page of pages) expect(page).toEqual([...page].sort());
    expect(faults.counts.lingeringRow).toBe(3);
  });

  it('remembers a bounded number of rows per partition', async () => {
    const { wire, clients, clean } = rig({ rates: { lingeringRow: 1 }, staleIndex: { memory: 4 } });
    const ids = await pendingRows(clean, 10);
    expect(await scan(clients)).toHaveLength(10);
    for (const requestId of ids) finish(wire, requestId);
    expect((await scan(clients)).map((row) => row.request_id)).toEqual(ids.slice(-4));
  });
});

describe('what is left alone', () => {
  it('base-table queries, other indexes and COUNT queries', async () => {
    const { clients, clean, faults } = rig({ rates: { lateRow: 1, lingeringRow: 1 } });
    await pendingRows(clean, 5);
    const query = (extra: Record<string, unknown>) =>
      new QueryCommand({
        TableName: TABLE,
        KeyConditionExpression: '#live = :key',
        ExpressionAttributeNames: { '#live': 'live' },
        ExpressionAttributeValues: { ':key': SHARD_KEY },
        ...extra,
      });
    for (const extra of [{}, { IndexName: 'other' }, { IndexName: LIVE_INDEX, Select: 'COUNT' }]) {
      const faulty = await clients.doc.send(query(extra));
      const plain = await clean.doc.send(query(extra));
      expect(faulty.Items).toEqual(plain.Items);
    }
    expect(faults.total).toBe(0);
  });

  it('marshalled (raw client) pages are handled the same way', async () => {
    const { wire, clients, clean, faults } = rig({ rates: { lateRow: 1 } });
    await pendingRows(clean, 3);
    const query = () =>
      clients.dynamo.send(
        new RawQueryCommand({
          TableName: TABLE,
          IndexName: LIVE_INDEX,
          KeyConditionExpression: 'live = :key',
          ExpressionAttributeValues: { ':key': { S: SHARD_KEY } },
        }),
      );
    expect((await query()).Items).toEqual([]);
    faults.set('lateRow', 0).set('lingeringRow', 1);
    expect((await query()).Items).toHaveLength(3);
    finish(wire, id(1));
    const page = await query();
    expect(page.Items?.map((item) => item.request_id?.S)).toEqual([id(0), id(1), id(2)]);
    expect(page.Items?.[1]?.status).toEqual({ S: 'pending' });
    expect(page.Count).toBe(3);
  });
});
