import type { Context, ScheduledEvent } from 'aws-lambda';
import { type SweepReport, sweep } from '../../shared/sweeper/sweep.js';

/** Schedule (every minute) -> re-plan expired leases, collect unreferenced blobs, safety tick. */
export async function handler(
  _event: ScheduledEvent,
  context?: Pick<Context, 'getRemainingTimeInMillis'>,
): Promise<SweepReport> {
  return sweep(context === undefined ? {} : { remainingMs: () => context.getRemainingTimeInMillis() });
}
