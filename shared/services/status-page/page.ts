import { readFileSync } from 'node:fs';
import type { PoolQueueStatus } from '../ops/queue-status.js';
import { statusDisplay } from './display.js';

/**
 * The status page as a plain request -> response function, independent of the transport: the API
 * function serves it behind operator keys (`shared/services/api/status-routes.ts`) and `npm start` on its own
 * loopback port (`local/runtime/status-page/server.ts`). Paths are below the page's own URL, `/status`:
 * `''` the page, `/data` the picture as JSON, `/app.js` and `/app.css` its assets.
 * The page refers to them relatively (`status/data`), so it works wherever it is mounted.
 */

export const STATUS_PAGE_ROOT = '/status';

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

/** Why the data is refused: 401 (no valid key) or 403 (a valid key of the wrong kind). */
export interface StatusPageRefusal {
  readonly status: 401 | 403;
  readonly error: string;
}

export interface StatusPageOptions {
  readonly assets: StatusPageAssets;
  readonly readStatus: () => Promise<PoolQueueStatus>;
  /**
   * Guards the data (never the page, which holds none): a refusal answers instead of the picture.
   * With a guard, the page asks the operator for a key and sends it as `X-API-Key`.
   */
  readonly guard?: () => Promise<StatusPageRefusal | undefined>;
}

/** Reads the assets next to this module; the Lambda bundle carries a copy beside it (topology `bundledAssets`). */
export function loadStatusPageAssets(): StatusPageAssets {
  const read = (name: string) => readFileSync(new URL(`./assets/${name}`, import.meta.url), 'utf8');
  return { html: read('status.html'), js: read('status.js'), css: read('status.css') };
}

/** The path below the page's root, or undefined when `path` is not the page's. */
export function statusPageSubpath(path: string): string | undefined {
  if (path === STATUS_PAGE_ROOT) return '';
  return path.startsWith(`${STATUS_PAGE_ROOT}/`) ? path.slice(STATUS_PAGE_ROOT.length) : undefined;
}

/** Same origin only, no inline code: the page needs nothing else. */
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
} as const;

/** The page's marker the script reads to know whether to ask for a key (see status.html). */
const AUTH_MARKER = 'data-auth="none"';
const KEY_HEADER = 'X-API-Key';

function respond(
  status: number,
  type: string,
  body: string,
  cache = 'no-cache',
  extra: Readonly<Record<string, string>> = {},
): StatusPageResponse {
  return {
    status,
    headers: { ...SECURITY_HEADERS, 'content-type': type, 'cache-control': cache, ...extra },
    body,
  };
}

function json(
  status: number,
  body: unknown,
  extra: Readonly<Record<string, string>> = {},
): StatusPageResponse {
  return respond(status, 'application/json', JSON.stringify(body), 'no-store', extra);
}

async function dataResponse(options: StatusPageOptions): Promise<StatusPageResponse> {
  const refusal = await options.guard?.();
  if (refusal !== undefined) {
    // 401 names the scheme (a key in a header), as RFC 9110 asks; browsers show no prompt for it.
    const challenge: Record<string, string> =
      refusal.status === 401 ? { 'www-authenticate': `ApiKey header="${KEY_HEADER}"` } : {};
    return json(refusal.status, { error: refusal.error }, challenge);
  }
  try {
    const status = await options.readStatus();
    return json(200, { ...status, display: statusDisplay(status) });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    return json(503, { error: message });
  }
}

export async function handleStatusPageRequest(
  method: string,
  subpath: string,
  options: StatusPageOptions,
): Promise<StatusPageResponse> {
  if (method !== 'GET' && method !== 'HEAD') {
    return respond(405, 'text/plain; charset=utf-8', 'method not allowed\n', 'no-cache', {
      allow: 'GET, HEAD',
    });
  }
  switch (subpath) {
    case '': {
      const html =
        options.guard === undefined
          ? options.assets.html
          : options.assets.html.replace(AUTH_MARKER, 'data-auth="operator-key"');
      return respond(200, 'text/html; charset=utf-8', html);
    }
    case '/':
      // Relative URLs resolve against the page without the slash only; `../../status` is that page.
      return respond(308, 'text/plain; charset=utf-8', '', 'no-cache', {
        location: `..${STATUS_PAGE_ROOT}`,
      });
    case '/app.js':
      return respond(200, 'text/javascript; charset=utf-8', options.assets.js);
    case '/app.css':
      return respond(200, 'text/css; charset=utf-8', options.assets.css);
    case '/data':
      // GET only: a HEAD would run the whole multi-shard read for no body (and use the operators'
      // read budget, OPERATOR_READS_PER_SECOND, for nothing).
      if (method !== 'GET') {
        return respond(405, 'text/plain; charset=utf-8', 'method not allowed\n', 'no-cache', {
          allow: 'GET',
        });
      }
      return dataResponse(options);
    default:
      return respond(404, 'text/plain; charset=utf-8', 'not found\n');
  }
}

/** For a transport serving an origin of its own: browsers ask for the icon at the root. */
export const NO_FAVICON: StatusPageResponse = { status: 204, headers: SECURITY_HEADERS, body: '' };
