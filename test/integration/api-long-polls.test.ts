import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { registryKey } from '../../shared/domain/records.js';
import { acquirePollLease, releasePollLease } from '../../shared/repositories/quotas.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';
import { completeFuture } from '../support/futures.js';
import { waitFor } from '../support/wait.js';

/**
 * Concurrent long polls per tenant over real HTTP on the local cloud (no worker runs, so futures
 * stay pending and every poll holds for LONG_POLL_SECONDS): a poll takes a slot once it has waited
 * POLL_SLOT_AFTER_MS; over LONG_POLLS_PER_TENANT such polls at once, retrieve_future answers 429
 * with Retry-After; other tenants are unaffected; slots come back when a poll ends, and a slot a
 * crashed poll never gave back expires. A poll that ends sooner takes no slot at all.
 */

const LIMIT = 2;
const SLOT_AFTER_MS = 400;
let api: ApiHarness;
let acme: { key: string; client: TinkerClient };
let zeta: { key: string; client: TinkerClient };
let acmeFuture: string;
let zetaFuture: string;

async function pendingFuture(client: TinkerClient): Promise<string> {
  const { session_id } = await client.createSession();
  const model = await client.createModel({
    session_id,
    model_seq_id: 0,
    base_model: 'reference/byte-lm',
    lora_config: { rank: 4 },
  });
  return model.request_id;
}

function poll(key: string, requestId: string): Promise<Response> {
  return fetch(`${api.url}/api/v1/retrieve_future`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key },
    body: JSON.stringify({ request_id: requestId }),
  });
}

async function holders(tenant: string): Promise<Record<string, number>> {
  const answer = await api.cloud.clients.doc.send(
    new GetCommand({
      TableName: api.cloud.names.tables.registry,
      Key: { pk: registryKey.polls(tenant) },
      ConsistentRead: true,
    }),
  );
  return (answer.Item?.holders as Record<string, number> | undefined) ?? {};
}

beforeAll(async () => {
  api = await startApiHarness({
    LONG_POLLS_PER_TENANT: String(LIMIT),
    LONG_POLL_SECONDS: '2',
    POLL_SLOT_AFTER_MS: String(SLOT_AFTER_MS),
  });
  // The repository is called from the test too (crashed leases), with the same tables.
  api.cloud.applyEnv();
  acme = await api.tenant('acme');
  zeta = await api.tenant('zeta');
  acmeFuture = await pendingFuture(acme.client);
  zetaFuture = await pendingFuture(zeta.client);
});

afterAll(async () => {
  await api?.stop();
});

