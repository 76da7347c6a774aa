import { createServer, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { freePort } from '../../local/cloud/free-port.js';
import {
  DEFAULT_API_PORT,
  DEFAULT_STATUS_PORT,
  listenOn,
  portNotice,
  portSetting,
} from '../../local/runtime/port-choice.js';

const servers: Server[] = [];
function server(): Server {
  const created = createServer();
  servers.push(created);
  return created;
}
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
});

describe("npm start's ports", () => {
  it('prefer fixed defaults, which the variables override (0: any free port)', () => {
    expect(DEFAULT_API_PORT).toBe(8765);
    expect(DEFAULT_STATUS_PORT).toBe(8766);
    expect(portSetting('PORT', undefined, DEFAULT_API_PORT)).toEqual({ preferred: 8765 });
    expect(portSetting('PORT', '', DEFAULT_API_PORT)).toEqual({ preferred: 8765 });
    expect(portSetting('PORT', '9000', DEFAULT_API_PORT)).toBe(9000);
    expect(portSetting('STATUS_PORT', '0', DEFAULT_STATUS_PORT)).toBe(0);
    expect(() => portSetting('PORT', 'http', DEFAULT_API_PORT)).toThrow(/PORT must be a port number.*"http"/);
    expect(() => portSetting('PORT', '70000', DEFAULT_API_PORT)).toThrow(/PORT/);
  });

  it('listen on the preferred port when it is free, and say nothing', async () => {
    const preferred = await freePort();
    const bound = await listenOn(server(), { preferred }, '127.0.0.1');
    expect(bound).toBe(preferred);
    expect(portNotice('API', 'PORT', { preferred }, bound)).toBeUndefined();
  });

  it('take another free port when the preferred one is taken, and say so plainly', async () => {
    const holder = server();
    const preferred = await listenOn(holder, 0, '127.0.0.1');
    const bound = await listenOn(server(), { preferred }, '127.0.0.1');
    expect(bound).not.toBe(preferred);
    expect(bound).toBeGreaterThan(0);
    expect(portNotice('API', 'PORT', { preferred }, bound)).toBe(
      `Port ${preferred} is taken, so the API listens on port ${bound} this time: a URL exported from an ` +
        `earlier start does not reach it (free port ${preferred}, or set PORT).`,
    );
  });

  it('fail on a port asked for exactly that is taken, rather than move', async () => {
    const taken = await listenOn(server(), 0, '127.0.0.1');
    await expect(listenOn(server(), taken, '127.0.0.1')).rejects.toMatchObject({ code: 'EADDRINUSE' });
    expect(portNotice('API', 'PORT', taken, taken)).toBeUndefined();
  });
});
