import { loadavg } from 'node:os';
import { startLocalStack } from '../local/runtime/stack.js';
import { type BenchResult, type Counts, machine, runCase } from './harness.js';
import { type LoadOptions, type LoadReport, runLoad } from './load/driver.js';
import { stackTarget } from './load/stack-target.js';

/**
 * `npm run bench -- load [--quick]`: the whole local stack as `npm start` runs it (HTTP API, streams
 * poller and scheduler, SQS and the worker Lambda, the sweeper's schedule) on 127.0.0.1, driven by 64
 * concurrent Tinker clients over several tenants and keys for a bounded time and request count
 * (bench/load/driver.ts): create_model, forward_backward + optim_step rounds, sampler checkpoints and
 * samples from them, every future long-polled until terminal. Measured: submits and completed
 * futures per second, submit round trip and submit-to-terminal latency (p50/p90/p99/max), errors by
 * kind (must be 0; retried throttles are counted apart), futures left non-terminal, and this
 * process's memory (the runtime, its handlers and fauxqs live here) sampled every second.
 *
 * Baseline (`one_client`): the same per-client workload from one client for the same time, on the
 * same stack, so the throughput ratio shows how the control plane scales with concurrent clients.
 */

const FULL: LoadOptions = {
  clients: 64,
  tenants: 8,
  keysPerTenant: 2,
  durationMs: 60_000,
  drainMs: 60_000,
  maxRequests: 20_000,
  minRoundsPerClient: 1,
  checkpointEvery: 4,
};
const QUICK: LoadOptions = { ...FULL, durationMs: 10_000, drainMs: 30_000, maxRequests: 3_000 };

/** The columns of the table; everything else is in `details`. */
function counts(report: LoadReport): Counts {
  return {
    clients: report.clients,
    requests: report.requests,
    futures_completed: report.futures_completed,
    submits_per_s: report.submits_per_s,
    completed_per_s: report.completed_per_s,
    submit_p50_ms: report.submit_latency.p50_ms,
    submit_p99_ms: report.submit_latency.p99_ms,
    e2e_p50_ms: report.e2e_latency.p50_ms,
    e2e_p99_ms: report.e2e_latency.p99_ms,
    e2e_max_ms: report.e2e_latency.max_ms,
    errors: report.errors_total,
    throttles: report.throttles_total,
    not_terminal: report.futures_not_terminal,
    pending_after: report.pending_futures_after ?? -1,
    rss_mb_peak: report.memory.rss_mb.peak,
    heap_mb_peak: report.memory.heap_used_mb.peak,
  };
}

const loadAverage = () => loadavg().map((value) => Math.round(value * 100) / 100);

export async function run(options: { quick: boolean }): Promise<BenchResult> {
  const shape = options.quick ? QUICK : FULL;
  const loadBefore = loadAverage();
  const stack = await startLocalStack({ prefix: `bench-load-${Date.now().toString(36)}` });
  const interrupt = new AbortController();
  const onSignal = () => {
    interrupt.abort();
    void stack.stop().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const target = stackTarget({
      apiUrl: stack.apiUrl,
      clients: stack.clients,
      futuresTable: stack.resources.tables.futures,
      registryTable: stack.resources.tables.registry,
      jvmPid: stack.cloud.dynamodbPid,
    });
    const details: Record<string, LoadReport> = {};
    const side = (name: string, clients: number) => async (): Promise<Counts> => {
      const report = await runLoad(target, {
        ...shape,
        clients,
        tenants: Math.min(shape.tenants, clients),
        signal: interrupt.signal,
      });
      if (interrupt.signal.aborted) throw new Error('interrupted');
      details[name] = report;
      if (
        report.errors_total > 0 ||
        report.futures_not_terminal > 0 ||
        (report.pending_futures_after ?? 0) > 0
      )
        console.warn(
          `load ${name}: errors ${JSON.stringify(report.errors)}, pending ${report.pending_futures_after}`,
        );
      return counts(report);
    };
    const measured = await runCase({
      name: 'mixed_closed_loop',
      params: {
        clients: shape.clients,
        tenants: shape.tenants,
        api_keys: shape.tenants * shape.keysPerTenant,
        duration_s: shape.durationMs / 1000,
        drain_limit_s: shape.drainMs / 1000,
        request_cap: shape.maxRequests,
        min_rounds_per_client: shape.minRoundsPerClient,
        round: 'forward_backward + optim_step, both awaited',
        checkpoint_every_rounds: shape.checkpointEvery,
        checkpoint_round_adds:
          'save_weights_for_sampler, create_sampling_session on it, asample (8 tokens), awaited',
        measured: `ours: ${shape.clients} clients against the whole local stack as npm start runs it (HTTP API, streams, scheduler, SQS, worker Lambda)`,
        compared_with: 'baseline (one_client): the same per-client workload from 1 client for the same time',
        memory: 'this process (runtime + handlers + fauxqs + load clients); jvm = DynamoDB Local',
      },
      ours: side('ours', shape.clients),
      baselines: { one_client: side('baseline', 1) },
      repeats: 1,
    });
    const ours = details.ours;
    const baseline = details.baseline;
    const throughputRatio =
      ours && baseline
        ? Math.round((ours.completed_per_s / Math.max(baseline.completed_per_s, 1e-3)) * 100) / 100
        : 0;
    // Both sides run for the same time, so their wall-time ratio says nothing: report throughput's.
    const { ratio_wall: _timeBound, ...rest } = measured;
    const result = {
      ...rest,
      ratio_completed_per_s: throughputRatio,
      load_average_before: loadBefore.join(' '),
      load_average_after: loadAverage().join(' '),
      details,
    };
    for (const [name, report] of Object.entries(details)) {
      const { rss_mb, heap_used_mb, jvm_rss_mb } = report.memory;
      const extent = (e: { start: number; peak: number; end: number } | undefined) =>
        e === undefined ? '-' : `${e.start}/${e.peak}/${e.end}`;
      console.log(
        `${name}: errors ${JSON.stringify(report.errors)} throttles ${JSON.stringify(report.throttles)}; ` +
          `submit ${JSON.stringify(report.submit_latency)}; e2e ${JSON.stringify(report.e2e_latency)}; ` +
          `MB start/peak/end: rss ${extent(rss_mb)} heap ${extent(heap_used_mb)} jvm ${extent(jvm_rss_mb)}`,
      );
    }
    console.log(
      `completed futures/s: ${ours?.completed_per_s} with ${shape.clients} clients vs ${baseline?.completed_per_s} with 1 (x${throughputRatio}); load average before ${loadBefore.join(' ')}`,
    );
    return { name: 'load', machine: machine(), quick: options.quick, cases: [result] };
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await stack.stop();
  }
}
