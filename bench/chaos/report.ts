import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { EquivalenceReport } from './equivalence.js';
import type { LineageReport } from './lineage-checks.js';
import type { DeadLetterReport } from './queue-checks.js';
import type { StateReport } from './state-checks.js';
import type { StorageReport } from './storage-checks.js';
import type { ZombieReport } from './zombie.js';

/**
 * The chaos run's result (`bench/results/chaos.json`) and its verdict. A run passes only with no
 * violation:
 * - every accepted request terminal (`lost` = 0);
 * - R1 (reference backend): every answer, and every saved checkpoint (final weights included), equal
 *   to the sequential oracle's, bit-exact; every server failure one E2 allows;
 * - E3-E5 (noisy backend, in R1's place): every committed state readable, and the one its results
 *   were produced with (`LineageReport`);
 * - R7: no request accepted twice, no future ended and no model seq applied by two commits, every
 *   model settled with each seq applied once;
 * - E5: after the sweeper's blob GC (run as of a time past every grace period) no orphan payload,
 *   result, work item or model state, and nothing a row references gone;
 * - the dead-letter queue holds only messages whose failures were injected, and every failed
 *   delivery is explained by something injected;
 * - no tenant's client hit an answer a Tinker client would not retry, and the work queue drained.
 */
export interface ChaosReport {
  readonly name: 'chaos';
  readonly seed: number;
  readonly backend: 'reference' | 'noisy';
  readonly requests: number;
  readonly wall_time_s: number;
  readonly faults: Record<string, number>;
  readonly crashes: Record<string, number>;
  /** Times each crash point was reached (crashed or not). */
  readonly crash_point_hits: Record<string, number>;
  readonly terminal: number;
  readonly lost: number;
  readonly duplicated_effects: number;
  /** null on the noisy backend: not compared (see `checks.lineage`). */
  readonly sequential_equivalence: boolean | null;
  readonly violations: string[];
  /** Seconds since the start at which each phase ended. */
  readonly phases_s: Record<string, number>;
  readonly workload: {
    readonly tenants: number;
    readonly models: number;
    readonly planned_requests: number;
    readonly actions: Record<string, number>;
    readonly client_retries: Record<string, number>;
    readonly samples_skipped_after_e2: number;
    /** Time the tenants' submits waited for the backlog to shrink, summed. */
    readonly backpressure_wait_s: number;
  };
  readonly recovery: {
    readonly deliveries: number;
    readonly failed_deliveries: number;
    readonly unexplained_failed_deliveries: number;
    readonly unexplained_details: readonly string[];
    readonly worker_processes_started: number;
    /** Of those, the ones that leased a work lane and held models resident (S1, S2). */
    readonly worker_processes_with_lanes: number;
    /** Their residency counters summed: work items that found the state held, rebuilt it, let-goes. */
    readonly resident: Readonly<Record<string, number>>;
    readonly sample_cuts: number;
    /** Samples that went on from at least one restored prefix. */
    readonly sample_resumes: number;
    readonly zombies: ZombieReport;
    readonly sweeps: number;
    readonly commit_transactions: number;
    readonly work_queue_left: number;
    readonly driver_errors: readonly string[];
  };
  readonly checks: {
    readonly state: StateReport;
    /** Reference backend only. */
    readonly equivalence?: EquivalenceReport;
    /** Noisy backend only. */
    readonly lineage?: LineageReport;
    readonly storage: StorageReport;
    readonly dead_letters: DeadLetterReport;
  };
  /** SDK calls the functions made, by operation (what the local cloud served). */
  readonly sdk_calls: Record<string, number>;
  readonly sdk_calls_by_function: Record<string, number>;
  /** The harness process's event loop delay (every function runs in it: renewals wait behind compute). */
  readonly event_loop_delay_ms: Record<string, number>;
  readonly cpu_s: Record<string, number>;
  readonly settings: Record<string, unknown>;
}

const sample = (items: readonly string[]) =>
  items.slice(0, 5).join('; ') + (items.length > 5 ? `; ... (${items.length})` : '');

