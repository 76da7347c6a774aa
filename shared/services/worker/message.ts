import { faultHook } from '../../base/fault-hook.js';
import { logger, withLogKeys } from '../../base/logger.js';
import { parseManifest } from './load-work-item.js';
import { runWorkItem } from './runtime.js';
import type { WorkerOptions, WorkItemOutcome } from './types.js';

/**
 * One SQS message, as both drivers handle it. `done` means delete the message: the work item ran to an
 * end for every part (committed, or found to be someone else's: a zombie or a redelivery changes
 * nothing and is not retried). Otherwise it is left to be delivered again: a part failed with an
 * infrastructure error or was abandoned, or the work item could not be read (a poison message ends
 * in the dead-letter queue after maxReceiveCount).
 */
export type MessageVerdict =
  | { readonly done: boolean; readonly outcome: WorkItemOutcome }
  | { readonly done: false; readonly error: string };

export async function processWorkMessage(body: string, options: WorkerOptions): Promise<MessageVerdict> {
  try {
    const manifest = parseManifest(body);
    // Every line logged while it runs names the work item (its own scope: a GPU host runs several).
    const outcome = await withLogKeys({ work_item_id: manifest.work_item_id }, () =>
      runWorkItem(manifest, options),
    );
    faultHook.crash('worker:after-commit');
    return { done: !outcome.retry, outcome };
  } catch (error) {
    const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    logger.error('work item could not be run', { error: message });
    return { done: false, error: message };
  }
}

/** One line per work item, for the worker process's output. */
export function describeVerdict(verdict: MessageVerdict): string {
  if (!('outcome' in verdict)) return `work item unreadable (${verdict.error}); left for redelivery`;
  const { outcome } = verdict;
  const count = (parts: readonly { outcome: string }[]) => {
    const counts = new Map<string, number>();
    for (const part of parts) counts.set(part.outcome, (counts.get(part.outcome) ?? 0) + 1);
    return [...counts].map(([name, n]) => `${n} ${name}`).join(', ') || 'none';
  };
  return (
    `work item ${outcome.work_item_id}: models ${count(outcome.models)}; samples ${count(outcome.samples)}; ` +
    `${outcome.elapsed_ms} ms${verdict.done ? '' : '; left for redelivery'}`
  );
}
