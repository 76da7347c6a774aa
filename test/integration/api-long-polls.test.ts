import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { registryKey } from '../../shared/domain/records.js';
import { acquirePollLease } from '../../shared/repositories/quotas.js';
import { completeFuture } from '../support/futures.js';
import { waitFor } from '../support/wait.js';
import { type ApiHarness, startApiHarness } from './api-harness.js';

/**
 * Concurrent long polls per tenant over real HTTP on the local cloud (no worker runs, so futures
 * stay pending and every poll holds for LONG_POLL_SECONDS): over LONG_POLLS_PER_TENANT open at
 * once, retrieve_future answers 429 with Retry-After; other tenants are unaffected; slots come back
 * when a poll ends, and a slot a crashed poll never gave back expires.
 */

const LIMIT = 2;
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
  api = await startApiHarness({ LONG_POLLS_PER_TENANT: String(LIMIT), LONG_POLL_SECONDS: '2' });
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

    const over = await poll(acme.key, acmeFuture);
    expect(over.status).toBe(429);
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
});
