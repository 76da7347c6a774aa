import type { Server } from 'node:net';

/**
 * The ports `npm start` listens on. A fixed default, so the `TINKER_BASE_URL` a user exported stays
 * right across restarts (as the development key does); another free port when the default is taken,
 * said plainly on the console; the variable (`PORT`, `STATUS_PORT`) overrides both (0: any free port).
 */
export const DEFAULT_API_PORT = 8765;
export const DEFAULT_STATUS_PORT = 8766;

/** A port to listen on: exactly this one (0: any free one), or this one when free and another otherwise. */
export type ListenPort = number | { readonly preferred: number };

/** The port a variable asks for: its value when set, else the default, preferred. */
export function portSetting(variable: string, value: string | undefined, defaultPort: number): ListenPort {
  if (value === undefined || value === '') return { preferred: defaultPort };
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new Error(`${variable} must be a port number (0-65535, 0: any free port), got "${value}"`);
  }
  return port;
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/**
 * Starts `server` listening on `host`, and answers the port it got. A preferred port that is taken
 * (the bind itself fails, so two starts racing for it both end up listening) gives way to a free one.
 */
export async function listenOn(server: Server, port: ListenPort, host: string): Promise<number> {
  if (typeof port === 'number') {
    await listen(server, port, host);
  } else {
    try {
      await listen(server, port.preferred, host);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw error;
      await listen(server, 0, host);
    }
  }
  const address = server.address();
  if (address === null || typeof address === 'string')
    throw new Error('could not read the port of a listener');
  return address.port;
}

/** The console line for a preferred port that was taken (undefined when it was not, or none was preferred). */
export function portNotice(
  what: string,
  variable: string,
  asked: ListenPort,
  bound: number,
): string | undefined {
  if (typeof asked === 'number' || asked.preferred === bound) return undefined;
  return (
    `Port ${asked.preferred} is taken, so the ${what} listens on port ${bound} this time: a URL exported ` +
    `from an earlier start does not reach it (free port ${asked.preferred}, or set ${variable}).`
  );
}
