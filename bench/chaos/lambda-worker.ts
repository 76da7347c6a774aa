import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { createWorkerHandler } from '../../functions/worker/handler.js';
import type { Backend } from '../../shared/backend/backend.js';
import { hashString, seedWords, uniformAt } from '../../shared/backend/reference/prng.js';
import type { WorkerEvent } from '../../shared/services/worker/index.js';
import type { DeliveryLog } from './delivery-log.js';
import { LAMBDA_TIMEOUT_POINT } from './plan.js';
import { type Processes, type SimProcess, workItemIdOf } from './processes.js';
import type { ZombieAgent } from './zombie.js';

/**
 * The worker Lambda as the local runtime's queue trigger invokes it (the real handler, one simulated
 * process per invocation), with some invocations timing out: their context reports a deadline a
 * moment away, so the handler's own margins cut running samples (their prefixes saved, P1-P6) and
 * abandon what is left, and at the deadline the invocation is killed as Lambda kills it: whatever it
 * still does reaches nothing, and the message is not acknowledged. While zombies are wanted, some
 * invocations freeze after writing a model's state instead (see zombie.ts). Until a zombie has been
 * refused, every invocation while none is underway becomes one: a short run, whose few Lambda
 * invocations the seeded share could all pass by, still has its refused zombie.
 */

export interface LambdaWorkerOptions {
  readonly processes: Processes;
  /** The handler's backend (made once: a warm container's). */
  readonly backend: Backend;
  readonly log: DeliveryLog;
  readonly seed: number;
  /** Share of invocations that time out, and their deadline. */
  readonly timeoutShare: number;
  readonly timeoutAfterMs: { readonly min: number; readonly max: number };
  readonly sliceTokens: number;
  readonly cutPollMs: number;
  readonly onEvent: (event: WorkerEvent) => void | Promise<void>;
  /** An invocation timed out: killed at its deadline, or stopped by the handler's margins before it. */
  readonly onTimeout: () => void;
  /** Some invocations, while zombies are wanted, run their message as a zombie instead. */
  readonly zombies: ZombieAgent;
  readonly zombieShare: number;
}

/** The handler's margins, scaled to deadlines of about a second (the defaults suit a 300 s timeout). */
const MARGINS = { cutMarginMs: 400, saveMarginMs: 150, abandonMarginMs: 50, checkEveryMs: 20 } as const;

interface Invocation {
  readonly timesOut: boolean;
  deadline: number;
  /** The deadline was moved to the first sample slice (the timeout strikes while it samples). */
  pulled: boolean;
}

export class LambdaWorker {
  #invocations = 0;
  #timeouts = true;
  readonly #seed: [number, number];
  readonly #handler: ReturnType<typeof createWorkerHandler>;
  readonly #running = new Map<SimProcess, Invocation>();

  constructor(private readonly options: LambdaWorkerOptions) {
    this.#seed = seedWords(options.seed);
    this.#handler = createWorkerHandler({
      ...MARGINS,
      backend: options.backend,
      worker: {
        sampleSliceTokens: options.sliceTokens,
        cutPollMs: options.cutPollMs,
        onEvent: (event) => this.#onEvent(event),
      },
    });
  }

  /**
   * A timed-out invocation that samples runs out of time at its first sample slice, so the handler
   * cuts its samples mid-generation (their prefixes saved, back to pending, resumed elsewhere).
   */
  #onEvent(event: WorkerEvent): void | Promise<void> {
    if (event.kind === 'sample-slice') this.#pullDeadline();
    return this.options.onEvent(event);
  }

  #pullDeadline(): void {
    const process = this.options.processes.current();
    const invocation = process === undefined ? undefined : this.#running.get(process);
    if (invocation?.timesOut !== true || invocation.pulled) return;
    invocation.pulled = true;
    invocation.deadline = Math.min(invocation.deadline, Date.now() + MARGINS.cutMarginMs - 1);
  }

  async #asZombie(event: SQSEvent): Promise<SQSBatchResponse> {
    const batchItemFailures: { itemIdentifier: string }[] = [];
    for (const record of event.Records) {
      const { done } = await this.options.zombies.serve(record.body, record.receiptHandle);
      this.options.log.record(workItemIdOf(record.body), { by: 'zombie', done, explained: true });
      if (!done) batchItemFailures.push({ itemIdentifier: record.messageId });
    }
    return { batchItemFailures };
  }

  /** No more timeouts (the run's final phase). */
  calm(): void {
    this.#timeouts = false;
  }

  readonly handler = async (event: SQSEvent, context: Context): Promise<SQSBatchResponse> => {
    const { processes, log } = this.options;
    const call = this.#invocations++;
    const draw = (extra: number) =>
      uniformAt(this.#seed[0], this.#seed[1], hashString('lambda'), call, extra);
    const { zombies } = this.options;
    if (zombies.refusalOwed) return this.#asZombie(event);
    if (zombies.wanted && draw(2) < this.options.zombieShare) return this.#asZombie(event);
    const timesOut = this.#timeouts && draw(0) < this.options.timeoutShare;
    const { min, max } = this.options.timeoutAfterMs;
    const invocation: Invocation = {
      timesOut,
      deadline: Date.now() + (timesOut ? min + (max - min) * draw(1) : context.getRemainingTimeInMillis()),
      pulled: false,
    };
    const invocationContext: Context = timesOut
      ? { ...context, getRemainingTimeInMillis: () => Math.max(0, invocation.deadline - Date.now()) }
      : context;
    const process = processes.create('lambda-worker', true);
    this.#running.set(process, invocation);
    const records = event.Records.map((record) => ({
      id: record.messageId,
      workItem: workItemIdOf(record.body),
    }));
    const logAll = (done: (id: string) => boolean) => {
      const explained = process.dead || process.injected > 0;
      for (const record of records)
        log.record(record.workItem, { by: 'lambda-worker', done: done(record.id), explained });
    };

    const running = processes.run(process, () => this.#handler(event, invocationContext));
    let timer: NodeJS.Timeout | undefined;
    const killed = new Promise<'killed'>((resolve) => {
      if (!timesOut) return;
      timer = setInterval(() => {
        if (Date.now() >= invocation.deadline) resolve('killed');
      }, MARGINS.checkEveryMs);
    });
    try {
      const answer = await Promise.race([running, killed]);
      if (answer === 'killed') {
        processes.kill(process, LAMBDA_TIMEOUT_POINT);
        this.options.onTimeout();
        // The handler runs on, dead: nothing it does leaves the process.
        running.catch(() => undefined);
        logAll(() => false);
        throw Object.assign(new Error('Task timed out (injected)'), { name: 'TaskTimedOut' });
      }
      // Ran into its deadline's margins: samples cut and parts abandoned by the handler itself.
      if (timesOut && Date.now() >= invocation.deadline - MARGINS.cutMarginMs) {
        process.injected++;
        this.options.onTimeout();
      }
      const failed = new Set(answer.batchItemFailures.map((failure) => failure.itemIdentifier));
      logAll((id) => !failed.has(id));
      return answer;
    } catch (error) {
      if (!(error instanceof Error && error.name === 'TaskTimedOut')) logAll(() => false);
      throw error;
    } finally {
      clearInterval(timer);
      this.#running.delete(process);
    }
  };
}
