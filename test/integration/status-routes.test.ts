import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readConfig } from '../../shared/base/config.js';
import { createOperatorKey, revokeApiKey } from '../../shared/repositories/api-keys.js';
import type { PoolQueueStatus } from '../../shared/services/ops/queue-status.js';
import { readPoolStatus } from '../../shared/services/ops/status-reader.js';
import type { StatusDisplay } from '../../shared/services/status-page/display.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';
import { putModel, putPending } from '../support/ops-fixtures.js';

/**
 * The status page behind the API, through the local runtime's HTTP API on the local cloud: the page
 * for anyone, its data for operator keys only, with errors that say what is wrong.
 */

let api: ApiHarness;
let operatorKey: string;
let tenantKey: string;
const now = Date.now();

type Picture = PoolQueueStatus & { display: StatusDisplay };

function get(path: string, key?: string, method = 'GET'): Promise<Response> {
  return fetch(`${api.url}${path}`, { method, headers: key === undefined ? {} : { 'X-API-Key': key } });
}

/** The picture without what depends on the instant it was read (ages, at any depth). */
function timeless(picture: PoolQueueStatus): unknown {
  const { generated_at: _, ...rest } = picture;
  return JSON.parse(
    JSON.stringify(rest, (key, value: unknown) => (/_age_ms$|_expires_in_ms$/.test(key) ? undefined : value)),
  );
}

beforeAll(async () => {
  // The key cache off, so a revocation is seen at once; its delay on a warm container is checked in
  // api-keys.test.ts.
  api = await startApiHarness({ API_KEY_CACHE_SECONDS: '0' });
  const { cloud } = api;
  await putModel(cloud, 'm-busy', {
    epoch: 2,
    applied_through: 1,
    planned_through: 2,
    inflight: 'm-busy@2',
    lease_until: now + 45_000,
    last_completed_at: now - 20_000,
  });
  await putPending(cloud, 'm-busy', 'forward_backward', 2, now - 30_000);
  await putPending(cloud, 'm-busy', 'optim_step', 3, now - 29_000);
  await putModel(cloud, 'm-other', { tenant: 'zeta' });
  await putPending(cloud, 'm-other', 'forward_backward', 1, now - 5_000);
  // One message waiting on the work queue: the data shows the queue's depth too. One on each
  // dead-letter queue (two on stream-dlq): the data shows their depths and says what they mean.
  const send = (QueueUrl: string, MessageBody: string) =>
    cloud.clients.sqs.send(new SendMessageCommand({ QueueUrl, MessageBody }));
  await send(cloud.names.queueUrls.work, '{}');
  await send(cloud.names.queueUrls.workDlq, '{"key":"work/w-1"}');
  for (const shard of ['shard-1', 'shard-2']) {
    await send(cloud.names.queueUrls.streamDlq, JSON.stringify({ DDBStreamBatchInfo: { shardId: shard } }));
  }
  operatorKey = await createOperatorKey(cloud.clients.doc, cloud.names.tables.registry, 'ops@example.com');
  tenantKey = (await api.tenant('acme')).key;
});

afterAll(async () => {
  await api?.stop();
});

describe('GET /status (the page)', () => {
  it('is served without a key, holds no data and asks the browser for an operator key', async () => {
    const page = await get('/status');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(page.headers.get('content-security-policy')).toContain("default-src 'none'");
    const html = await page.text();
    expect(html).toContain('<body data-auth="operator-key">');
    expect(html).not.toContain('m-busy');
    expect(html).not.toContain('zeta');

    for (const [path, type] of [
      ['/status/app.js', 'text/javascript; charset=utf-8'],
      ['/status/app.css', 'text/css; charset=utf-8'],
    ] as const) {
      const asset = await get(path);
      expect(asset.status, path).toBe(200);
      expect(asset.headers.get('content-type')).toBe(type);
    }
    const slash = await fetch(`${api.url}/status/`, { redirect: 'manual' });
    expect(slash.status).toBe(308);
    expect(new URL(slash.headers.get('location')!, `${api.url}/status/`).href).toBe(`${api.url}/status`);
  });
});

