import { monitorEventLoopDelay } from 'node:perf_hooks';
import { QueryCommand } from '@aws-sdk/lib-dynamodb';
import type { AwsClients } from '../../shared/aws/clients.js';
import type { Backend } from '../../shared/backend/backend.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { liveKey } from '../../shared/base/ids.js';
import { LIVE_INDEX } from '../../shared/base/topology.js';
import { readFutureResult } from '../../shared/repositories/futures.js';
import { NoisyBackend } from '../../test/support/noisy-backend.js';
import type { Answer } from '../../test/support/worker-harness.js';
import { ChaosStack, type ChaosTarget } from './chaos-stack.js';
import { Backpressure } from './client.js';
import { describePending } from './diagnose.js';
import { answersOverHttp, checkEquivalence, newOracleRecord } from './equivalence.js';
import { checkLineage } from './lineage-checks.js';
import { CRASH_ARMING, chaosSettings, FAULT_RATES } from './plan.js';
import { checkDeadLetters, queueDepth } from './queue-checks.js';
import { type ChaosReport, violationsOf } from './report.js';
import { checkState } from './state-checks.js';
import { checkStorage, committedCheckpoints, readBlob } from './storage-checks.js';
import { clientsByRequest, runTenants, type TenantsOutcome } from './tenants.js';
import { chaosWorkload } from './workload.js';

export type { ChaosTarget } from './chaos-stack.js';

/**
 * The chaos run: a mixed multi-tenant workload through the whole local stack (HTTP API, streams,
 * scheduler, S3 work items, SQS, worker Lambda and worker processes, sweeper) while the SDK clients
 * fail, lag and time out by seeded chance, processes die at the crash points, SQS delivers twice or
 * late, zombies wake after their re-plan and Lambda invocations time out. Phases: load (the tenants
 * submit everything), drain (every accepted request must end; the chaos goes on), settle (chaos off,
 * the work queue empties, answers are read over HTTP), then the checks of report.ts.
 */

export interface ChaosOptions {
  readonly requests: number;
  readonly seed: number;
  /** The functions' log level (default SILENT: injected faults make them log a lot). */
  readonly logLevel?: string;
  readonly progress?: (line: string) => void;
  /** Give up waiting when no request ended for this long (default 120 s). */
  readonly stallMs?: number;
  /**
   * The workers' backend (default `reference`). `noisy` (`NoisyBackend`) makes every run's states and
   * metrics differ, as a GPU engine's do: the answers are then not compared with the sequential
   * oracle (R1 cannot hold bit for bit), and the lineage check (E3-E5) takes its place.
   */
  readonly backend?: ChaosBackend;
}

export type ChaosBackend = 'reference' | 'noisy';

