import { describe, expect, it } from 'vitest';
import { queueStatus } from '../../shared/ops/queue-status.js';
import {
  handleStatusPageRequest,
  loadStatusPageAssets,
  type StatusPageOptions,
  statusPageSubpath,
} from '../../shared/status-page/page.js';

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