describe('long polls per tenant', () => {
  it('a poll over the limit gets 429 with Retry-After; another tenant polls; slots come back', async () => {
    const open = [poll(acme.key, acmeFuture), poll(acme.key, acmeFuture)];
    await waitFor('both polls open', async () => Object.keys(await holders('acme')).length === LIMIT);

    const asked = Date.now();
    const over = await poll(acme.key, acmeFuture);
    expect(over.status).toBe(429);
    // Refused only once it had waited POLL_SLOT_AFTER_MS and still found the future pending.
    expect(Date.now() - asked).toBeGreaterThanOrEqual(SLOT_AFTER_MS);
    expect(over.headers.get('retry-after')).toBe('1');
    expect(over.headers.get('retry-after-ms')).toBe('1000');
    expect(over.headers.get('content-type')).toBe('application/json');
    expect(((await over.json()) as { error: string }).error).toMatch(/LONG_POLLS_PER_TENANT/);

    // Another tenant's poll holds as usual, while acme's two are open.
    const other = await poll(zeta.key, zetaFuture);
    expect(other.status).toBe(200);
    expect(await other.json()).toMatchObject({ type: 'try_again' });

    for (const answer of await Promise.all(open)) {
      expect(answer.status).toBe(200);
      expect(await answer.json()).toMatchObject({ type: 'try_again' });
    }
    expect(await holders('acme')).toEqual({});
    const again = await poll(acme.key, acmeFuture);
    expect(again.status).toBe(200);
  });

  it('slots a crashed poll never gave back expire: the next poll takes their place', async () => {
    const now = Date.now();
    for (const token of ['crashed-1', 'crashed-2']) {
      const lease = await acquirePollLease(api.cloud.clients.doc, api.cloud.names.tables.registry, {
        tenant: 'acme',
        token,
        limit: LIMIT,
        until: now - 1,
        now: now - 30_000,
      });
      expect(lease.acquired).toBe(true);
    }
    expect(Object.keys(await holders('acme')).sort()).toEqual(['crashed-1', 'crashed-2']);
    const answer = await poll(acme.key, acmeFuture);
    expect(answer.status).toBe(200);
    expect(await holders('acme')).toEqual({});
  });

  it('a future that is already done answers without a slot, even while every slot is held', async () => {
    const now = Date.now();
    for (const token of ['live-1', 'live-2']) {
      await acquirePollLease(api.cloud.clients.doc, api.cloud.names.tables.registry, {
        tenant: 'acme',
        token,
        limit: LIMIT,
        until: now + 60_000,
        now,
      });
    }
    expect((await poll(acme.key, acmeFuture)).status).toBe(429);
    await completeFuture(acmeFuture, { model_id: 'whatever' }, api.cloud.clients);
    const done = await poll(acme.key, acmeFuture);
    expect(done.status).toBe(200);
    expect(await done.json()).toEqual({ model_id: 'whatever' });
  });

  it('a poll that ends within POLL_SLOT_AFTER_MS takes no slot: it answers even while every slot is held', async () => {
    const busy = await api.tenant('busy');
    const future = await pendingFuture(busy.client);
    const now = Date.now();
    for (const token of ['held-1', 'held-2']) {
      await acquirePollLease(api.cloud.clients.doc, api.cloud.names.tables.registry, {
        tenant: 'busy',
        token,
        limit: LIMIT,
        until: now + 60_000,
        now,
      });
    }
    const answer = poll(busy.key, future);
    await new Promise((resolve) => setTimeout(resolve, 150));
    await completeFuture(future, { model_id: 'soon' }, api.cloud.clients);
    const done = await answer;
    expect(done.status).toBe(200);
    expect(await done.json()).toEqual({ model_id: 'soon' });
    expect(Object.keys(await holders('busy')).sort()).toEqual(['held-1', 'held-2']);
    // A pending future polled with the slots still full waits, then gets the 429.
    const other = await pendingFuture(busy.client);
    const refused = await poll(busy.key, other);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).not.toBeNull();
  });

  it('a short poll writes nothing: a tenant whose polls all end sooner never gets a slot record', async () => {
    const quick = await api.tenant('quick');
    const future = await pendingFuture(quick.client);
    const answer = poll(quick.key, future);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await completeFuture(future, { model_id: 'quick' }, api.cloud.clients);
    expect((await answer).status).toBe(200);
    const record = await api.cloud.clients.doc.send(
      new GetCommand({
        TableName: api.cloud.names.tables.registry,
        Key: { pk: registryKey.polls('quick') },
        ConsistentRead: true,
      }),
    );
    expect(record.Item).toBeUndefined();
    // One that must keep waiting does take a slot (and gives it back when it ends).
    const waiting = poll(quick.key, await pendingFuture(quick.client));
    await waitFor('the long poll holds a slot', async () => Object.keys(await holders('quick')).length === 1);
    expect(await (await waiting).json()).toMatchObject({ type: 'try_again' });
    expect(await holders('quick')).toEqual({});
  });
});

describe('many long polls of one tenant', () => {
  /** Every record of a tenant's polls, by record number (record 0 is `polls#<tenant>`). */
  async function records(tenant: string, count: number): Promise<Record<string, number>[]> {
    return Promise.all(
      Array.from({ length: count }, async (_, record) => {
        const answer = await api.cloud.clients.doc.send(
          new GetCommand({
            TableName: api.cloud.names.tables.registry,
            Key: { pk: registryKey.polls(tenant, record) },
            ConsistentRead: true,
          }),
        );
        return (answer.Item?.holders as Record<string, number> | undefined) ?? {};
      }),
    );
  }

  it('130 polls at once all take a slot, spread over records of at most 64; the 131st is refused; each release frees one', async () => {
    const limit = 130;
    const now = Date.now();
    const acquire = (token: string) =>
      acquirePollLease(api.cloud.clients.doc, api.cloud.names.tables.registry, {
        tenant: 'rl-batch',
        token,
        limit,
        until: now + 60_000,
        now,
      });
    const leases = await Promise.all(Array.from({ length: limit }, (_, i) => acquire(`poll-${i}`)));
    expect(leases.every((lease) => lease.acquired)).toBe(true);
    const held = await records('rl-batch', 4);
    expect(held.map((record) => Object.keys(record).length)).toEqual([44, 43, 43, 0]);
    expect(await acquire('one-more')).toEqual({ acquired: false, retryAfterMs: 1000 });

    const first = leases[0];
    if (!first?.acquired) throw new Error('unreachable');
    await releasePollLease(api.cloud.clients.doc, api.cloud.names.tables.registry, {
      tenant: 'rl-batch',
      token: first.token,
      record: first.record,
    });
    expect(await acquire('one-more')).toMatchObject({ acquired: true, record: first.record });
  });
});
