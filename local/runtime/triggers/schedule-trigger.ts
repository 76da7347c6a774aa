import { randomUUID } from 'node:crypto';
import type { ScheduledEvent } from 'aws-lambda';
import { logger } from '../../../shared/base/logger.js';
import type { FunctionId } from '../../../shared/base/topology.js';
import type { Invoker } from './invoker.js';

/** The event an EventBridge schedule delivers. */
export function scheduledEvent(functionId: FunctionId, region: string, now = new Date()): ScheduledEvent {
  return {
    version: '0',
    id: randomUUID(),
    'detail-type': 'Scheduled Event',
    source: 'aws.events',
    account: '000000000000',
    time: now.toISOString().replace(/\.\d{3}Z$/, 'Z'),
    region,
    resources: [`arn:aws:events:${region}:000000000000:rule/local-${functionId}-schedule`],
    detail: {},
  };
}

export interface ScheduleTrigger {
  /** Fires the schedule now and resolves with the handler's result (rejects with its error). */
  fire(): Promise<unknown>;
  stop(): void;
}

/** Fires every `rateMinutes`. A tick that finds the previous one still running is skipped locally. */
export function startScheduleTrigger(
  functionId: FunctionId,
  rateMinutes: number,
  invoker: Invoker,
  region: string,
): ScheduleTrigger {
  let running = false;
  const fire = async (): Promise<unknown> => {
    running = true;
    try {
      return await invoker.invoke(functionId, scheduledEvent(functionId, region));
    } finally {
      running = false;
    }
  };
  const timer = setInterval(() => {
    if (running) return;
    fire().catch((error: unknown) =>
      logger.error('scheduled handler failed', { functionId, error: error as Error }),
    );
  }, rateMinutes * 60_000);
  timer.unref();
  return { fire, stop: () => clearInterval(timer) };
}
