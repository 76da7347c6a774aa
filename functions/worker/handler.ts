import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { logger } from '../../shared/logger.js';
import { describeVerdict, processWorkMessage } from '../../shared/worker/index.js';

/**
 * SQS-triggered worker (batchSize 1 in the topology) on the reference CPU backend. A message whose
 * work failed with an infrastructure error (or was cut short by the deadline) is reported in
 * `batchItemFailures` and delivered again; a zombie or redelivered work item is a success.
 */
const backend = new ReferenceBackend();

/** Stop starting new boundaries this long before Lambda's deadline, so the answer still goes out. */
const DEADLINE_MARGIN_MS = 10_000;

export async function handler(event: SQSEvent, context?: Context): Promise<SQSBatchResponse> {
  const failures: { itemIdentifier: string }[] = [];
  const deadline = new AbortController();
  const remaining = context?.getRemainingTimeInMillis();
  const timer =
    remaining === undefined
      ? undefined
      : setTimeout(() => deadline.abort(), Math.max(0, remaining - DEADLINE_MARGIN_MS));
  try {
    for (const record of event.Records) {
      const verdict = await processWorkMessage(record.body, { backend, signal: deadline.signal });
      logger.info(describeVerdict(verdict), { message_id: record.messageId });
      if (!verdict.done) failures.push({ itemIdentifier: record.messageId });
    }
  } finally {
    clearTimeout(timer);
  }
  return { batchItemFailures: failures };
}
