import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { PoolQueueStatus } from '../../shared/ops/queue-status.js';
import { readPoolStatus } from '../../shared/ops/status-reader.js';
import { handleStatusPageRequest, loadStatusPageAssets } from './handler.js';

export interface StatusPageServer {
  /** The page's URL, e.g. `http://127.0.0.1:PORT/status`. */
  readonly url: string;
  stop(): Promise<void>;
}

export interface StatusPageOptions {
  /** Default: a free port. */
  readonly port?: number;
  /** Loopback by default: the page has no authentication. */
  readonly host?: string;
  /** Default: `readPoolStatus()` against whatever process.env points at. */
  readonly readStatus?: () => Promise<PoolQueueStatus>;
}

/** Serves the status page on its own port (the local runtime's API belongs to the api function). */
export async function startStatusPage(options: StatusPageOptions = {}): Promise<StatusPageServer> {
  const assets = loadStatusPageAssets();
  const readStatus = options.readStatus ?? (() => readPoolStatus());
  const host = options.host ?? '127.0.0.1';
  const server = createServer((request, response) => {
    const path = new URL(request.url ?? '/', 'http://status.local').pathname;
    handleStatusPageRequest(request.method ?? 'GET', path, assets, readStatus).then(
      (answer) => {
        response.writeHead(answer.status, answer.headers);
        response.end(request.method === 'HEAD' ? undefined : answer.body);
      },
      () => {
        response.writeHead(500).end();
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${host}:${port}/status`,
    stop: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