describe('GET /status/data', () => {
  it('answers an operator key with the same per-model picture the CLI prints', async () => {
    const answer = await get('/status/data', operatorKey);
    expect(answer.status).toBe(200);
    expect(answer.headers.get('cache-control')).toBe('no-store');
    expect(answer.headers.get('content-type')).toBe('application/json');
    const picture = (await answer.json()) as Picture;

    // `tinker-serverless status --json` prints readPoolStatus() for the same environment.
    const cli = await readPoolStatus({ clients: api.cloud.clients, config: readConfig(api.cloud.env) });
    const { display: _, ...raw } = picture;
    expect(timeless(raw)).toEqual(timeless(cli));
    expect(picture.models.map((model) => [model.model_id, model.tenant, model.pending])).toEqual([
      ['m-busy', 'acme', 2],
      ['m-other', 'zeta', 1],
    ]);
    expect(picture.models[0]!.in_flight).toMatchObject({ work_item: 'm-busy@2', lease_expired: false });
    expect(picture.work_queue).toEqual({ visible: 1, in_flight: 0 });
    expect(picture.display.model_ids).toEqual(['m-busy', 'm-other']);
    expect(picture.display.rows[0]?.slice(0, 4)).toEqual(['m-busy', 'acme', 'active', '2']);
  });

  it('answers no key with 401, naming the header and how to get an operator key', async () => {
    const answer = await get('/status/data');
    expect(answer.status).toBe(401);
    expect(answer.headers.get('www-authenticate')).toBe('ApiKey header="X-API-Key"');
    const { error } = (await answer.json()) as { error: string };
    expect(error).toMatch(/^missing X-API-Key header/);
    expect(error).toContain('keys create --operator NAME');
  });

  it('refuses a valid tenant key with 403: it authenticates, but the picture spans every tenant', async () => {
    const answer = await get('/status/data', tenantKey);
    expect(answer.status).toBe(403);
    expect(answer.headers.get('www-authenticate')).toBeNull();
    expect(((await answer.json()) as { error: string }).error).toMatch(
      /^this is a tenant API key: .* needs an operator key/,
    );
  });

  it('answers 401 to malformed, unknown and revoked keys, each saying which', async () => {
    const errorOf = async (key: string) => {
      const answer = await get('/status/data', key);
      expect(answer.status, key).toBe(401);
      return ((await answer.json()) as { error: string }).error;
    };
    expect(await errorOf('hunter2')).toMatch(/^X-API-Key is not an API key/);
    expect(await errorOf(`tso-${'A'.repeat(43)}`)).toBe('invalid or revoked operator key');
    expect(await errorOf(`tml-${'A'.repeat(43)}`)).toMatch(/^invalid or revoked API key/);

    const revoked = await createOperatorKey(api.cloud.clients.doc, api.cloud.names.tables.registry, 'leaver');
    expect((await get('/status/data', revoked)).status).toBe(200);
    expect(await revokeApiKey(api.cloud.clients.doc, api.cloud.names.tables.registry, revoked)).toBe(true);
    expect(await errorOf(revoked)).toBe('invalid or revoked operator key');
  });

  it('allows GET (and HEAD) only, and knows no other path under /status', async () => {
    const post = await get('/status/data', operatorKey, 'POST');
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD');
    expect((await get('/status/nothing-here', operatorKey)).status).toBe(404);
  });
});

describe('dead-letter queues in the picture', () => {
  it('reads both depths through the api function, which is granted them, and warns about each', async () => {
    const answer = await get('/status/data', operatorKey);
    expect(answer.status).toBe(200);
    const picture = (await answer.json()) as Picture;
    expect(picture.dead_letters).toEqual({
      work_dlq: { visible: 1, in_flight: 0 },
      stream_dlq: { visible: 2, in_flight: 0 },
    });
    expect(picture.display.totals).toContainEqual(['Work dead letters (work-dlq)', '1 message']);
    expect(picture.display.totals).toContainEqual(['Stream dead letters (stream-dlq)', '2 messages']);
    expect(picture.display.dead_letter_warnings).toEqual([
      expect.stringMatching(/^work-dlq holds 1 message: work items that failed 5 deliveries/),
      expect.stringMatching(/^stream-dlq holds 2 messages: stream batches the scheduler gave up on/),
    ]);
    // The CLI reads the same depths (readPoolStatus with the local cloud's environment).
    const cli = await readPoolStatus({ clients: api.cloud.clients, config: readConfig(api.cloud.env) });
    expect(cli.dead_letters).toEqual(picture.dead_letters);
  });

  it('fails a reader without a dead-letter queue URL, naming the variable', async () => {
    const { WORK_DLQ_URL: _, ...withoutWorkDlq } = api.cloud.env;
    await expect(
      readPoolStatus({ clients: api.cloud.clients, config: readConfig(withoutWorkDlq) }),
    ).rejects.toThrow(/Missing required environment variable WORK_DLQ_URL/);
  });
});

describe('keys of one kind on the routes of the other', () => {
  it('refuses an operator key on the Tinker API with 403, a revoked one with 401', async () => {
    const withOperatorKey = await api.client(operatorKey).raw('POST', '/api/v1/create_session', {});
    expect(withOperatorKey.status).toBe(403);
    expect(JSON.stringify(withOperatorKey.body)).toContain('operator key cannot call the Tinker API');

    const revoked = await createOperatorKey(
      api.cloud.clients.doc,
      api.cloud.names.tables.registry,
      'leaver-2',
    );
    await revokeApiKey(api.cloud.clients.doc, api.cloud.names.tables.registry, revoked);
    expect((await api.client(revoked).raw('POST', '/api/v1/create_session', {})).status).toBe(401);
    // The tenant key still works where it belongs.
    expect((await api.client(tenantKey).raw('POST', '/api/v1/create_session', {})).status).toBe(200);
  });
});
