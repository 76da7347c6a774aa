import { BatchWriteCommand } from '@aws-sdk/lib-dynamodb';
import { type BackoffPolicy, backoffDelay, type Clock } from '../../aws/backoff.js';
import { RETRYABLE_ERROR_NAMES } from '../../aws/transient-errors.js';
import { InfrastructureError, isAwsError } from '../../base/errors.js';
import type { PrefixTable } from './table.js';

/**
 * One BatchWriteItem call (<= 25 requests), driven to completion: UnprocessedItems (throttled or
 * over a limit) and throttling errors are retried with capped exponential backoff and full jitter,
 * and the SDK's own retries do not cover them. `mayStart` is asked before every send, so no write
 * starts once the caller has given up (deadline, abort, its group failed).
 */

export type WriteRequest =
  | { readonly PutRequest: { readonly Item: Record<string, unknown> } }
  | { readonly DeleteRequest: { readonly Key: Record<string, unknown> } };

export interface BatchWriteContext {
  readonly clock: Clock;
  readonly backoff: BackoffPolicy;
  readonly signal?: AbortSignal;
  /** Returns a reason to stop, or undefined to go on. */
  readonly mayStart: () => string | undefined;
}

/** The batch was not (fully) written; `reason` says why. Some of its requests may have landed. */
export class BatchWriteStoppedError extends InfrastructureError {
  override readonly name = 'BatchWriteStoppedError';
  constructor(
    readonly reason: string,
    message: string,
    options: { cause?: unknown } = {},
  ) {
    super(message, { ...options, context: { reason } });
  }
}

export async function writeBatch(
  table: PrefixTable,
  requests: readonly WriteRequest[],
  ctx: BatchWriteContext,
): Promise<void> {
  let pending = requests;
  for (let retry = 0; pending.length > 0; retry++) {
    const stop = ctx.mayStart();
    if (stop !== undefined) throw new BatchWriteStoppedError(stop, `batch write stopped: ${stop}`);
    try {
      const output = await table.doc.send(
        new BatchWriteCommand({
          RequestItems: { [table.tableName]: pending as WriteRequest[] },
        }),
        ctx.signal === undefined ? {} : { abortSignal: ctx.signal },
      );
      pending = (output.UnprocessedItems?.[table.tableName] ?? []) as WriteRequest[];
      if (pending.length === 0) return;
    } catch (error) {
      if (!isAwsError(error, ...RETRYABLE_ERROR_NAMES) || ctx.signal?.aborted) {
        throw new BatchWriteStoppedError('write-failed', `batch write failed: ${String(error)}`, {
          cause: error,
        });
      }
    }
    if (retry >= ctx.backoff.maxRetries) {
      throw new BatchWriteStoppedError('write-failed', `batch write gave up after ${retry + 1} tries`);
    }
    await ctx.clock.sleep(backoffDelay(retry, ctx.backoff, ctx.clock.random), ctx.signal);
  }
}
