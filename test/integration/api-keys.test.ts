import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { printDevelopmentApiKey, printOperatorKey } from '../../local/runtime/on-ready.js';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { createApiKey, createOperatorKey, revokeApiKey } from '../../shared/repositories/api-keys.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

let api: ApiHarness;
/**
 * The api's key cache (API_KEY_CACHE_SECONDS) set short here, so a revocation is seen as a user
 * sees it on a warm container: refused within the TTL, not at once.
 */
const CACHE_SECONDS = 1;
const CACHE_MS = CACHE_SECONDS * 1000;

beforeAll(async () => {
  api = await startApiHarness({ API_KEY_CACHE_SECONDS: String(CACHE_SECONDS) });
});

/**
 * Calls `path` with the key every 50 ms until it answers 401; returns the ms from `since` to that
 * answer's request, and fails if it never comes by the cache's TTL (plus a margin for the calls).
 */
async function refusedAfter(
  client: TinkerClient,
  method: string,
  path: string,
  since: number,
): Promise<number> {
  for (;;) {
    const sent = Date.now();
    const { status } = await client.raw(method, path, method === 'GET' ? undefined : {});
    if (status === 401) return sent - since;
    expect(sent - since, `still ${status}`).toBeLessThan(CACHE_MS + 500);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

afterAll(async () => {
  await api?.stop();
});

/** `npm run keys -- ...` (the operator CLI's `keys`) as a developer runs it, pointed at the test cloud. */
async function keysCli(...args: string[]): Promise<{ stdout: string; code: number }> {
  try {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'bin/cli.ts', 'keys', ...args], {
      cwd: ROOT,
      env: { ...process.env, ...api.cloud.env },
    });
    return { stdout, code: 0 };
  } catch (error) {
    const failed = error as { stdout?: string; code?: number };
    return { stdout: failed.stdout ?? '', code: failed.code ?? -1 };
  }
}

describe('the keys command', () => {
  it('creates a tml- key that authenticates as its tenant, and revokes it', async () => {
    const created = await keysCli('create', '--tenant', 'cli-tenant');
    expect(created.code).toBe(0);
    const key = created.stdout.trim();
    expect(key).toMatch(/^tml-[A-Za-z0-9_-]{43}$/);
    const client = api.client(key);
    const { session_id } = await client.createSession();
    expect(typeof session_id).toBe('string');

    const revoking = Date.now();
    expect(await keysCli('revoke', key)).toEqual({ stdout: 'revoked\n', code: 0 });
    // Refused within API_KEY_CACHE_SECONDS of the revocation, as on a warm container.
    await refusedAfter(client, 'POST', '/api/v1/create_session', revoking);
    expect((await keysCli('revoke', 'tml-notakeynotakeynotakeynotakey')).code).toBe(1);
  }, 60_000);

  it('creates a tso- operator key, which the Tinker API refuses, and revokes it', async () => {
    const created = await keysCli('create', '--operator', 'ops@example.com');
    expect(created.code).toBe(0);
    const key = created.stdout.trim();
    expect(key).toMatch(/^tso-[A-Za-z0-9_-]{43}$/);
    expect((await api.client(key).raw('POST', '/api/v1/create_session', {})).status).toBe(403);
    const revoking = Date.now();
    expect(await keysCli('revoke', key)).toEqual({ stdout: 'revoked\n', code: 0 });
    await refusedAfter(api.client(key), 'POST', '/api/v1/create_session', revoking);
  }, 60_000);

  it('refuses a bad tenant name and a missing one', async () => {
    expect((await keysCli('create', '--tenant', 'bad name')).code).toBe(1);
    expect((await keysCli('create')).code).toBe(2);
  }, 60_000);

  it('the npm start hook prints a working development key on a line of its own', async () => {
    const lines = await printDevelopmentApiKey({
      apiUrl: api.url,
      env: api.cloud.env,
      resources: api.cloud.names,
      clients: api.cloud.clients,
    });
    const key = lines.at(-1)!;
    expect(key).toMatch(/^tml-/);
    expect((await api.client(key).raw('POST', '/api/v1/create_session', {})).status).toBe(200);
  });

  it("the npm start hook prints the API's status page and an operator key that reads its data", async () => {
    const context = {
      apiUrl: api.url,
      env: api.cloud.env,
      resources: api.cloud.names,
      clients: api.cloud.clients,
    };
    const lines = await printOperatorKey(context);
    expect(lines.at(-2)).toBe(`${api.url}/status`);
    const key = lines.at(-1)!;
    expect(key).toMatch(/^tso-/);
    expect((await api.client(key).raw('GET', '/status/data')).status).toBe(200);
    expect(
      (await api.client('tso-notakeynotakeynotakeynotakeynotakeynotakey').raw('GET', '/status/data')).status,
    ).toBe(401);
  });
});

describe('revocation on a warm container (API_KEY_CACHE_SECONDS)', () => {
  it('a cached tenant key keeps working after its revocation, then is refused once the TTL has passed', async () => {
    const key = await createApiKey(api.cloud.clients.doc, api.cloud.names.tables.registry, 'cached');
    const client = api.client(key);
    const looked = Date.now();
    expect((await client.raw('POST', '/api/v1/create_session', {})).status).toBe(200);
    expect(await revokeApiKey(api.cloud.clients.doc, api.cloud.names.tables.registry, key)).toBe(true);
    // Served from the cache: the registry already says revoked.
    expect((await client.raw('POST', '/api/v1/create_session', {})).status).toBe(200);
    // Used every 50 ms from then on, it is still refused within the TTL of the lookup that cached it:
    // hits never extend an entry.
    const after = await refusedAfter(client, 'POST', '/api/v1/create_session', looked);
    // Not before the TTL (less what a request takes to reach the api), not much after it.
    expect(after).toBeGreaterThan(CACHE_MS - 300);
    expect(after).toBeLessThan(CACHE_MS + 500);
    // And stays refused: a revoked key is never cached again.
    for (let i = 0; i < 3; i++) {
      expect((await client.raw('POST', '/api/v1/create_session', {})).status).toBe(401);
    }
  });

  it('a cached operator key: the status data keeps answering after revocation, then 401 within the TTL', async () => {
    const key = await createOperatorKey(api.cloud.clients.doc, api.cloud.names.tables.registry, 'leaver');
    const client = api.client(key);
    const looked = Date.now();
    expect((await client.raw('GET', '/status/data')).status).toBe(200);
    expect(await revokeApiKey(api.cloud.clients.doc, api.cloud.names.tables.registry, key)).toBe(true);
    expect((await client.raw('GET', '/status/data')).status).toBe(200);
    expect(await refusedAfter(client, 'GET', '/status/data', looked)).toBeLessThan(CACHE_MS + 500);
  });

  it('a key revoked before this container looked it up is refused at once', async () => {
    const key = await createApiKey(api.cloud.clients.doc, api.cloud.names.tables.registry, 'never-used');
    expect(await revokeApiKey(api.cloud.clients.doc, api.cloud.names.tables.registry, key)).toBe(true);
    expect((await api.client(key).raw('POST', '/api/v1/create_session', {})).status).toBe(401);
  });
});
