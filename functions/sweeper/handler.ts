import type { Context, ScheduledEvent } from 'aws-lambda';
import { observedHandler } from '../../shared/aws/lambda-handler.js';
import { type SweepReport, sweep } from '../../shared/services/sweeper/sweep.js';

/** Schedule (every minute) -> re-plan expired leases, collect unreferenced blobs, safety tick. */
export const handler = observedHandler(
  'sweeper',
  (_event: ScheduledEvent, context?: Pick<Context, 'getRemainingTimeInMillis'>): Promise<SweepReport> =>
    sweep(context === undefined ? {} : { remainingMs: () => context.getRemainingTimeInMillis() }),
);
