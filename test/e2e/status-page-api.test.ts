import { SendMessageCommand } from '@aws-sdk/client-sqs';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOperatorKey, revokeApiKey } from '../../shared/repositories/api-keys.js';
import { startDrain } from '../../shared/services/ops/control-store.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';
import { haveChromium, launchChromium, screenshot, statusRowOf } from '../support/browser.js';
import { putModel, putPending } from '../support/ops-fixtures.js';

/**
 * The status page as deployed: served by the api function through the local runtime's HTTP API at
 * `/status`, its data behind an operator key the operator pastes once (kept in sessionStorage).
 */

const KEY_STORAGE = 'tinker-serverless.operator-key';
const canRun = haveChromium();

function storedKey(page: Page): Promise<string | null> {
  return page.evaluate<string | null>(`sessionStorage.getItem(${JSON.stringify(KEY_STORAGE)})`);
}

async function submitKey(page: Page, key: string): Promise<void> {
  await page.fill('#key-input', key);
  await page.click('#key-form button[type="submit"]');
}

describe.skipIf(!canRun)('status page behind the API, in headless Chromium', () => {
  let api: ApiHarness;
  let browser: Browser;
  let page: Page;
  let operatorKey: string;
  let tenantKey: string;
  const problems: string[] = [];
  const foreignRequests: string[] = [];
  const dataRequests: { key: string | undefined; status?: number }[] = [];
  const now = Date.now();

  beforeAll(async () => {
    // A short key cache (API_KEY_CACHE_SECONDS): a revoked key is refused within 2 s on a warm
    // container, and the page, refreshing every 2 s, shows it within about 4.
    api = await startApiHarness({ API_KEY_CACHE_SECONDS: '2' });
    const { cloud } = api;
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
    await putModel(cloud, 'm-fresh', { tenant: 'zeta' });
    await putPending(cloud, 'm-fresh', 'forward_backward', 1, now - 10_000);
    operatorKey = await createOperatorKey(cloud.clients.doc, cloud.names.tables.registry, 'ops@example.com');
    tenantKey = (await api.tenant('acme')).key;

    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 1400, height: 720 } });
    page.on('console', (message) => {
      if (message.type() === 'error') problems.push(message.text());
    });
    page.on('pageerror', (error) => problems.push(error.message));
    const origin = new URL(api.url).origin;
    page.on('request', (request) => {
      if (!request.url().startsWith(origin)) foreignRequests.push(request.url());
      if (new URL(request.url()).pathname === '/status/data') {
        dataRequests.push({ key: request.headers()['x-api-key'] });
      }
    });
    page.on('response', (response) => {
      if (new URL(response.url()).pathname !== '/status/data') return;
      const open = dataRequests.findLast((entry) => entry.status === undefined);
      if (open !== undefined) open.status = response.status();
    });
  });

  afterAll(async () => {
    await browser?.close();
    await api?.stop();
  });

  it('asks for an operator key first and requests no data without one', async () => {
    await page.goto(`${api.url}/status`);
    await page.waitForSelector('#key-panel:not([hidden])');
    expect(await page.locator('#picture').isHidden()).toBe(true);
    expect(await page.locator('#key-problem').isHidden()).toBe(true);
    expect(await page.getAttribute('#key-input', 'type')).toBe('password');
    expect(dataRequests).toEqual([]);
  });

  it('refuses a tenant key, saying why, and does not keep it', async () => {
    await submitKey(page, tenantKey);
    await page.waitForSelector('#key-problem:not([hidden])');
    expect(await page.locator('#key-problem').textContent()).toMatch(
      /^this is a tenant API key: .* needs an operator key .*\(HTTP 403\)$/,
    );
    expect(await page.locator('#picture').isHidden()).toBe(true);
    expect(await storedKey(page)).toBeNull();
    expect(dataRequests.at(-1)).toEqual({ key: tenantKey, status: 403 });
    await screenshot(page, 'status-page-api-key.png', false);
  });

  it('shows the per-model picture with an operator key, kept for this tab across a reload', async () => {
    await submitKey(page, operatorKey);
    await page.waitForSelector('#models tbody tr[data-model-id="m-fresh"]');
    expect(await page.locator('#key-panel').isHidden()).toBe(true);
    expect(await statusRowOf(page, 'm-train')).toMatchObject({
      Model: 'm-train',
      Tenant: 'acme',
      State: 'active',
      Pending: '2',
      'First barrier': 'seq 3 optim_step',
      'Next tick': 'waits: inflight',
    });
    expect((await statusRowOf(page, 'm-fresh')).Tenant).toBe('zeta');
    expect(await storedKey(page)).toBe(operatorKey);
    // Both dead-letter queues are empty: their depths are shown, and no warning.
    expect(await page.locator('#totals').textContent()).toContain(
      'Stream dead letters (stream-dlq)0 messages',
    );
    expect(await page.locator('#dead-letters').isHidden()).toBe(true);

    await page.reload();
    await page.waitForSelector('#models tbody tr[data-model-id="m-train"]');
    expect(await page.locator('#key-panel').isHidden()).toBe(true);
    expect(dataRequests.at(-1)).toEqual({ key: operatorKey, status: 200 });
  });

  it('refreshes by itself when the queues change', async () => {
    const { cloud } = api;
    await putModel(cloud, 'm-late', { tenant: 'late' });
    await putPending(cloud, 'm-late', 'optim_step', 1, Date.now());
    await startDrain(cloud.clients.doc, cloud.names.tables.registry, cloud.env.POOL!, 'ops@test', {
      reason: 'maintenance',
    });
    // A failure record of a stream batch the scheduler gave up on.
    await cloud.clients.sqs.send(
      new SendMessageCommand({ QueueUrl: cloud.names.queueUrls.streamDlq, MessageBody: '{}' }),
    );

    await page.waitForSelector('#models tbody tr[data-model-id="m-late"]', { timeout: 10_000 });
    await page.waitForSelector('#drain-banner:not([hidden])', { timeout: 10_000 });
    expect(await page.locator('#drain-banner').textContent()).toMatch(/\(by ops@test: maintenance\)/);
    await page.waitForSelector('#dead-letters:not([hidden])', { timeout: 10_000 });
    const warnings = await page.locator('#dead-letter-warnings p').allTextContents();
    expect(warnings).toEqual([
      expect.stringMatching(
        /^stream-dlq holds 1 message: stream batches the scheduler gave up on .*within 24 h/,
      ),
    ]);
    expect(await page.locator('#dead-letters').getAttribute('role')).toBe('alert');

    console.log(`status page (through the API) screenshot: ${await screenshot(page, 'status-page-api.png')}`);
  });

  it('is not shared with a new tab, and is forgotten on request', async () => {
    const other = await browser.newPage();
    await other.goto(`${api.url}/status`);
    await other.waitForSelector('#key-panel:not([hidden])');
    await other.close();

    await page.click('#forget-key');
    await page.waitForSelector('#key-panel:not([hidden])');
    expect(await page.locator('#picture').isHidden()).toBe(true);
    expect(await storedKey(page)).toBeNull();
  });

  it('stops showing data once the key is revoked, and says so', async () => {
    const shortLived = await createOperatorKey(
      api.cloud.clients.doc,
      api.cloud.names.tables.registry,
      'leaver',
    );
    await submitKey(page, shortLived);
    await page.waitForSelector('#picture:not([hidden])');
    expect(await revokeApiKey(api.cloud.clients.doc, api.cloud.names.tables.registry, shortLived)).toBe(true);
    await page.waitForSelector('#key-problem:not([hidden])', { timeout: 10_000 });
    expect(await page.locator('#key-problem').textContent()).toBe(
      'invalid or revoked operator key (HTTP 401)',
    );
    expect(await page.locator('#picture').isHidden()).toBe(true);
    expect(await storedKey(page)).toBeNull();
  });

  it('loads nothing from elsewhere and logs no errors but the refusals it was sent', () => {
    expect(foreignRequests).toEqual([]);
    // Chromium reports every 4xx answer to a fetch on the console; those two are the refusals above.
    const unexpected = problems.filter(
      (text) => !/^Failed to load resource: the server responded with a status of 40[13]/.test(text),
    );
    expect(unexpected).toEqual([]);
    expect(problems.length).toBeLessThanOrEqual(2);
  });
});
