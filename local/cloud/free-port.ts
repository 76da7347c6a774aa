import { createServer } from 'node:net';

/** A port the OS reports free on the loopback interface (asked for with port 0, then released). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error('could not read the port of a loopback listener'));
        return;
      }
      server.close(() => resolve(address.port));
    });
  });
}
