import { readFileSync } from 'node:fs';
import type { PoolQueueStatus } from '../../shared/ops/queue-status.js';
import { statusDisplay } from './display.js';

/**
 * The status page as a plain request -> response function, independent of the transport: the local
 * HTTP server (`server.ts`) calls it, and an API route can later call it from a Lambda handler.
 * Routes are relative to wherever it is mounted: `<base>/status`, `<base>/status.json`,
 * `<base>/status.js`, `<base>/status.css`; the page refers to its assets by relative URLs.
 */

export interface StatusPageAssets {
  readonly html: string;
  readonly js: string;
  readonly css: string;
}

export interface StatusPageResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/** Reads the assets next to this module (a bundled Lambda would import them as text instead). */
export function loadStatusPageAssets(): StatusPageAssets {
  const read = (name: string) => readFileSync(new URL(`./assets/${name}`, import.meta.url), 'utf8');
  return { html: read('status.html'), js: read('status.js'), css: read('status.css') };
}

/** Same origin only, no inline code: the page needs nothing else. */
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
} as const;

function respond(status: number, type: string, body: string, cache = 'no-cache'): StatusPageResponse {
  return {
    status,
    headers: { ...SECURITY_HEADERS, 'content-type': type, 'cache-control': cache },
    body,
  };
}

export async function handleStatusPageRequest(
  method: string,
  path: string,
  assets: StatusPageAssets,
  readStatus: () => Promise<PoolQueueStatus>,
): Promise<StatusPageResponse> {
  if (method !== 'GET' && method !== 'HEAD') {
    const answer = respond(405, 'text/plain; charset=utf-8', 'method not allowed\n');
    return { ...answer, headers: { ...answer.headers, allow: 'GET, HEAD' } };
  }
  const name = path.replace(/\/+$/, '').split('/').pop();
  switch (name) {
    case '':
    case 'status':
      return respond(200, 'text/html; charset=utf-8', assets.html);
    case 'status.js':
      return respond(200, 'text/javascript; charset=utf-8', assets.js);
    case 'status.css':
      return respond(200, 'text/css; charset=utf-8', assets.css);
    case 'status.json':
      try {
        const status = await readStatus();
        return respond(
          200,
          'application/json',
          JSON.stringify({ ...status, display: statusDisplay(status) }),
          'no-store',
        );
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        return respond(503, 'application/json', JSON.stringify({ error: message }), 'no-store');
      }
    case 'favicon.ico':
      // Browsers ask for it at the origin's root; answering "nothing" keeps their consoles clean.
      return { status: 204, headers: SECURITY_HEADERS, body: '' };
    default:
      return respond(404, 'text/plain; charset=utf-8', 'not found\n');
  }
}
