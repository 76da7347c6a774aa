import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StatusPageServer, startStatusPage } from '../../local/runtime/status-page/server.js';
import { queueStatus } from '../../shared/services/ops/queue-status.js';

interface Answer {
  readonly status: number;
  readonly body: string;
}

/** A GET with an explicit Host header (fetch does not let a caller choose it). */
function get(url: URL, path: string, host: string | undefined): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = host === undefined ? {} : { host };
    const outgoing = request({ hostname: url.hostname, port: url.port, path, headers }, (incoming) => {
      let body = '';
      incoming.on('data', (chunk: Buffer) => (body += chunk.toString()));
      incoming.on('end', () => resolve({ status: incoming.statusCode ?? 0, body }));
    });
    outgoing.on('error', reject);
    if (host === undefined) outgoing.removeHeader('host');
    outgoing.end();
  });
}

describe('local status page: Host header (hardening finding 5, DNS rebinding)', () => {
  let server: StatusPageServer;
  let url: URL;
  let reads = 0;

  beforeAll(async () => {
    server = await startStatusPage({
      readStatus: () => {
        reads++;
        return Promise.resolve(
          queueStatus({ pool: 'secret-pool', now: 1, live: [], models: new Map(), leaseMs: 1 }),
        );
      },
    });
    url = new URL(server.url);
  });
  afterAll(() => server?.stop());

  it('answers its loopback names on its own port', async () => {
    for (const name of ['127.0.0.1', 'localhost', 'LOCALHOST', '[::1]']) {
      const answer = await get(url, '/status/data', `${name}:${url.port}`);
      expect(answer.status, name).toBe(200);
      expect(answer.body).toContain('secret-pool');
    }
  });

  it('refuses any other Host with 421 before reading anything', async () => {
    const before = reads;
    const foreign = [
      `evil.example:${url.port}`,
      'evil.example',
      `127.0.0.1:${Number(url.port) + 1}`,
      '127.0.0.1',
      `localhost.evil.example:${url.port}`,
      `0.0.0.0:${url.port}`,
    ];
    for (const host of foreign) {
      for (const path of ['/status/data', '/status', '/status/status.js']) {
        const answer = await get(url, path, host);
        expect(answer.status, `${host} ${path}`).toBe(421);
        expect(answer.body).not.toContain('secret-pool');
        expect(answer.body).not.toContain('<');
      }
    }
    // No Host at all: Node's HTTP server answers 400 itself (HTTP/1.1 requires the header).
    const bare = await get(url, '/status/data', undefined);
    expect([400, 421]).toContain(bare.status);
    expect(bare.body).not.toContain('secret-pool');
    expect(reads).toBe(before);
  });
});