/** Each worker's backend; noisy ones seeded apart, so no two instances draw the same tags. */
function backendFactory(kind: ChaosBackend, seed: number): () => Backend {
  let made = 0;
  return () => (kind === 'noisy' ? new NoisyBackend(seed * 1000 + ++made) : new ReferenceBackend());
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Pending requests: rows in the live index (terminal rows leave it). */
async function pendingCount(admin: AwsClients, table: string, pool: string, shards: number): Promise<number> {
  let count = 0;
  for (let shard = 0; shard < shards; shard++) {
    let start: Record<string, unknown> | undefined;
    do {
      const page = await admin.doc.send(
        new QueryCommand({
          TableName: table,
          IndexName: LIVE_INDEX,
          KeyConditionExpression: 'live = :live',
          ExpressionAttributeValues: { ':live': liveKey(pool, shard) },
          Select: 'COUNT',
          ExclusiveStartKey: start,
        }),
      );
      count += page.Count ?? 0;
      start = page.LastEvaluatedKey;
    } while (start !== undefined);
  }
  return count;
}

export async function runChaos(target: ChaosTarget, options: ChaosOptions): Promise<ChaosReport> {
  const started = performance.now();
  const elapsed = () => (performance.now() - started) / 1000;
  const { seed, requests } = options;
  const progress = options.progress ?? (() => {});
  const settings = chaosSettings(requests);
  const workload = chaosWorkload(requests, seed);
  const { admin, names } = target;
  const pool = target.env.POOL ?? 'default';
  const shards = Number(target.env.LIVE_SHARDS ?? 1);
  const record = newOracleRecord();
  const backend = options.backend ?? 'reference';
  const stack = new ChaosStack(target, settings, seed, backendFactory(backend, seed));
  // Everything runs in this one process: a blocked event loop delays lease renewals like a slow host.
  const loopDelay = monitorEventLoopDelay({ resolution: 20 });
  loopDelay.enable();
  const backpressure = new Backpressure(settings.maxPending, () =>
    pendingCount(admin, names.tables.futures, pool, shards),
  );

  /** The most requests seen ended so far, and when that last grew: a run stalls when it stops growing. */
  let ended = { count: 0, at: performance.now() };
  const sawPending = (pending: number) => {
    const count = record.submissions.length - pending;
    if (count > ended.count) ended = { count, at: performance.now() };
  };
  const status = async (phase: string): Promise<number> => {
    const pending = await pendingCount(admin, names.tables.futures, pool, shards);
    sawPending(pending);
    progress(
      `${elapsed().toFixed(0).padStart(4)} s  ${phase}: ${record.submissions.length}/${workload.futures} accepted, ` +
        `${pending} pending; ${stack.injector.total} faults, ${stack.crashTotal} crashes, ` +
        `${stack.zombies.report.stalled} zombies`,
    );
    if (pending > 0 && performance.now() - ended.at > 10_000) {
      const lines = await describePending({ admin, tables: names.tables, pool, shards, now: Date.now() });
      for (const line of lines.slice(0, 12)) progress(`      ${line}`);
    }
    return pending;
  };

  progress(
    `chaos: ${workload.futures} requests from ${workload.tenants} tenants on ${workload.models} models, seed ${seed}`,
  );
  let tenants: TenantsOutcome;
  let answers: Map<string, Answer>;
  let queueLeft: number;
  const phases: Record<string, number> = {};
  try {
    await stack.start(options.logLevel ?? 'SILENT');
    const apiUrl = stack.runtime.apiUrl;
    if (apiUrl === undefined) throw new Error('the runtime serves no HTTP API');
    phases.start_s = elapsed();

    const ticker = setInterval(() => void status('load').catch(() => undefined), 5_000);
    backpressure.start();
    try {
      tenants = await runTenants({
        scripts: workload.scripts,
        apiUrl,
        admin,
        registryTable: names.tables.registry,
        record,
        gate: backpressure.gate,
        onError: (line) => progress(`client error: ${line}`),
      });
    } finally {
      clearInterval(ticker);
      backpressure.stop();
    }
    phases.load_s = elapsed();

    // Every accepted request must end; the chaos goes on meanwhile.
    const stallMs = options.stallMs ?? 120_000;
    let reported = performance.now();
    for (;;) {
      const pending = await pendingCount(admin, names.tables.futures, pool, shards);
      sawPending(pending);
      if (pending === 0) break;
      if (performance.now() - ended.at > stallMs) {
        progress(`no request ended for ${stallMs / 1000} s; ${pending} still pending`);
        break;
      }
      if (performance.now() - reported > 5_000) {
        reported = performance.now();
        await status('drain');
      }
      await sleep(1_000);
    }
    phases.drain_s = elapsed();

    // What is checked is what the chaos left: no more injections, and the work queue empties.
    await stack.calm();
    await status('settle');
    const deadline = Date.now() + settings.visibilitySeconds * 3000 + 20_000;
    queueLeft = await queueDepth(admin.sqs, names.queueUrls.work);
    while (queueLeft > 0 && Date.now() < deadline) {
      await sleep(500);
      queueLeft = await queueDepth(admin.sqs, names.queueUrls.work);
    }
    answers = await answersOverHttp(record, clientsByRequest(tenants.drivers));
    phases.settle_s = elapsed();
  } finally {
    await stack.stop();
  }

  progress(`${elapsed().toFixed(0).padStart(4)} s  checking`);
  const {
    report: state,
    futures,
    models,
  } = await checkState({
    doc: admin.doc,
    tables: names.tables,
    record,
    effects: stack.effects,
  });
  const checkpoints = await committedCheckpoints(admin.doc, names.tables.registry);
  const read = (key: string) => readBlob(admin.s3, names.bucket, key);
  const equivalence =
    backend === 'reference'
      ? await checkEquivalence({
          record,
          answers,
          futures,
          readBlob: read,
          checkpointBlobKey: (requestId) => checkpoints.get(requestId)?.blob_key,
        })
      : undefined;
  const lineage =
    backend === 'noisy'
      ? await checkLineage({
          models,
          futures,
          readBlob: read,
          readResult: (row) => readFutureResult(admin.s3, names.bucket, row),
        })
      : undefined;
  const storage = await checkStorage({
    s3: admin.s3,
    doc: admin.doc,
    bucket: names.bucket,
    tables: names.tables,
    futures,
    models,
    checkpoints,
  });
  const deadLetters = await checkDeadLetters(admin.sqs, names.queueUrls.workDlq, stack.log);
  const deliveryFailures = stack.log.failures();
  phases.check_s = elapsed();

  // Policy-gradient passes counted apart, so a run shows it trained with logprobs and advantages.
  const kinds = workload.scripts.flatMap((script) =>
    script.actions.map((action) =>
      action.kind === 'pass' && action.loss !== undefined ? 'rl_pass' : action.kind,
    ),
  );
  const usage = process.cpuUsage();
  loopDelay.disable();
  const report: ChaosReport = {
    name: 'chaos',
    seed,
    backend,
    requests: state.accepted,
    wall_time_s: Math.round(elapsed() * 10) / 10,
    faults: {
      ...stack.injector.counts,
      ...stack.deliveries.counts,
      zombieWorker: stack.zombies.report.stalled,
    },
    crashes: stack.crashes,
    crash_point_hits: { ...stack.points.hits },
    terminal: state.terminal,
    lost: state.lost.length,
    duplicated_effects: state.duplicated_effects,
    sequential_equivalence: equivalence?.equivalent ?? null,
    violations: [],
    phases_s: Object.fromEntries(
      Object.entries(phases).map(([name, at]) => [name, Math.round(at * 10) / 10]),
    ),
    workload: {
      tenants: workload.tenants,
      models: workload.models,
      planned_requests: workload.futures,
      actions: Object.fromEntries(
        [...new Set(kinds)].map((kind) => [kind, kinds.filter((k) => k === kind).length]),
      ),
      client_retries: tenants.retries.retried,
      samples_skipped_after_e2: tenants.skipped,
      backpressure_wait_s: Math.round(backpressure.waitedMs / 100) / 10,
    },
    recovery: {
      deliveries: stack.log.deliveries,
      failed_deliveries: deliveryFailures.failed,
      unexplained_failed_deliveries: deliveryFailures.unexplained,
      unexplained_details: stack.log.unexplainedDetails,
      worker_processes_started: stack.fleet.started,
      worker_processes_with_lanes: stack.fleet.lanes,
      resident: stack.fleet.residency,
      sample_cuts: stack.worker.sample_cuts,
      sample_resumes: stack.worker.sample_resumes,
      zombies: stack.zombies.report,
      sweeps: stack.sweeps.runs,
      commit_transactions: stack.effects.transactions,
      work_queue_left: queueLeft,
      driver_errors: tenants.errors,
    },
    checks: {
      state,
      ...(equivalence === undefined ? {} : { equivalence }),
      ...(lineage === undefined ? {} : { lineage }),
      storage,
      dead_letters: deadLetters,
    },
    sdk_calls: stack.injector.calls,
    sdk_calls_by_function: stack.processes.calls,
    event_loop_delay_ms: {
      p50: Math.round(loopDelay.percentile(50) / 1e6),
      p99: Math.round(loopDelay.percentile(99) / 1e6),
      max: Math.round(loopDelay.max / 1e6),
    },
    cpu_s: {
      harness_process: Math.round((usage.user + usage.system) / 1e5) / 10,
      ...(target.cpuSeconds === undefined ? {} : { dynamodb_local: target.cpuSeconds() }),
    },
    settings: { ...settings, fault_rates: FAULT_RATES, crash_arming: CRASH_ARMING },
  };
  report.violations.push(...violationsOf(report));
  return report;
}
