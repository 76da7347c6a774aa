import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { connect } from 'node:net';
import { networkInterfaces } from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { type LocalStack, startLocalStack } from '../../local/runtime/stack.js';
import { type StatusPageServer, startStatusPage } from '../../local/runtime/status-page/server.js';

interface Listener {
  readonly address: string;
  readonly port: number;
  readonly inode: string;
}

/** Every listening TCP socket of the machine, from /proc/net/tcp and tcp6 (state 0A is LISTEN). */
function listeners(): Listener[] {
  const found: Listener[] = [];
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of readFileSync(file, 'utf8').split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      const [local, state, inode] = [fields[1], fields[3], fields[9]];
      if (local === undefined || state !== '0A' || inode === undefined) continue;
      const [hex, port] = local.split(':');
      found.push({ address: hex ?? '', port: Number.parseInt(port ?? '', 16), inode });
    }
  }
  return found;
}

/** Loopback as /proc/net prints it: 127.0.0.0/8, ::1, ::ffff:127.x.y.z (little-endian words). */
function isLoopback(hex: string): boolean {
  if (hex.length === 8) return hex.endsWith('7F');
  return hex === '00000000000000000000000001000000' || /^0000000000000000FFFF0000[0-9A-F]{6}7F$/.test(hex);
}

/** Socket inodes a process holds (its fds that point at `socket:[inode]`). */
function socketInodes(pid: number): Set<string> {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const match = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (match?.[1] !== undefined) inodes.add(match[1]);
    } catch {
      // closed meanwhile
    }
  }
  return inodes;
}

function refusesOn(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port, timeout: 2_000 });
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('timeout', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(true));
  });
}

const portOf = (url: string) => Number(new URL(url).port);

describe.skipIf(process.platform !== 'linux')(
  'local cloud listens on loopback only (hardening finding 5)',
  () => {
    let stack: LocalStack | undefined;
    let statusPage: StatusPageServer | undefined;
    afterAll(async () => {
      await statusPage?.stop();
      await stack?.stop();
    });

    it('binds DynamoDB Local, fauxqs, the HTTP API and the status page to 127.0.0.1', async () => {
      stack = await startLocalStack({ prefix: `priv${Date.now().toString(36)}` });
      statusPage = await startStatusPage({ readStatus: () => Promise.reject(new Error('not read')) });
      const ports = new Set([
        portOf(stack.cloud.endpoints.dynamodb),
        portOf(stack.cloud.endpoints.s3),
        portOf(stack.apiUrl),
        portOf(statusPage.url),
      ]);
      expect(ports.size).toBe(4);
      const jvmSockets = socketInodes(stack.cloud.dynamodbPid);
      const ours = listeners().filter((entry) => ports.has(entry.port) || jvmSockets.has(entry.inode));
      // Each port listens, and every listener of these ports or of the JVM is on loopback.
      expect(new Set(ours.map((entry) => entry.port))).toEqual(ports);
      expect(ours.filter((entry) => !isLoopback(entry.address))).toEqual([]);

      const external = Object.values(networkInterfaces())
        .flat()
        .filter((address) => address !== undefined && !address.internal && address.family === 'IPv4');
      for (const address of external) {
        for (const port of ports)
          expect(await refusesOn(address!.address, port), `${address!.address}:${port}`).toBe(true);
      }
    }, 90_000);
  },
);
