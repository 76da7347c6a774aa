import { beforeAll, describe, expect, it } from 'vitest';
import { runChaos } from '../../bench/chaos/chaos.js';
import { type ChaosReport, formatReport } from '../../bench/chaos/report.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { FAULT_KINDS } from '../support/faults.js';
import { startCloudRuntime } from '../support/runtime.js';

/**
 * The chaos run's short form (`npm run chaos` runs the full one): a few hundred mixed requests of
 * several tenants through the whole local stack while the SDK clients fail, lag and time out, the
 * scheduler and workers crash at their boundaries, SQS delivers twice and late, zombies wake after
 * their re-plan and worker Lambdas time out. It fails when any of the run's checks fails: a request
 * not terminal, an answer or checkpoint that differs from the sequential oracle (R1), an effect
 * committed twice (R7), an orphan left after the sweeper's GC, an unexplained dead letter.
 */

const REQUESTS = Number(process.env.CHAOS_REQUESTS ?? 300);
const SEED = Number(process.env.CHAOS_SEED ?? 20260601);

describe('chaos: faults, crashes, duplicate and late deliveries, zombies, Lambda timeouts', () => {
  let cloud: TestCloud;
  let report: ChaosReport;

  beforeAll(async () => {
    cloud = await setupTestCloud();
  });

  it(`${REQUESTS} requests (seed ${SEED}): every check of the run holds`, { timeout: 240_000 }, async () => {
    report = await runChaos(
      {
        env: cloud.env,
        admin: cloud.clients,
        names: cloud.names,
        startRuntime: ({ handlers, env }) =>
          startCloudRuntime(cloud, {
            env,
            handlers,
          }),
      },
      { requests: REQUESTS, seed: SEED },
    );
    expect(report.violations, formatReport(report)).toEqual([]);
    expect(report.requests).toBeGreaterThanOrEqual(REQUESTS - 5);
    expect(report.terminal).toBe(report.requests);
    expect(report.lost).toBe(0);
    expect(report.duplicated_effects).toBe(0);
    expect(report.sequential_equivalence).toBe(true);
  });

  it('the run injected what it claims: every fault kind, crashes, extra deliveries, refused zombies', () => {
    expect(report, 'the run did not complete').toBeDefined();
    const summary = formatReport(report);
    for (const kind of FAULT_KINDS) expect(report.faults[kind], `${kind}\n${summary}`).toBeGreaterThan(0);
    const deliveries = (report.faults.duplicateDelivery ?? 0) + (report.faults.lateDelivery ?? 0);
    expect(deliveries, summary).toBeGreaterThan(0);
    const crashes = Object.values(report.crashes).reduce((sum, count) => sum + count, 0);
    expect(crashes, summary).toBeGreaterThan(0);
    expect(report.recovery.zombies.refused, summary).toBeGreaterThan(0);
    // Worker processes leased lanes and held models (S1, S2); how much of the work they took (and so
    // how often a state was found resident or rebuilt) depends on the machine's load: the summary says.
    expect(report.recovery.worker_processes_with_lanes, summary).toBeGreaterThan(0);
    // Recovery did real work: deliveries failed and were retried, and the oracle covered saves.
    expect(report.recovery.failed_deliveries, summary).toBeGreaterThan(0);
    expect(report.checks.equivalence?.checkpoints_compared, summary).toBeGreaterThan(10);
    // R1 held with policy-gradient passes in the workload and samples cut mid-generation and resumed.
    expect(report.workload.actions.rl_pass, summary).toBeGreaterThan(0);
    expect(report.recovery.sample_cuts, summary).toBeGreaterThan(0);
    expect(report.recovery.sample_resumes, summary).toBeGreaterThan(0);
  });
});
