import type { SQSClient } from '@aws-sdk/client-sqs';
import { runWorkerProcess } from '../../bin/worker.js';
import type { Backend } from '../../shared/backend/backend.js';
import type { WorkerEvent } from '../../shared/services/worker/index.js';
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
        this.options.runAsWorker(() =>
          runWorkerProcess({
            queueUrl: this.options.queueUrl,
            backend: this.options.backend(),
            sqs: this.options.sqs(),
            stop: stop.signal,
            abandon: abandon.signal,
            waitTimeSeconds: 1,
            visibilityTimeoutSeconds: this.options.visibilitySeconds,
            extendEveryMs: (this.options.visibilitySeconds * 1000) / 3,
            worker: {
              sampleSliceTokens: this.options.sliceTokens,
              cutPollMs: this.options.cutPollMs,
              onEvent: this.options.onEvent,
            },
            print,
          }),
        ),
      )
      .catch(() => 0);
    return { process, stop, abandon, running };
  }
}
