import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { observedHandler } from '../../shared/aws/lambda-handler.js';
import type { Backend } from '../../shared/backend/backend.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { logger } from '../../shared/base/logger.js';
import {
  DEFAULT_DEADLINE_MARGINS,
  type DeadlineMargins,
  DeadlineStop,
  describeVerdict,
  processWorkMessage,
  type WorkerOptions,
} from '../../shared/services/worker/index.js';

/**
 * SQS-triggered worker (batchSize 1 in the topology) on the reference CPU backend. A message whose
 * work failed with an infrastructure error (or was cut short by the deadline) is reported in
 * `batchItemFailures` and delivered again; a zombie or redelivered work item is a success.
 *
 * Near the end of the invocation running samples are cut and then whatever still runs is abandoned,
 * so the answer goes out: the margins and the timer are `DeadlineStop`'s (shared/services/worker/stop-policy.ts).
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
  const margins: DeadlineMargins = {
    cutMarginMs: options.cutMarginMs ?? DEFAULT_DEADLINE_MARGINS.cutMarginMs,
    saveMarginMs: options.saveMarginMs ?? DEFAULT_DEADLINE_MARGINS.saveMarginMs,
    abandonMarginMs: options.abandonMarginMs ?? DEFAULT_DEADLINE_MARGINS.abandonMarginMs,
    checkEveryMs: options.checkEveryMs ?? DEFAULT_DEADLINE_MARGINS.checkEveryMs,
  };

  return async (event, context) => {
    const failures: { itemIdentifier: string }[] = [];
    const stop = new DeadlineStop(
      context === undefined ? undefined : () => context.getRemainingTimeInMillis(),
      margins,
    );
    try {
      for (const record of event.Records) {
        const verdict = await processWorkMessage(record.body, {
          ...options.worker,
          backend,
          ...stop.options,
        });
        logger.info(describeVerdict(verdict), { message_id: record.messageId });
        if (!verdict.done) failures.push({ itemIdentifier: record.messageId });
      }
    } finally {
      stop.dispose();
    }
    return { batchItemFailures: failures };
  };
}

export const handler = observedHandler('worker', createWorkerHandler());
