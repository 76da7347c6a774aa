import type { Backend } from '../../shared/backend/backend.js';
import type { ModelRow } from '../../shared/domain/records.js';
import { processWorkMessage, type WorkerEvent } from '../../shared/services/worker/index.js';
import { gate } from '../../test/support/wait.js';
import type { Processes } from './processes.js';

/**
 * Zombie workers (E4, E7): a worker invocation that freezes right after writing a model's state
 * (a stalled container, a long GC pause, a partition), renewing no lease. The lease ends, the sweeper
 * re-plans the model, healthy workers run it again; only then does the zombie wake and try to commit.
 * Its commit must fail its condition and change nothing (`lost`).
 */

export interface ZombieReport {
  /** Zombies that stalled after writing a model's state. */
  stalled: number;
  /** Woke after the re-plan and were refused (their commit changed nothing). */
  refused: number;
  /**
   * Woke and found their commit landed: no re-plan came, because SQS redelivered the frozen
   * invocation's message and that copy ran the same epoch and committed (its lease renewals kept the
   * model from a re-plan). Only when holding the message back failed (see `holdMessage`). E5 settles
   * the zombie's failed commit by re-reading the model row (its state key is the row's): nothing is
   * applied twice.
   */
  committed: number;
  /** Other outcomes of the stalled part (a crash, an injected failure), by name. */
  readonly other: string[];
}

export interface ZombieOptions {
  readonly processes: Processes;
  readonly backend: Backend;
  readonly readModel: (modelId: string) => Promise<ModelRow | undefined>;
  readonly sliceTokens: number;
  /** Zombies wanted in the run. */
  readonly count: number;
  /** How long a zombie waits for its model's re-plan before waking anyway. */
  readonly maxStallMs: number;
  /**
   * Keeps the zombie's message invisible for `seconds` (ChangeMessageVisibility). A frozen Lambda
   * invocation holds its message for the queue's visibility timeout, which AWS sets above the
   * function timeout: the lease ends and the sweeper re-plans long before SQS would redeliver. The
   * run's queue has a short timeout for the worker processes' sake, so a zombie holds its own.
   */
  readonly holdMessage: (receiptHandle: string, seconds: number) => Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export class ZombieAgent {
  readonly report: ZombieReport = { stalled: 0, refused: 0, committed: 0, other: [] };
  #active = true;
  /** `serve` calls not yet returned. */
  #underway = 0;

  constructor(private readonly options: ZombieOptions) {}

  /** More zombies are wanted (the worker Lambda turns an invocation into one). */
  get wanted(): boolean {
    return this.#active && this.report.stalled < this.options.count;
  }

  /**
   * No zombie has been refused yet and none is underway: the next invocation should become one. A
   * zombie can end otherwise (killed by an injected crash, or its commit landed through a duplicate
   * delivery of its message), and a run must still show a refused one, however few its invocations.
   */
  get refusalOwed(): boolean {
    return this.#active && this.report.refused === 0 && this.#underway === 0;
  }

  /** No more zombies (the run's final phase). */
  calm(): void {
    this.#active = false;
  }

  /**
   * Runs one work message as a zombie would, in its own simulated process: `done` as for any worker.
   * A work item without a model part runs normally (no zombie comes of it).
   */
  async serve(body: string, receiptHandle: string): Promise<{ readonly done: boolean }> {
    // Counted before the first await, so a concurrent invocation already sees this zombie underway.
    this.#underway++;
    try {
      return await this.#serve(body, receiptHandle);
    } finally {
      this.#underway--;
    }
  }

  async #serve(body: string, receiptHandle: string): Promise<{ readonly done: boolean }> {
    const { processes } = this.options;
    const process = processes.create('zombie', true);
    const stall = gate<WorkerEvent>((event) => event.kind === 'model-written');
    let stalledModel: string | undefined;
    /** The epoch each model part runs under, from its in-flight token (`<model>@<epoch>`). */
    const epochs = new Map<string, number>();
    const running = processes.run(process, () =>
      processWorkMessage(body, {
        backend: this.options.backend,
        renewEveryMs: 3_600_000,
        sampleSliceTokens: this.options.sliceTokens,
        onEvent: async (event) => {
          if (event.kind === 'model-started') {
            epochs.set(event.model_id, Number(event.inflight.split('@').pop()));
          }
          if (event.kind === 'model-written' && stalledModel === undefined) stalledModel = event.model_id;
          await stall.onEvent(event);
        },
      }),
    );
    const first = await Promise.race([
      running.then(() => 'finished' as const),
      stall.arrived.then(() => 'stalled' as const),
    ]);
    if (first === 'stalled' && stalledModel !== undefined) {
      this.report.stalled++;
      const holdSeconds = Math.ceil(this.options.maxStallMs / 1000) + 10;
      await this.options.holdMessage(receiptHandle, holdSeconds).catch(() => undefined);
      await this.#waitForReplan(stalledModel, epochs.get(stalledModel) ?? 0);
      stall.open();
    }
    const verdict = await running;
    if (first === 'stalled' && stalledModel !== undefined) {
      const part =
        'outcome' in verdict
          ? verdict.outcome.models.find((model) => model.model_id === stalledModel)
          : undefined;
      if (part?.outcome === 'lost') this.report.refused++;
      else if (part?.outcome === 'committed') this.report.committed++;
      else if (part?.outcome === 'failed') this.report.other.push(`failed: ${part.error}`);
      else this.report.other.push(part?.outcome ?? ('error' in verdict ? verdict.error : 'none'));
    }
    return { done: verdict.done && !process.dead };
  }

  /** Until the model's epoch moved past the zombie's (re-planned), and a little longer. */
  async #waitForReplan(modelId: string, epoch: number): Promise<void> {
    const deadline = Date.now() + this.options.maxStallMs;
    while (Date.now() < deadline) {
      const row = await this.options.readModel(modelId).catch(() => undefined);
      if (row !== undefined && row.epoch > epoch) break;
      await sleep(200);
    }
    await sleep(300);
  }
}
