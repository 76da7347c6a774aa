import type { SQSClient } from '@aws-sdk/client-sqs';
import { runWorkerProcess } from '../../bin/worker.js';
import { awsClients } from '../../shared/aws/clients.js';
import type { Backend } from '../../shared/backend/backend.js';
import { mintRunId } from '../../shared/base/ids.js';
import type { WorkerEvent } from '../../shared/services/worker/index.js';
import { Residency, type ResidencyPolicy } from '../../shared/services/worker/residency.js';
import { WorkLane } from '../../shared/services/worker/work-lane.js';
import type { DeliveryLog } from './delivery-log.js';
import type { Processes, SimProcess } from './processes.js';

/**
 * `npm run worker` loops (bin/worker.ts) on the work queue beside the worker Lambda, each
 * a simulated process. A loop killed at a crash point is stopped (its message stays unacknowledged
 * until the visibility timeout) and a fresh one takes its slot, as a supervisor would restart it.
 */

export interface ProcessFleetOptions {
  readonly processes: Processes;
  /** A worker process's backend, made when it starts. */
  readonly backend: () => Backend;
  readonly log: DeliveryLog;
  readonly queueUrl: string;
  /** The runtime's (fault-injected) SQS client, looked up when a loop starts. */
  readonly sqs: () => SQSClient;
  /** Runs a loop under the worker's grants and environment, as on a host with its policy. */
  readonly runAsWorker: <T>(run: () => Promise<T>) => Promise<T>;
  readonly visibilitySeconds: number;
  readonly sliceTokens: number;
  readonly cutPollMs: number;
  readonly onEvent: (event: WorkerEvent) => void | Promise<void>;
  /**
   * Each loop leases a work lane and keeps its models resident (S1, S2), with this policy (short
   * holds and frequent snapshots, so kills, let-goes and replays all happen in a short run).
   */
  readonly residency?: {
    readonly policy: ResidencyPolicy;
    readonly laneLeaseMs: number;
    readonly registryTable: string;
    readonly pool: string;
    readonly laneQueueUrl: (lane: number) => string;
  };
}

interface Slot {
  process: SimProcess;
  stop: AbortController;
  abandon: AbortController;
  running: Promise<unknown>;
}

export class ProcessFleet {
  readonly #slots: Slot[] = [];
  #stopping = false;
  /** Loops started (the first ones and every restart). */
  started = 0;
  /** Loops that leased a work lane (and kept their models resident). */
  lanes = 0;
  readonly #residencies: Residency[] = [];

  /** The holders' counters summed over every loop (hits, rebuilds, let-goes, lost holds). */
  get residency(): Record<string, number> {
    const sum: Record<string, number> = {};
    for (const residency of this.#residencies) {
      for (const [name, value] of Object.entries(residency.counters)) sum[name] = (sum[name] ?? 0) + value;
    }
    return sum;
  }

  constructor(private readonly options: ProcessFleetOptions) {}

  start(count: number): void {
    for (let index = 0; index < count; index++) this.#slots.push(this.#spawn());
  }

  /** A killed loop is stopped and replaced (called from `Processes.onKill`). */
  killed(process: SimProcess): void {
    const index = this.#slots.findIndex((slot) => slot.process === process);
    const slot = this.#slots[index];
    if (slot === undefined) return;
    slot.stop.abort();
    slot.abandon.abort();
    void slot.running.finally(() => {
      if (!this.#stopping && this.#slots[index] === slot) this.#slots[index] = this.#spawn();
    });
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    for (const slot of this.#slots) slot.stop.abort();
    await Promise.allSettled(this.#slots.map((slot) => slot.running));
  }

  #spawn(): Slot {
    const { processes, log } = this.options;
    const process = processes.create('process-worker', true);
    const stop = new AbortController();
    const abandon = new AbortController();
    let injectedBefore = 0;
    const print = (line: string) => {
      // One line per message handled; the message is the one this process received last.
      const done = !line.includes('left for redelivery');
      const explained = process.dead || process.injected > injectedBefore;
      injectedBefore = process.injected;
      log.record(process.workItemId, { by: 'process-worker', done, explained, detail: line });
    };
    this.started++;
    const running = processes
      .run(process, () =>
        this.options.runAsWorker(async () => {
          const backend = this.options.backend();
          const resident = this.options.residency;
          const worker = `w-${mintRunId()}`;
          const lane =
            resident === undefined
              ? undefined
              : await WorkLane.acquire(
                  { doc: awsClients().doc, registryTable: resident.registryTable, pool: resident.pool },
                  worker,
                  { leaseMs: resident.laneLeaseMs },
                );
          const residency =
            resident === undefined || lane === undefined
              ? undefined
              : new Residency(backend, undefined, resident.policy, { worker, lane: lane.lane });
          if (lane !== undefined) this.lanes++;
          if (residency !== undefined) this.#residencies.push(residency);
          try {
            return await runWorkerProcess({
              queueUrl: this.options.queueUrl,
              ...(lane === undefined || resident === undefined
                ? {}
                : { lane: { queueUrl: resident.laneQueueUrl(lane.lane), lost: lane.lost } }),
              backend,
              sqs: this.options.sqs(),
              stop: stop.signal,
              abandon: abandon.signal,
              waitTimeSeconds: 1,
              // One work item at a time: `print` attributes each line (and the faults injected since
              // the last one) to the message this process received last.
              maxWorkItems: 1,
              visibilityTimeoutSeconds: this.options.visibilitySeconds,
              extendEveryMs: (this.options.visibilitySeconds * 1000) / 3,
              worker: {
                sampleSliceTokens: this.options.sliceTokens,
                cutPollMs: this.options.cutPollMs,
                onEvent: this.options.onEvent,
                ...(residency === undefined ? {} : { residency }),
              },
              print,
            });
          } finally {
            // A killed process lets go of nothing: its holds and its lane lapse (S4 recovers them).
            if (process.dead) {
              residency?.abandon();
              lane?.abandon();
            } else {
              await residency?.letGoAll();
              await lane?.release();
            }
          }
        }),
      )
      .catch(() => 0);
    return { process, stop, abandon, running };
  }
}
