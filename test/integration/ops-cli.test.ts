import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../bin/cli.js';
import { operatorForKey, tenantForApiKey } from '../../shared/repositories/api-keys.js';
import { readCutRequest, readDrain } from '../../shared/services/ops/control-store.js';
import { cutRequestedSince } from '../../shared/services/ops/controls.js';
import type { PoolQueueStatus } from '../../shared/services/ops/queue-status.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { putModel, putPending } from '../support/ops-fixtures.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const LEASE_MS = 60_000;

let cloud: TestCloud;
let dir: string;
let envFile: string;

/** Runs the CLI in process against the test cloud, as `npx tinker-serverless ... --env-file FILE`. */
async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runCli([...args, '--env-file', envFile], {
    stdout: (text) => (stdout += text),
    stderr: (text) => (stderr += text),
    env: {},
  });
  return { code, stdout, stderr };
}

async function status(...args: string[]): Promise<PoolQueueStatus> {
  const answer = await cli('status', '--json', ...args);
  expect(answer).toMatchObject({ code: 0, stderr: '' });
  return JSON.parse(answer.stdout) as PoolQueueStatus;
}

beforeAll(async () => {
  cloud = await setupTestCloud();
  cloud.applyEnv();
  dir = mkdtempSync(path.join(tmpdir(), 'tinker-ops-'));
  envFile = path.join(dir, 'env.json');
  writeFileSync(envFile, JSON.stringify(cloud.env));
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('status', () => {
  const now = Date.now();
  beforeAll(async () => {
    // m-busy: 1-2 applied, 3-4 in flight (lease granted 15 s ago), then fb 5, optim 6, fb 7 waiting.
    await putModel(cloud, 'm-busy', {
      epoch: 4,
      applied_through: 2,
      planned_through: 4,
      inflight: 'm-busy@4',
      lease_until: now + LEASE_MS - 15_000,
      last_completed_at: now - 40_000,
    });
    const busy: [string, number][] = [
      ['forward_backward', 3],
      ['forward_backward', 4],
      ['forward_backward', 5],
      ['optim_step', 6],
      ['forward_backward', 7],
    ];
    for (const [index, [type, seq]] of busy.entries()) {
      await putPending(cloud, 'm-busy', type as 'forward_backward', seq, now - 90_000 + index);
    }
    // m-idle: nothing in flight; fb 1, optim 2, forward 3 (the next tick stops at the barrier).
    await putModel(cloud, 'm-idle', { tenant: 'zeta' });
    await putPending(cloud, 'm-idle', 'forward_backward', 1, now - 20_000);
    await putPending(cloud, 'm-idle', 'optim_step', 2, now - 19_000);
    await putPending(cloud, 'm-idle', 'forward', 3, now - 18_000);
    await putPending(cloud, 'base:tiny', 'sample', undefined, now - 5_000);
  });

  it('shows per model the pending count, first barrier, in-flight work item and lease age', async () => {
    const before = Date.now();
    const picture = await status();
    const elapsed = Date.now() - now;
    expect(picture.pool).toBe(cloud.env.POOL);
    expect(picture.models.map((model) => model.model_id)).toEqual(['m-busy', 'm-idle', 'base:tiny']);
    const [busy, idle, base] = picture.models;

    expect(busy).toMatchObject({
      tenant: 'acme',
      pending: 5,
      in_flight_steps: 2,
      first_barrier: { seq: 6, request_type: 'optim_step' },
      next_tick: { steps: 0, waits_for: 'inflight' },
      in_flight: { work_item: 'm-busy@4', epoch: 4, lease_expired: false },
      last_completed_at: now - 40_000,
    });
    // Lease granted 15 s before `now`; the picture was taken a little later.
    expect(busy!.in_flight!.lease_age_ms).toBeGreaterThanOrEqual(15_000);
    expect(busy!.in_flight!.lease_age_ms).toBeLessThanOrEqual(15_000 + elapsed + 1_000);
    expect(busy!.oldest_pending_age_ms).toBeGreaterThanOrEqual(90_000);
    expect(busy!.oldest_pending_age_ms).toBeLessThan(90_000 + (Date.now() - before) + elapsed + 1_000);

    expect(idle).toMatchObject({
      tenant: 'zeta',
      pending: 3,
      in_flight_steps: 0,
      first_barrier: { seq: 2, request_type: 'optim_step' },
      next_tick: { steps: 2, first_seq: 1, last_seq: 2, stopped_by: 'barrier' },
    });
    expect(idle).not.toHaveProperty('in_flight');
    expect(base).toMatchObject({ state: 'base', pending: 1, pending_samples: 1, next_tick: { samples: 1 } });

    expect(picture.totals).toMatchObject({
      models: 3,
      pending: 9,
      pending_samples: 1,
      in_flight_steps: 2,
      models_in_flight: 1,
      leases_expired: 0,
      next_tick_steps: 2,
      next_tick_samples: 1,
    });
    expect(picture.totals.oldest_pending_age_ms).toBe(busy!.oldest_pending_age_ms);
    expect(picture.work_queue).toEqual({ visible: 0, in_flight: 0 });
    expect(picture.dead_letters).toEqual({
      work_dlq: { visible: 0, in_flight: 0 },
      stream_dlq: { visible: 0, in_flight: 0 },
    });
  });

  it('prints the same picture as a table for people', async () => {
    const answer = await cli('status');
    expect(answer.code).toBe(0);
    const line = answer.stdout.split('\n').find((text) => text.startsWith('m-busy '));
    expect(line).toMatch(
      /acme\s+active\s+5\s+seq 6 optim_step\s+waits: inflight\s+m-busy@4 \(2 steps; lease \d+\.\d s old, \d+\.\d s left\)/,
    );
    expect(answer.stdout).toMatch(/totals: 3 models, 9 pending \(1 sample\)/);
    expect(answer.stdout).toContain('\ndead letters: work-dlq 0 messages, stream-dlq 0 messages\n');
  });

  it('reads another pool with --pool, and an empty pool says so', async () => {
    const other = await status('--pool', 'elsewhere');
    expect(other).toMatchObject({ pool: 'elsewhere', models: [], totals: { models: 0, pending: 0 } });
    expect((await cli('status', '--pool', 'elsewhere')).stdout).toContain('no pending requests');
  });

  it('runs as the package bin (npx tinker-serverless), with the same answer', () => {
    const run = spawnSync(path.join(ROOT, 'bin/cli.ts'), ['status', '--json', '--env-file', envFile], {
      cwd: ROOT,
      encoding: 'utf8',
      env: { PATH: process.env.PATH },
      timeout: 60_000,
    });
    expect(run.status, run.stderr).toBe(0);
    const picture = JSON.parse(run.stdout) as PoolQueueStatus;
    expect(picture.models.map((model) => [model.model_id, model.pending])).toEqual([
      ['m-busy', 5],
      ['m-idle', 3],
      ['base:tiny', 1],
    ]);
  });
});

describe('keys', () => {
  it('creates a key that authenticates its tenant, and revokes it', async () => {
    const created = await cli('keys', 'create', '--tenant', 'ops-team');
    expect(created.code).toBe(0);
    const key = created.stdout.trim();
    expect(key).toMatch(/^tml-/);
    expect(await tenantForApiKey(cloud.clients.doc, cloud.names.tables.registry, key)).toBe('ops-team');

    expect(await cli('keys', 'revoke', key)).toMatchObject({ code: 0, stdout: 'revoked\n' });
    expect(await tenantForApiKey(cloud.clients.doc, cloud.names.tables.registry, key)).toBeUndefined();
    expect(await cli('keys', 'revoke', 'tml-not-a-key-that-exists-anywhere')).toMatchObject({
      code: 1,
      stdout: 'no such key\n',
    });
  });

  it('creates an operator key, which is no tenant key, and revokes it', async () => {
    const created = await cli('keys', 'create', '--operator', 'alice@example.com', '--json');
    expect(created.code).toBe(0);
    const { operator, key } = JSON.parse(created.stdout) as { operator: string; key: string };
    expect(operator).toBe('alice@example.com');
    expect(key).toMatch(/^tso-[A-Za-z0-9_-]{43}$/);
    expect(await operatorForKey(cloud.clients.doc, cloud.names.tables.registry, key)).toBe(
      'alice@example.com',
    );
    expect(await tenantForApiKey(cloud.clients.doc, cloud.names.tables.registry, key)).toBeUndefined();

    expect(await cli('keys', 'revoke', key)).toMatchObject({ code: 0, stdout: 'revoked\n' });
    expect(await operatorForKey(cloud.clients.doc, cloud.names.tables.registry, key)).toBeUndefined();
    expect((await cli('keys', 'create', '--operator', 'no spaces')).code).toBe(1);
  });

  it('answers a malformed invocation with usage and exit code 2', async () => {
    const answer = await cli('keys', 'create');
    expect(answer.code).toBe(2);
    expect(answer.stderr).toMatch(/keys create --tenant NAME/);
    expect(answer.stderr).toMatch(/keys create --operator NAME/);
    // One owner per key: a tenant's or an operator's, never both.
    expect((await cli('keys', 'create', '--tenant', 't', '--operator', 'o')).code).toBe(2);
    expect((await cli('keys', 'create', '--tenant', 'bad tenant!')).code).toBe(1);
  });

  it('documents the operator key in its help', async () => {
    let help = '';
    expect(await runCli(['--help'], { stdout: (text) => (help += text), stderr: () => {}, env: {} })).toBe(0);
    expect(help).toContain('keys create --operator NAME');
    expect(help).toContain('<API URL>/status');
  });
});

describe('cut', () => {
  it('records a cut request that workers started before it must honour', async () => {
    const before = Date.now();
    const answer = await cli('cut', '--json', '--pool', 'gpu-a');
    expect(answer.code).toBe(0);
    const record = await readCutRequest(cloud.clients.doc, cloud.names.tables.registry, 'gpu-a', true);
    expect(record).toEqual(JSON.parse(answer.stdout));
    expect(record!.requested_at).toBeGreaterThanOrEqual(before);
    expect(cutRequestedSince(record, before - 1)).toBe(true);
    expect(cutRequestedSince(record, Date.now())).toBe(false);
    expect(record!.ttl).toBeGreaterThan(Date.now() / 1000);
    expect((await status('--pool', 'gpu-a')).cut_requested_at).toBe(record!.requested_at);
    expect(
      await readCutRequest(cloud.clients.doc, cloud.names.tables.registry, 'gpu-b', true),
    ).toBeUndefined();
  });

  it('refuses a pool name that cannot be a registry key', async () => {
    const answer = await cli('cut', '--pool', 'no#hash');
    expect(answer.code).toBe(1);
    expect(answer.stderr).toContain('pool must be');
  });
});

describe('drain', () => {
  it('marks a pool draining until drain --off, keeping when it began', async () => {
    const first = await cli('drain', '--pool', 'gpu-d', '--reason', 'driver upgrade', '--json');
    expect(first.code).toBe(0);
    const record = await readDrain(cloud.clients.doc, cloud.names.tables.registry, 'gpu-d');
    expect(record).toMatchObject({ pk: 'drain#gpu-d', pool: 'gpu-d', reason: 'driver upgrade' });
    expect((await status('--pool', 'gpu-d')).draining).toEqual({
      since: record!.since,
      requested_by: record!.requested_by,
      reason: 'driver upgrade',
    });
    expect((await cli('status', '--pool', 'gpu-d')).stdout).toContain('DRAINING since');

    // Draining again keeps the original start.
    const again = JSON.parse((await cli('drain', '--pool', 'gpu-d', '--json')).stdout) as { since: number };
    expect(again.since).toBe(record!.since);
    // Other pools are unaffected.
    expect(await readDrain(cloud.clients.doc, cloud.names.tables.registry, cloud.env.POOL!)).toBeUndefined();

    expect(await cli('drain', '--off', '--pool', 'gpu-d')).toMatchObject({
      code: 0,
      stdout: 'pool gpu-d dispatches again\n',
    });
    expect(await readDrain(cloud.clients.doc, cloud.names.tables.registry, 'gpu-d')).toBeUndefined();
    expect((await status('--pool', 'gpu-d')).draining).toBeUndefined();
    expect((await cli('drain', '--off', '--pool', 'gpu-d')).stdout).toBe('pool gpu-d was not draining\n');
  });
});
