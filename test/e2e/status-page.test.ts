import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StatusPageServer, startStatusPage } from '../../local/runtime/status-page/server.js';
import { readConfig } from '../../shared/base/config.js';
import { startDrain } from '../../shared/services/ops/control-store.js';
import { readPoolStatus } from '../../shared/services/ops/status-reader.js';
import { haveChromium, launchChromium, screenshot, statusRowOf } from '../support/browser.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { putModel, putPending } from '../support/ops-fixtures.js';

const canRun = haveChromium();

describe.skipIf(!canRun)('status page in headless Chromium', () => {
  let cloud: TestCloud;
  let server: StatusPageServer;
  let browser: Browser;
  let page: Page;
  const problems: string[] = [];
  const foreignRequests: string[] = [];
  const now = Date.now();

  beforeAll(async () => {
    cloud = await setupTestCloud();
    cloud.applyEnv();
    await putModel(cloud, 'm-train', {
      epoch: 3,
      applied_through: 1,
      planned_through: 2,
      inflight: 'm-train@3',
      lease_until: now + 50_000,
      last_completed_at: now - 30_000,
    });
    await putPending(cloud, 'm-train', 'forward_backward', 2, now - 60_000);
    await putPending(cloud, 'm-train', 'optim_step', 3, now - 59_000);
    await putPending(cloud, 'm-train', 'forward_backward', 4, now - 58_000);
    await putModel(cloud, 'm-fresh', { tenant: 'zeta' });
    await putPending(cloud, 'm-fresh', 'forward_backward', 1, now - 10_000);
    await putPending(cloud, 'm-fresh', 'load_weights', 2, now - 9_000);

    server = await startStatusPage({
      readStatus: () => readPoolStatus({ clients: cloud.clients, config: readConfig(cloud.env) }),
    });
    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 1400, height: 720 } });
    page.on('console', (message) => {
      if (message.type() === 'error') problems.push(message.text());
    });
    page.on('pageerror', (error) => problems.push(error.message));
    const origin = new URL(server.url).origin;
    page.on('request', (request) => {
      if (!request.url().startsWith(origin)) foreignRequests.push(request.url());
    });
  });

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
  });

  it('shows the per-model queue picture', async () => {
    await page.goto(server.url);
    await page.waitForSelector('#models tbody tr[data-model-id="m-fresh"]');
    expect(await page.locator('#models tbody tr').count()).toBe(2);

    const train = await statusRowOf(page, 'm-train');
    expect(train).toMatchObject({
      Model: 'm-train',
      Tenant: 'acme',
      State: 'active',
      Pending: '3',
      'First barrier': 'seq 3 optim_step',
      'Next tick': 'waits: inflight',
    });
    expect(train['In flight (lease age)']).toMatch(
      /^m-train@3 \(1 step; lease \d+\.\d s old, \d+\.\d s left\)$/,
    );
    expect(train['Last completion']).toMatch(/s ago$/);
    expect(train['Oldest pending']).toMatch(/^1 m \d\d s$/);

    const fresh = await statusRowOf(page, 'm-fresh');
    expect(fresh).toMatchObject({
      Tenant: 'zeta',
      Pending: '2',
      'First barrier': 'seq 2 load_weights',
      'Next tick': 'seqs 1-2 (stops: end_of_run)',
      'In flight (lease age)': '-',
    });
    expect(await page.locator('#totals').textContent()).toContain('Pending requests5 (0 samples)');
    expect(await page.locator('#drain-banner').isHidden()).toBe(true);
  });

  it('is built to be read by everyone: labelled table, headers with scope, a language', async () => {
    expect(await page.getAttribute('html', 'lang')).toBe('en');
    expect(await page.locator('#models caption').textContent()).toContain('Pending work per model');
    expect(await page.locator('#models thead th[scope="col"]').count()).toBe(9);
    expect(await page.locator('#models tbody th[scope="row"]').count()).toBe(2);
    expect(await page.locator('h1').textContent()).toBe('Queue status');
  });

  it('refreshes by itself when the queues change', async () => {
    await putPending(cloud, 'm-fresh', 'forward_backward', 3, Date.now());
    await putModel(cloud, 'm-late', { tenant: 'late' });
    await putPending(cloud, 'm-late', 'optim_step', 1, Date.now());
    await startDrain(cloud.clients.doc, cloud.names.tables.registry, cloud.env.POOL!, 'ops@test', {
      reason: 'maintenance',
    });

    await page.waitForSelector('#models tbody tr[data-model-id="m-late"]', { timeout: 10_000 });
    expect((await statusRowOf(page, 'm-fresh')).Pending).toBe('3');
    expect(await statusRowOf(page, 'm-late')).toMatchObject({
      Tenant: 'late',
      'First barrier': 'seq 1 optim_step',
    });
    await page.waitForSelector('#drain-banner:not([hidden])', { timeout: 10_000 });
    expect(await page.locator('#drain-banner').textContent()).toMatch(
      /^Draining since .* \(by ops@test: maintenance\)/,
    );

    console.log(`status page screenshot: ${await screenshot(page, 'status-page.png')}`);
  });

  it('loads nothing from elsewhere and logs no errors (CSP violations included)', () => {
    expect(foreignRequests).toEqual([]);
    expect(problems).toEqual([]);
    expect(foreignRequests.length + problems.length).toBe(0);
  });
});
