import { createServer } from 'node:http';
import { awsClients } from '../../../shared/aws/clients.js';
import { config } from '../../../shared/base/config.js';
import type { PoolQueueStatus } from '../../../shared/services/ops/queue-status.js';
import { readPoolStatus } from '../../../shared/services/ops/status-reader.js';
import {
  handleStatusPageRequest,
  loadStatusPageAssets,
  NO_FAVICON,
  STATUS_PAGE_ROOT,
  type StatusPageResponse,
  statusPageSubpath,
} from '../../../shared/services/status-page/page.js';
import { type ListenPort, listenOn } from '../port-choice.js';

export interface StatusPageServer {
  /** The page's URL, e.g. `http://127.0.0.1:PORT/status`. */
  readonly url: string;
  stop(): Promise<void>;
}

export interface StatusPageOptions {
  /** Default: a free port. */
  readonly port?: ListenPort;
  /** Loopback by default: served this way the page asks for no key (the API's route does). */
  readonly host?: string;
  /** Default: `readPoolStatus` with the configuration and clients process.env points at. */
  readonly readStatus?: () => Promise<PoolQueueStatus>;
}

const MISDIRECTED: StatusPageResponse = {
  status: 421,
  headers: { 'content-type': 'text/plain; charset=utf-8' },
  body: 'misdirected request: this page answers only to 127.0.0.1, localhost or [::1]\n',
};

/**
 * The Host values a loopback client sends for this port. A page on another site that rebinds its
 * own name to 127.0.0.1 reaches this port with its own name as Host, so anything else is refused
 * before any data is read (a DNS-rebinding defence: the page asks for no key).
 */
export function loopbackHosts(port: number): ReadonlySet<string> {
  return new Set([`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`]);
}

const NOT_FOUND: StatusPageResponse = {
  status: 404,
  headers: { 'content-type': 'text/plain; charset=utf-8' },
  body: 'not found\n',
};

/**
 * Serves the status page on its own loopback port for `npm start`, without a key: whoever can reach
 * loopback can already read the local cloud. Deployed, the API function serves the same page at
 * `/status` behind operator keys (`shared/services/api/status-routes.ts`).
 */
export async function startStatusPage(options: StatusPageOptions = {}): Promise<StatusPageServer> {
  const assets = loadStatusPageAssets();
  const readStatus =
    options.readStatus ?? (() => readPoolStatus({ clients: awsClients(), config: config() }));
  const host = options.host ?? '127.0.0.1';
  const route = async (method: string, path: string): Promise<StatusPageResponse> => {
    if (path === '/favicon.ico') return NO_FAVICON;
    if (path === '/') {
      return { status: 307, headers: { location: `.${STATUS_PAGE_ROOT}` }, body: '' };
    }
    const subpath = statusPageSubpath(path);
    if (subpath === undefined) return NOT_FOUND;
    return handleStatusPageRequest(method, subpath, { assets, readStatus });
  };
  let allowedHosts: ReadonlySet<string> = new Set();
  const server = createServer((request, response) => {
    const path = new URL(request.url ?? '/', 'http://status.local').pathname;
    const hostHeader = request.headers.host?.toLowerCase();
    const answer =
      hostHeader !== undefined && allowedHosts.has(hostHeader)
        ? route(request.method ?? 'GET', path)
        : Promise.resolve(MISDIRECTED);
    answer.then(
      (answer) => {
        response.writeHead(answer.status, answer.headers);
        response.end(request.method === 'HEAD' ? undefined : answer.body);
      },
      () => {
        response.writeHead(500).end();
      },
    );
  });
  const port = await listenOn(server, options.port ?? 0, host);
  allowedHosts = loopbackHosts(port);
  return {
    url: `http://${host}:${port}${STATUS_PAGE_ROOT}`,
    stop: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
