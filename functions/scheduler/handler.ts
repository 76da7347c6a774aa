import { observedHandler } from '../../shared/aws/lambda-handler.js';
import { createSchedulerHandler } from '../../shared/services/scheduler/invocation.js';

/** Futures/models streams and the schedule -> one tick; R5 retries reported per stream record. */
export const handler = observedHandler('scheduler', createSchedulerHandler());