export function violationsOf(report: ChaosReport): string[] {
  const { state, equivalence, lineage, storage, dead_letters } = report.checks;
  const violations: string[] = [];
  const add = (count: number, what: string, items: readonly string[] = []) => {
    if (count > 0) violations.push(`${count} ${what}${items.length > 0 ? `: ${sample(items)}` : ''}`);
  };
  add(state.lost.length, 'accepted requests not terminal', state.lost);
  add(
    state.unexpected_futures.length,
    'futures nobody was given (a submit accepted twice)',
    state.unexpected_futures,
  );
  add(state.duplicate_commits.length, 'effects committed twice', state.duplicate_commits);
  add(state.unsettled_models.length, 'models not settled', state.unsettled_models);
  if (equivalence !== undefined) {
    add(
      equivalence.mismatches.length,
      'answers differ from the sequential oracle',
      equivalence.mismatches.map((m) => `${m.kind} ${m.request_id} got ${m.got} expected ${m.expected}`),
    );
    add(
      equivalence.checkpoint_mismatches.length,
      'checkpoints differ from the oracle',
      equivalence.checkpoint_mismatches,
    );
    add(
      equivalence.server_failed_unexplained.length,
      'server failures E2 does not explain',
      equivalence.server_failed_unexplained,
    );
  }
  if (lineage !== undefined) {
    add(lineage.unreadable.length, 'committed states unreadable', lineage.unreadable);
    add(
      lineage.mismatched.length,
      'committed states not the ones their results came from',
      lineage.mismatched,
    );
  }
  add(storage.orphan_payloads.length, 'orphan payloads after GC', storage.orphan_payloads);
  add(storage.orphan_results.length, 'orphan results after GC', storage.orphan_results);
  add(storage.orphan_work_items.length, 'work items left after GC', storage.orphan_work_items);
  add(storage.orphan_states.length, 'unreferenced model states after GC', storage.orphan_states);
  add(
    storage.orphan_checkpoints.length,
    'checkpoint blobs no name record names after GC',
    storage.orphan_checkpoints,
  );
  add(storage.orphan_archives.length, 'archives no name record names after GC', storage.orphan_archives);
  add(storage.dangling.length, 'referenced blobs missing', storage.dangling);
  add(
    dead_letters.unexplained.length,
    'dead-lettered messages nothing injected explains',
    dead_letters.unexplained,
  );
  add(
    report.recovery.unexplained_failed_deliveries,
    'failed deliveries nothing injected explains',
    report.recovery.unexplained_details,
  );
  add(
    report.recovery.driver_errors.length,
    'client errors a Tinker client would not retry',
    report.recovery.driver_errors,
  );
  add(report.recovery.work_queue_left, 'work messages left on the queue after the run');
  return violations;
}

const resultsDir = join(dirname(fileURLToPath(import.meta.url)), '..', 'results');

export function writeReport(report: ChaosReport, file = 'chaos.json'): string {
  mkdirSync(resultsDir, { recursive: true });
  const path = join(resultsDir, file);
  writeFileSync(path, `${JSON.stringify(report, null, 2)}\n`);
  return path;
}

export function formatReport(report: ChaosReport): string {
  const counts = (record: Record<string, number>) =>
    Object.entries(record)
      .map(([name, count]) => `${name} ${count}`)
      .join(', ');
  const { equivalence, lineage, storage, dead_letters } = report.checks;
  const lines = [
    `requests              ${report.requests} (${report.workload.tenants} tenants, ${report.workload.models} models), seed ${report.seed}`,
    `wall time             ${report.wall_time_s} s`,
    `faults                ${counts(report.faults)}`,
    `crashes               ${counts(report.crashes)}`,
    `terminal              ${report.terminal}/${report.requests} (lost ${report.lost})`,
    `duplicated effects    ${report.duplicated_effects}`,
    `backend               ${report.backend}`,
    equivalence === undefined
      ? 'sequential equivalence not compared (noisy backend)'
      : `sequential equivalence ${report.sequential_equivalence} (${equivalence.compared} answers, ${equivalence.checkpoints_compared} checkpoints; ${equivalence.server_failed} ended by E2's attempt limit)`,
    ...(lineage === undefined
      ? []
      : [
          `lineage (E3-E5)       ${lineage.states_readable}/${lineage.models_checked} committed states readable, ${lineage.tags_compared} compared with their results, ${lineage.mismatched.length} mismatched`,
        ]),
    `orphans after GC      payloads ${storage.orphan_payloads.length}, results ${storage.orphan_results.length}, work items ${storage.orphan_work_items.length}, states ${storage.orphan_states.length}, checkpoints ${storage.orphan_checkpoints.length}, archives ${storage.orphan_archives.length} (GC deleted ${storage.gc.payloads_deleted} payloads, ${storage.gc.results_deleted} results, ${storage.gc.work_items_deleted} work items, ${storage.gc.states_deleted} states, ${storage.gc.checkpoints_deleted} checkpoints, ${storage.gc.archives_deleted} archives)`,
    `dead letters          ${dead_letters.messages} (${dead_letters.explained} explained)`,
    `recovery              ${report.recovery.failed_deliveries}/${report.recovery.deliveries} deliveries failed, ${report.recovery.sample_cuts} sample cuts (${report.recovery.sample_resumes} resumed), zombies ${report.recovery.zombies.stalled} (refused ${report.recovery.zombies.refused}, committed ${report.recovery.zombies.committed}, other ${report.recovery.zombies.other.join('/') || 0}), ${report.recovery.worker_processes_started} worker processes started (${report.recovery.worker_processes_with_lanes} holding models on a lane: ${Object.entries(
      report.recovery.resident,
    )
      .map(([name, value]) => `${name} ${value}`)
      .join(', ')})`,
    report.violations.length === 0
      ? 'verdict               PASS'
      : `verdict               FAIL\n  - ${report.violations.join('\n  - ')}`,
  ];
  return lines.join('\n');
}
