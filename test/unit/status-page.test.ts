import { describe, expect, it } from 'vitest';
import { type DeadLetterDepths, queueStatus } from '../../shared/services/ops/queue-status.js';
import { statusDisplay } from '../../shared/services/status-page/display.js';
import {
  handleStatusPageRequest,
  loadStatusPageAssets,
  type StatusPageOptions,
  statusPageSubpath,
} from '../../shared/services/status-page/page.js';

const assets = loadStatusPageAssets();
const empty = () =>
  Promise.resolve(queueStatus({ pool: 'p', now: 1, live: [], models: new Map(), leaseMs: 1 }));
const open: StatusPageOptions = { assets, readStatus: empty };

describe('status page routes', () => {
  it('maps paths below /status and nothing else', () => {
    expect(statusPageSubpath('/status')).toBe('');
    expect(statusPageSubpath('/status/data')).toBe('/data');
    expect(statusPageSubpath('/status/')).toBe('/');
    expect(statusPageSubpath('/statuses')).toBeUndefined();
    expect(statusPageSubpath('/api/v1/status')).toBeUndefined();
  });

  it('answers HEAD on the data 405 without reading anything (hardening finding 6)', async () => {
    let reads = 0;
    const counting: StatusPageOptions = {
      assets,
      readStatus: () => {
        reads++;
        return empty();
      },
    };
    expect(await handleStatusPageRequest('HEAD', '/data', counting)).toMatchObject({
      status: 405,
      headers: { allow: 'GET' },
    });
    expect(reads).toBe(0);
    expect((await handleStatusPageRequest('HEAD', '', counting)).status).toBe(200);
    expect((await handleStatusPageRequest('GET', '/data', counting)).status).toBe(200);
    expect(reads).toBe(1);
  });

  it('serves the page and its own assets under a strict CSP, referring to them relatively', async () => {
    for (const subpath of ['', '/app.js', '/app.css']) {
      const answer = await handleStatusPageRequest('GET', subpath, open);
      expect(answer.status).toBe(200);
      expect(answer.headers['content-security-policy']).toContain("script-src 'self'");
      expect(answer.headers['x-content-type-options']).toBe('nosniff');
    }
    // Relative to the page at `<base>/status`, so a base path in front of it is fine.
    expect(assets.html).toContain('href="status/app.css"');
    expect(assets.html).toContain('src="status/app.js"');
    expect(assets.html).not.toMatch(/(src|href)="(https?:)?\/\//);
    expect(assets.js).toContain("fetch('status/data'");
    const redirect = await handleStatusPageRequest('GET', '/', open);
    expect(redirect).toMatchObject({ status: 308, headers: { location: '../status' } });
  });

  it('marks the page as needing a key only when the data is guarded', async () => {
    const plain = await handleStatusPageRequest('GET', '', open);
    expect(plain.body).toContain('<body data-auth="none">');
    const guarded = await handleStatusPageRequest('GET', '', { ...open, guard: async () => undefined });
    expect(guarded.body).toContain('<body data-auth="operator-key">');
    expect(guarded.body).not.toContain('data-auth="none"');
  });

  it('answers the picture with its display rows, and a readable 503 when the read fails', async () => {
    const ok = await handleStatusPageRequest('GET', '/data', open);
    expect(ok.headers['cache-control']).toBe('no-store');
    expect(JSON.parse(ok.body)).toMatchObject({
      pool: 'p',
      models: [],
      display: { rows: [], model_ids: [] },
    });
    const failing = await handleStatusPageRequest('GET', '/data', {
      assets,
      readStatus: () => Promise.reject(new Error('ResourceNotFoundException: no table')),
    });
    expect(failing.status).toBe(503);
    expect(JSON.parse(failing.body)).toEqual({ error: 'ResourceNotFoundException: no table' });
  });

  it('answers a guard refusal as JSON without reading anything; a 401 names the header', async () => {
    let reads = 0;
    const counting = () => {
      reads += 1;
      return empty();
    };
    const unauthorized = await handleStatusPageRequest('GET', '/data', {
      assets,
      readStatus: counting,
      guard: async () => ({ status: 401, error: 'missing X-API-Key header' }),
    });
    expect(unauthorized.status).toBe(401);
    expect(unauthorized.headers['www-authenticate']).toBe('ApiKey header="X-API-Key"');
    expect(unauthorized.headers['cache-control']).toBe('no-store');
    expect(JSON.parse(unauthorized.body)).toEqual({ error: 'missing X-API-Key header' });
    const forbidden = await handleStatusPageRequest('GET', '/data', {
      assets,
      readStatus: counting,
      guard: async () => ({ status: 403, error: 'tenant key' }),
    });
    expect(forbidden.status).toBe(403);
    expect(forbidden.headers['www-authenticate']).toBeUndefined();
    expect(reads).toBe(0);
    // The page itself is never guarded: it holds no data.
    const page = await handleStatusPageRequest('GET', '', {
      assets,
      readStatus: counting,
      guard: async () => ({ status: 401, error: 'no' }),
    });
    expect(page.status).toBe(200);
    expect(reads).toBe(0);
  });

  it('refuses other methods and unknown paths', async () => {
    const post = await handleStatusPageRequest('POST', '/data', open);
    expect(post.status).toBe(405);
    expect(post.headers).toMatchObject({ allow: 'GET, HEAD', 'x-content-type-options': 'nosniff' });
    expect((await handleStatusPageRequest('GET', '/status.json', open)).status).toBe(404);
    expect((await handleStatusPageRequest('GET', '/data/more', open)).status).toBe(404);
  });
});

describe('status page display of the dead-letter queues', () => {
  const depths = (work: number, stream: number): DeadLetterDepths => ({
    work_dlq: { visible: work, in_flight: 0 },
    stream_dlq: { visible: stream, in_flight: 0 },
  });
  const display = (deadLetters?: DeadLetterDepths) =>
    statusDisplay(
      queueStatus({
        pool: 'p',
        now: 1,
        live: [],
        models: new Map(),
        leaseMs: 1,
        ...(deadLetters === undefined ? {} : { deadLetters }),
      }),
    );

  it('shows both depths among the totals, and no warning while both are empty', () => {
    const quiet = display(depths(0, 0));
    expect(quiet.totals).toContainEqual(['Work dead letters (work-dlq)', '0 messages']);
    expect(quiet.totals).toContainEqual(['Stream dead letters (stream-dlq)', '0 messages']);
    expect(quiet.dead_letter_warnings).toEqual([]);
  });

  it('warns once per queue that holds messages, saying what they are', () => {
    const work = display(depths(4, 0));
    expect(work.totals).toContainEqual(['Work dead letters (work-dlq)', '4 messages']);
    expect(work.dead_letter_warnings).toHaveLength(1);
    expect(work.dead_letter_warnings[0]).toMatch(
      /^work-dlq holds 4 messages: work items that failed 5 deliveries/,
    );

    const both = display(depths(1, 2));
    expect(both.dead_letter_warnings).toHaveLength(2);
    expect(both.dead_letter_warnings[1]).toMatch(
      /^stream-dlq holds 2 messages: stream batches the scheduler gave up on/,
    );
    expect(both.dead_letter_warnings[1]).toContain('within 24 h');
  });

  it('has a place on the page for the warnings, announced as an alert and hidden until needed', () => {
    expect(assets.html).toMatch(/<section id="dead-letters" class="alert" role="alert"[^>]* hidden>/);
    expect(assets.html).toContain('id="dead-letter-warnings"');
    expect(assets.js).toContain('status.display.dead_letter_warnings');
  });

  it('sends the warnings with the picture', async () => {
    const answer = await handleStatusPageRequest('GET', '/data', {
      assets,
      readStatus: async () =>
        queueStatus({
          pool: 'p',
          now: 1,
          live: [],
          models: new Map(),
          leaseMs: 1,
          deadLetters: depths(0, 1),
        }),
    });
    const body = JSON.parse(answer.body) as {
      dead_letters: DeadLetterDepths;
      display: { dead_letter_warnings: string[] };
    };
    expect(body.dead_letters).toEqual(depths(0, 1));
    expect(body.display.dead_letter_warnings).toHaveLength(1);
  });
});
