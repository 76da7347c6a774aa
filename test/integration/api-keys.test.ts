import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { printDevelopmentApiKey, printOperatorKey } from '../../local/on-ready.js';
import { type ApiHarness, startApiHarness } from './api-harness.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

let api: ApiHarness;

beforeAll(async () => {
  api = await startApiHarness();
});

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

    expect(await keysCli('revoke', key)).toEqual({ stdout: 'revoked\n', code: 0 });
    expect((await client.raw('POST', '/api/v1/create_session', {})).status).toBe(401);
    expect((await keysCli('revoke', 'tml-notakeynotakeynotakeynotakey')).code).toBe(1);
  }, 60_000);

  it('creates a tso- operator key, which the Tinker API refuses, and revokes it', async () => {
    const created = await keysCli('create', '--operator', 'ops@example.com');
    expect(created.code).toBe(0);
    const key = created.stdout.trim();
    expect(key).toMatch(/^tso-[A-Za-z0-9_-]{43}$/);
    expect((await api.client(key).raw('POST', '/api/v1/create_session', {})).status).toBe(403);
    expect(await keysCli('revoke', key)).toEqual({ stdout: 'revoked\n', code: 0 });
    expect((await api.client(key).raw('POST', '/api/v1/create_session', {})).status).toBe(401);
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
