import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../shared/base/env-file.js';
import { isAlive } from '../support/processes.js';
import { waitFor } from '../support/wait.js';

/**
 * `npm start -- --workers 2`: two worker processes instead of the in-process handler, each on its own
 * lane, listed in the banner; Ctrl-C drains both (each lets go of its models and gives its lane back)
 * before the local cloud stops, and the stack exits 0.
 */

describe('npm start --workers', () => {
  let dir: string | undefined;
  let kill: (() => void) | undefined;
  afterEach(() => {
    kill?.();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('runs N worker processes on their own lanes, and Ctrl-C drains them before the stack stops', async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'tinker-start-workers-'));
    const child = spawn(process.execPath, ['--import', 'tsx', 'local/runtime/start.ts', '--workers', '2'], {
      cwd: PROJECT_ROOT,
      env: {
        ...process.env,
        AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
        TINKER_LOCAL_THROWAWAY: '1',
        TINKER_LOCAL_DIR: dir,
        PORT: '0',
        STATUS_PORT: '0',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    kill = () => {
      if (child.exitCode === null) child.kill('SIGKILL');
    };
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));

    const pids = await waitFor(
      'the worker pids in the banner',
      () => /Worker processes \(bin\/worker\.ts\), pids: (\d+) (\d+)$/m.exec(output)?.slice(1).map(Number),
      45_000,
      100,
    );
    await waitFor(
      'both workers on a lane',
      () =>
        pids.every((pid) =>
          new RegExp(
            `\\[worker \\d pid ${pid}\\] worker \\(reference backend, up to 4 work items at once\\) polling .* and its lane \\d`,
          ).test(output),
        ),
      30_000,
      100,
    );
    const lanes = pids.map(
      (pid) => new RegExp(`pid ${pid}\\] worker .* and its lane (\\d)`).exec(output)?.[1],
    );
    expect(new Set(lanes).size).toBe(2);

    child.kill('SIGINT');
    expect(await exited).toBe(0);
    for (const pid of pids) {
      expect(isAlive(pid)).toBe(false);
      // Drained by one SIGTERM (not abandoned by a second signal), its models let go, exit code 0.
      expect(output).toMatch(new RegExp(`pid ${pid}\\] SIGTERM: no new work items`));
      expect(output).toMatch(new RegExp(`pid ${pid}\\] letting go of 0 resident models`));
      expect(output).toMatch(new RegExp(`pid ${pid}\\] exited \\(code 0\\)`));
    }
    // The workers were gone before the stack's last line.
    expect(output.lastIndexOf('exited (code 0)')).toBeGreaterThan(output.indexOf('stopping the local stack'));
  });
});
