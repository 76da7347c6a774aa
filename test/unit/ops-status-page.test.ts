import { describe, expect, it } from 'vitest';
import { handleStatusPageRequest, loadStatusPageAssets } from '../../local/status-page/handler.js';
import { queueStatus } from '../../shared/ops/queue-status.js';

const assets = loadStatusPageAssets();
const empty = () =>
  Promise.resolve(queueStatus({ pool: 'p', now: 1, live: [], models: new Map(), leaseMs: 1 }));

describe('status page routes', () => {
  it('serves the page and its own assets wherever it is mounted, under a strict CSP', async () => {
    for (const path of ['/status', '/ops/status/', '/status.js', '/status.css']) {
      const answer = await handleStatusPageRequest('GET', path, assets, empty);
      expect(answer.status).toBe(200);
      expect(answer.headers['content-security-policy']).toContain("script-src 'self'");
    }
    // The page only refers to its assets relatively, so a base path in front of it is fine.
    expect(assets.html).toContain('href="status.css"');
    expect(assets.html).toContain('src="status.js"');
    expect(assets.html).not.toMatch(/(src|href)="(https?:)?\/\//);
    expect(assets.js).toContain("fetch('status.json'");
  });

  it('answers the picture with its display rows, and a readable 503 when the read fails', async () => {
    const ok = await handleStatusPageRequest('GET', '/status.json', assets, empty);
    expect(ok.headers['cache-control']).toBe('no-store');
    expect(JSON.parse(ok.body)).toMatchObject({
      pool: 'p',
      models: [],
      display: { rows: [], model_ids: [] },
    });
    const failing = await handleStatusPageRequest('GET', '/status.json', assets, () =>
      Promise.reject(new Error('ResourceNotFoundException: no table')),
    );
    expect(failing.status).toBe(503);
    expect(JSON.parse(failing.body)).toEqual({ error: 'ResourceNotFoundException: no table' });
  });

  it('refuses other methods and unknown paths', async () => {
    const post = await handleStatusPageRequest('POST', '/status', assets, empty);
    expect(post.status).toBe(405);
    expect(post.headers).toMatchObject({ allow: 'GET, HEAD', 'x-content-type-options': 'nosniff' });
    expect((await handleStatusPageRequest('GET', '/status.txt', assets, empty)).status).toBe(404);
  });
});
