import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  startWorkerProcesses,
  type WorkerProcess,
  type WorkerProcesses,
} from '../../local/runtime/worker-processes.js';
import { PROJECT_ROOT, writeLocalEnvFile } from '../../shared/base/env-file.js';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import type { ModelRow } from '../../shared/domain/records.js';
import { answersOverHttp, Pipeline, waitTerminal } from '../support/pipeline.js';
import { BAD_DATUM_VOCABULARY, TenantDriver } from '../support/tenant-driver.js';
import { waitFor } from '../support/wait.js';
import { WorkerHarness } from '../support/worker-harness.js';
import { countFutures, generateWorkload } from '../support/workload.js';

/**
 * `npm start -- --workers 3` as the GPU fleet runs its tasks: three real `bin/worker.ts` processes
 * (local/runtime/worker-processes.ts) on the same queue, each leasing a work lane and keeping its
 * models resident (S1, S2). One is killed (SIGKILL) in the middle of an optimizer step, a host lost
 * without warning; another is drained (SIGTERM) in the middle of the run, a host picked for scale-in.
 * Every request still ends, each once, with the sequential oracle's answer (R1), and every model ends
 * settled with the last worker: the drained one's by its snapshots (S3), the killed one's by lease
 * and hold expiry and recovery (S4).
 */

const SEED = Number(process.env.E2E_SEED ?? 20260605);
// Short leases and holds: a killed worker's models are recovered in seconds, not a minute.
const ENV = { LEASE_SECONDS: '4', HOLD_SECONDS: '4', SLOW_OPTIM_MS: '400' };
const SLOW_BACKEND = path.join(PROJECT_ROOT, 'test/support/worker-slow-backend.ts');

describe('npm start --workers 3: a worker killed mid-step and another drained mid-run', () => {
  let harness: WorkerHarness;
  let pipeline: Pipeline;
  let processes: WorkerProcesses | undefined;
  let dir: string;
  const lines = new Map<number, string[]>();

  beforeAll(async () => {
    harness = await WorkerHarness.start({ vocabulary: BAD_DATUM_VOCABULARY });
    pipeline = await Pipeline.start(harness, { lambdaWorker: false, env: ENV });
    dir = mkdtempSync(path.join(tmpdir(), 'tinker-workers-'));
  });
  afterAll(async () => {
    await processes?.stop();
    await pipeline?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('loses nothing, duplicates nothing, and the remaining worker finishes every model', {
    timeout: 90_000,
  }, async () => {
    // As `npm start` writes it: the stack's variables and its writer's pid (the workers run under
    // the worker's grants).
    const envFile = path.join(dir, 'env.json');
    writeLocalEnvFile({ ...harness.cloud.env, ...ENV }, envFile);
    const started = startWorkerProcesses({
      count: 3,
      envFile,
      backend: SLOW_BACKEND,
      env: ENV,
      waitSeconds: 1,
      graceSeconds: 10,
      print: (line) => {
        const match = /^\[worker (\d+) pid \d+\] (.*)$/.exec(line);
        if (match === null) return;
        const index = Number(match[1]);
        lines.set(index, [...(lines.get(index) ?? []), match[2] ?? '']);
      },
    });
    processes = started;
    const printed = (index: number) => lines.get(index) ?? [];
    await waitFor(
      'three workers each on a lane',
      () => started.workers.every((w) => printed(w.index).some((line) => /and its lane \d/.test(line))),
      30_000,
    );
    const lanes = started.workers.map((w) => /and its lane (\d)/.exec(printed(w.index).join('\n'))?.[1]);
    expect(new Set(lanes).size).toBe(3);

    // The first worker to start an optimizer step is killed in it (SIGKILL), the next of the other two
    // to start one is drained (SIGTERM): mid-step and mid-run, whichever holds the work.
    const inStep = (candidates: readonly WorkerProcess[]) =>
      waitFor(
        'a worker in an optimizer step',
        () => candidates.find((w) => printed(w.index).at(-1) === 'slow optim_step started'),
        60_000,
        10,
      );
    const signalled = (async () => {
      const killed = await inStep(started.workers);
      process.kill(killed.pid, 'SIGKILL');
      const atKill = printed(killed.index).length;
      const drained = await inStep(started.workers.filter((w) => w !== killed));
      process.kill(drained.pid, 'SIGTERM');
      const survivor = started.workers.find((w) => w !== killed && w !== drained);
      if (survivor === undefined) throw new Error('no third worker');
      return { killed, drained, survivor, atKill };
    })();

    const scripts = generateWorkload({
      seed: SEED,
      modelsPerTenant: [2, 1, 1],
      actionsPerTenant: [24, 20, 16],
    });
    const clients = new Map<string, TinkerClient>();
    const drivers = await Promise.all(
      scripts.map(async (script) => {
        const client = await pipeline.client(script.tenant);
        clients.set(script.tenant, client);
        return new TenantDriver(script, client, harness);
      }),
    );
    // The sweeper re-plans expired leases (S4) on its schedule; here every second instead of every minute.
    let sweeping = true;
    const sweeper = (async () => {
      while (sweeping) {
        await pipeline.runtime.runSchedule('sweeper').catch(() => undefined);
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    })();
    try {
      await Promise.all(drivers.map((driver) => driver.run()));
      const { killed, drained, survivor, atKill } = await signalled;
      const ids = harness.submissions.map((submission) => submission.request_id);
      expect(new Set(ids).size).toBe(ids.length);
      expect(ids.length).toBe(countFutures(scripts));
      await waitTerminal(harness, ids, 45_000);

      // The killed worker died inside its step: no verdict line after the step began.
      expect(await killed.exited).toBe('SIGKILL');
      // (The last line is the supervisor's own note of its exit.)
      expect(printed(killed.index).slice(atKill)).toEqual(['exited (SIGKILL)']);
      expect(printed(killed.index).at(atKill - 1)).toBe('slow optim_step started');
      // The drained one finished or gave back its item, let go of its models and gave its lane back.
      expect(await drained.exited).toBe(0);
      expect(printed(drained.index).join('\n')).toMatch(
        /SIGTERM: no new work items[\s\S]*letting go of \d+ resident models/,
      );
      // Every answer is the sequential oracle's (R1): nothing lost, nothing applied twice.
      const answers = Object.fromEntries(await answersOverHttp(harness, clients));
      expect(answers).toEqual(Object.fromEntries(await harness.oracle()));
      // Every model is settled: none left in flight under a dead worker's claim.
      for (const driver of drivers) {
        for (const modelId of driver.modelIds.values()) {
          const row = (await harness.modelRow(modelId)) as ModelRow;
          expect(row.inflight, modelId).toBeUndefined();
        }
      }
      // The survivor ran work after both others were gone.
      const survivorItems = printed(survivor.index).filter((line) => / work item /.test(line));
      expect(survivorItems.length).toBeGreaterThan(0);
    } catch (error) {
      for (const [index, printedLines] of lines)
        process.stderr.write(`worker ${index}:\n  ${printedLines.join('\n  ')}\n`);
      throw error;
    } finally {
      sweeping = false;
      await sweeper;
    }
  });
});
