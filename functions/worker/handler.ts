import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import type { Backend } from '../../shared/backend/backend.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { logger } from '../../shared/logger.js';
import { describeVerdict, processWorkMessage, type WorkerOptions } from '../../shared/worker/index.js';

/**
 * SQS-triggered worker (batchSize 1 in the topology) on the reference CPU backend. A message whose
 * work failed with an infrastructure error (or was cut short by the deadline) is reported in
 * `batchItemFailures` and delivered again; a zombie or redelivered work item is a success.
 *
 * Near the end of the invocation: when the remaining time falls under `cutMarginMs`, running samples
 * are cut (their prefixes saved by `remaining - saveMarginMs`, they go back to pending and resume on
 * another worker); under `abandonMarginMs`, whatever still runs is abandoned so the answer goes out.
 */
export interface WorkerHandlerOptions {
  readonly backend?: Backend;
  /** Cut running samples below this remaining time (default 30 s of the 300 s timeout). */
  readonly cutMarginMs?: number;
  /** A cut's prefix save must be durable this long before the timeout (default 15 s). */
  readonly saveMarginMs?: number;
  /** Stop starting new boundaries this long before the timeout (default 10 s). */
  readonly abandonMarginMs?: number;
  /** How often the remaining time is checked between slice boundaries (default 250 ms). */
  readonly checkEveryMs?: number;
  /** Further runtime options (tests: clients, hooks, slice size). */
  readonly worker?: Omit<WorkerOptions, 'backend' | 'signal' | 'cut' | 'cutWhen' | 'cutDeadline'>;
}

export function createWorkerHandler(
  options: WorkerHandlerOptions = {},
): (event: SQSEvent, context?: Context) => Promise<SQSBatchResponse> {
  const backend = options.backend ?? new ReferenceBackend();
  const cutMarginMs = options.cutMarginMs ?? 30_000;
  const saveMarginMs = options.saveMarginMs ?? 15_000;
  const abandonMarginMs = options.abandonMarginMs ?? 10_000;
  const checkEveryMs = options.checkEveryMs ?? 250;

  return async (event, context) => {
    const failures: { itemIdentifier: string }[] = [];
    const abandon = new AbortController();
    const cut = new AbortController();
    const remaining = context === undefined ? undefined : () => context.getRemainingTimeInMillis();
    const check = (): boolean => {
      if (remaining === undefined) return false;
      const left = remaining();
      if (left < abandonMarginMs) abandon.abort();
      if (left < cutMarginMs) cut.abort();
      return cut.signal.aborted;
    };
    const timer = remaining === undefined ? undefined : setInterval(check, checkEveryMs);
    timer?.unref();
    const deadline = (): number => Date.now() + (remaining?.() ?? Number.POSITIVE_INFINITY) - saveMarginMs;
    try {
      for (const record of event.Records) {
        const verdict = await processWorkMessage(record.body, {
          ...options.worker,
          backend,
          signal: abandon.signal,
          cut: cut.signal,
          // Also checked at every slice boundary, so a cut never waits for the timer.
          cutWhen: check,
          ...(remaining === undefined ? {} : { cutDeadline: deadline }),
        });
        logger.info(describeVerdict(verdict), { message_id: record.messageId });
        if (!verdict.done) failures.push({ itemIdentifier: record.messageId });
      }
    } finally {
      clearInterval(timer);
    }
    return { batchItemFailures: failures };
  };
}

export const handler = createWorkerHandler();
