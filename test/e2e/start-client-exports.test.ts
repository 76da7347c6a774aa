import { describe, expect, it } from 'vitest';
import { TinkerClient } from '../../shared/client/tinker-client.js';
import { runScript } from '../support/processes.js';
import { waitFor } from '../support/wait.js';

/** `npm start` tells any Tinker client where to go: the base URL and a working development key. */
describe('npm start', () => {
  it('prints the API base URL, a development key and an operator key on lines of their own, and export lines', async () => {
    const {
      child,
      output: printed,
      exited,
    } = runScript('local/runtime/start.ts', { ...process.env, TINKER_LOCAL_THROWAWAY: '1' });
    try {
      await waitFor('the ready banner', () => printed().includes('Press Ctrl-C to stop.'), 60_000, 100);
      const lines = printed().split('\n');
      const baseUrl = /^export TINKER_BASE_URL=(http:\/\/127\.0\.0\.1:\d+)$/m.exec(printed())?.[1];
      const apiKey = /^export TINKER_API_KEY=(\S+)$/m.exec(printed())?.[1];
      expect(baseUrl).toBeDefined();
      expect(apiKey).toBeDefined();
      // The values also stand alone on their own lines, for copying.
      expect(lines).toContain(baseUrl);
      expect(lines).toContain(apiKey);

      const client = new TinkerClient({ baseUrl: baseUrl as string, apiKey });
      expect((await client.createSession({ tags: ['start'] })).session_id).toEqual(expect.any(String));
      const stranger = new TinkerClient({ baseUrl: baseUrl as string, apiKey: 'not-a-key' });
      expect((await stranger.raw('POST', '/api/v1/create_session', { tags: [] })).status).toBe(401);

      // The API's own status page, as deployed, with an operator key for its data.
      expect(lines).toContain(`${baseUrl}/status`);
      const operatorKey = lines.find((line) => line.startsWith('tso-'));
      expect(operatorKey).toBeDefined();
      const operator = new TinkerClient({ baseUrl: baseUrl as string, apiKey: operatorKey });
      expect((await operator.raw('GET', '/status/data')).status).toBe(200);

      child.kill('SIGINT');
      expect(await exited).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 90_000);
});
