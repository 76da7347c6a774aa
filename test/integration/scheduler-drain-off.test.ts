import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../bin/cli.js';
import type { LocalRuntime } from '../../local/runtime/lambda-runtime.js';
import { config, resetConfig } from '../../shared/base/config.js';
import { startDrain } from '../../shared/services/ops/control-store.js';
import type { TestCloud } from '../support/cloud.js';
import { startCloudRuntime } from '../support/runtime.js';
import { createModel, drainWorkItems, schedulerCloud, stepIds } from '../support/scheduler-harness.js';
import { pause, waitFor } from '../support/wait.js';

/**
 * Hardening finding 6: `drain --off` must wake the scheduler through its triggers, as a submit or a
 * commit does. Only the scheduler runs here (no sweeper), so the one-minute safety tick cannot be
 * what dispatches: the 15 s bound below fails if lifting the drain wakes nothing.
 */
describe('drain --off starts a tick', () => {
  let cloud: TestCloud;
  let runtime: LocalRuntime;
  let dir: string;
  let envFile: string;

  beforeAll(async () => {
    cloud = await schedulerCloud();
    runtime = await startCloudRuntime(cloud, { functions: ['scheduler'] });
    dir = mkdtempSync(path.join(tmpdir(), 'tinker-drain-off-'));
    envFile = path.join(dir, 'env.json');
    writeFileSync(envFile, JSON.stringify(cloud.env));
  });
  afterAll(async () => {
    await runtime?.stop();
    rmSync(dir, { recursive: true, force: true });
    resetConfig();
  });

  it('dispatches the work that waited for the drain within seconds of the CLI lifting it', async () => {
    await startDrain(cloud.clients.doc, config().table('registry'), config().pool, 'test', {
      reason: 'maintenance',
    });
    // The submit's stream record wakes a tick, which plans nothing while the pool drains.
    const { modelId, requestId } = await createModel(cloud.clients);
    await pause(1_500);
    expect(await drainWorkItems(cloud.clients)).toEqual([]);

    let stdout = '';
    const code = await runCli(['drain', '--off', '--env-file', envFile], {
      stdout: (text) => (stdout += text),
      stderr: (text) => (stdout += text),
      env: {},
    });
    expect({ code, stdout }).toEqual({ code: 0, stdout: `pool ${config().pool} dispatches again\n` });

    const started = Date.now();
    const items = await waitFor(
      'a work item after drain --off',
      async () => {
        const found = await drainWorkItems(cloud.clients);
        return found.length > 0 && found;
      },
      15_000,
      100,
    );
    expect(items.map(stepIds)).toEqual([{ [modelId]: [requestId] }]);
    // Far below the sweeper's one-minute schedule (which this runtime does not run anyway).
    expect(Date.now() - started).toBeLessThan(15_000);
  });
});
