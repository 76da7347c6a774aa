import type { Context, DynamoDBBatchResponse, DynamoDBStreamEvent, ScheduledEvent } from 'aws-lambda';
import { logger } from '../../base/logger.js';
import { schedulerAdapters } from './adapters.js';
import { schedulerSettings } from './settings.js';
import { pendingFutureRecords, recordsToRetry } from './stream-check.js';
import { runTick, type TickOptions } from './tick.js';
import { WAKE_ALL, wokenBy } from './wake.js';

export type SchedulerEvent = DynamoDBStreamEvent | ScheduledEvent;
export type SchedulerHandler = (
  event: SchedulerEvent,
  context?: Pick<Context, 'getRemainingTimeInMillis'>,
) => Promise<DynamoDBBatchResponse>;

function isStreamEvent(event: SchedulerEvent): event is DynamoDBStreamEvent {
  return 'Records' in event && Array.isArray(event.Records);
}

/**
 * The scheduler function: every trigger (a futures or models stream batch, the schedule) runs one
 * tick. A stream batch's tick reads only the models its records name (R5: incremental); the schedule,
 * the drain switch and a batch naming no model take the full look. After a stream-triggered tick, the futures records whose rows no scan showed yet and that
 * are still unplanned are reported as batch item failures, so the stream retries them (R5).
 * `tickOptions` is called per invocation (configuration is read then); tests inject adapters there.
 */
export function createSchedulerHandler(tickOptions: () => TickOptions = () => ({})): SchedulerHandler {
  return async (event, context) => {
    const base = tickOptions();
    const settings = base.settings ?? schedulerSettings();
    const adapters = base.adapters ?? schedulerAdapters(settings);
    const now = base.now ?? Date.now;
    const outcome = await runTick({
      ...base,
      settings,
      adapters,
      now,
      wake: isStreamEvent(event) ? wokenBy(event.Records) : WAKE_ALL,
      ...(context === undefined ? {} : { remainingMs: () => context.getRemainingTimeInMillis() }),
    });
    if (!isStreamEvent(event)) return { batchItemFailures: [] };
    const rows = pendingFutureRecords(event.Records);
    const retry = await recordsToRetry(rows, outcome.seen, adapters, now());
    if (retry.length > 0) {
      logger.info('stream records not visible to the tick yet; retried', {
        records: retry.length,
        tick: outcome.status,
      });
    }
    return { batchItemFailures: retry.map((itemIdentifier) => ({ itemIdentifier })) };
  };
}
