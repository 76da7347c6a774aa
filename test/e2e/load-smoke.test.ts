import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runLoad } from '../../bench/load/driver.js';
import { stackTarget } from '../../bench/load/stack-target.js';
import type { LocalRuntime } from '../../local/runtime/lambda-runtime.js';
import { FUNCTION_IDS } from '../../shared/base/topology.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { startCloudRuntime } from '../support/runtime.js';

/**
 * The load benchmark's driver (bench/load/driver.ts) in small: a few concurrent clients over two
 * tenants against every function behind its triggers (HTTP API, streams, scheduler, SQS worker,
 * sweeper schedule), with a sampler checkpoint and a sample in every round. Nothing may fail, and
 * every future must end terminal, as the client sees it and as the futures table holds it.
 */
describe('load driver against the local runtime', () => {
  let cloud: TestCloud;
  let runtime: LocalRuntime;

  beforeAll(async () => {
    cloud = await setupTestCloud();
    runtime = await startCloudRuntime(cloud);
  });
  afterAll(async () => {
    await runtime?.stop();
  });

  it('4 clients for 2 s (at least one round each): zero errors, every future terminal, every round awaited', async () => {
    const report = await runLoad(
      stackTarget({
        apiUrl: runtime.apiUrl!,
        clients: cloud.clients,
        futuresTable: cloud.names.tables.futures,
        registryTable: cloud.names.tables.registry,
      }),
      {
        clients: 4,
        tenants: 2,
        keysPerTenant: 1,
        durationMs: 2_000,
        // Generous for a loaded machine (a round takes about 1 s idle); the run ends by 23 s anyway.
        drainMs: 20_000,
        maxRequests: 400,
        minRoundsPerClient: 1,
        checkpointEvery: 1,
      },
    );

    // On a failure, the whole report says where the time went.
    const { memory: _memory, ...detail } = report;
    expect(report.errors, JSON.stringify(detail)).toEqual({});
    expect(report.clients_ended_early).toBe(0);
    expect(report.futures_not_terminal).toBe(0);
    expect(report.pending_futures_after).toBe(0);
    expect(report.futures_failed).toBe(0);
    expect(report.futures_completed).toBe(report.futures);
    // Every client got its session and model and at least one whole round: a pass and a step, a
    // sampler checkpoint, a sampling session on it and a sample.
    const submitted = report.submitted;
    expect(submitted.create_session).toBe(4);
    expect(submitted.create_model).toBe(4);
    expect(submitted.forward_backward).toBeGreaterThanOrEqual(4);
    expect(submitted.optim_step).toBe(submitted.forward_backward);
    expect(submitted.save_weights_for_sampler).toBe(submitted.forward_backward);
    expect(submitted.create_sampling_session).toBe(submitted.save_weights_for_sampler);
    expect(submitted.asample).toBe(submitted.save_weights_for_sampler);
    expect(report.futures).toBe(4 + 4 * (submitted.forward_backward ?? 0));
    expect(report.e2e_latency.n).toBe(report.futures);
    expect(report.memory.samples).toBeGreaterThanOrEqual(2);
  }, 30_000);
});

/** The driver's own check can fail: with no worker, every future is still pending at the deadline. */
describe('load driver against a runtime with no worker', () => {
  let cloud: TestCloud;
  let runtime: LocalRuntime;

  beforeAll(async () => {
    cloud = await setupTestCloud();
    runtime = await startCloudRuntime(cloud, {
      // Short long polls, so the runtime stops without waiting out a 25 s poll.
      env: { LONG_POLL_SECONDS: '1' },
      functions: FUNCTION_IDS.filter((id) => id !== 'worker'),
    });
  });
  afterAll(async () => {
    await runtime?.stop();
  });

  it('reports the stuck futures as not terminal, as errors, and as pending in the table', async () => {
    const report = await runLoad(
      stackTarget({
        apiUrl: runtime.apiUrl!,
        clients: cloud.clients,
        futuresTable: cloud.names.tables.futures,
        registryTable: cloud.names.tables.registry,
      }),
      {
        clients: 2,
        tenants: 1,
        keysPerTenant: 1,
        durationMs: 0,
        drainMs: 2_000,
        maxRequests: 10,
        minRoundsPerClient: 0,
        checkpointEvery: 1,
      },
    );

    expect(report.submitted).toEqual({ create_model: 2, create_session: 2 });
    expect(report.futures_not_terminal).toBe(2);
    expect(report.errors).toEqual({ 'create_model:not_terminal': 2 });
    expect(report.clients_ended_early).toBe(2);
    expect(report.pending_futures_after).toBe(2);
    expect(report.futures_completed).toBe(0);
  }, 20_000);
});
