import type { TransactionCanceledException } from '@aws-sdk/client-dynamodb';
import {
  type DynamoDBDocumentClient,
  TransactWriteCommand,
  type TransactWriteCommandInput,
} from '@aws-sdk/lib-dynamodb';
import { isAwsError } from '../base/errors.js';

export type TransactItem = NonNullable<TransactWriteCommandInput['TransactItems']>[number];

/**
 * The outcome of one TransactWriteItems call. `cancelled` carries the per-item reason codes (in
 * item order; `None` for items that passed) so callers can tell a lost race on a condition from a
 * TransactionConflict, which is only ever retried (E5).
 */
export type TransactOutcome =
  | { readonly ok: true }
  | { readonly ok: false; readonly conditionFailed: boolean; readonly codes: readonly string[] };

/** Cancellation codes that mean "try again": contention and throttling, never the caller's fault. */
const RETRY_CODES = new Set(['TransactionConflict', 'ThrottlingError', 'ProvisionedThroughputExceeded']);

/**
 * Runs one transaction. `token` (at most 36 characters) is the ClientRequestToken, so an SDK retry of
 * a call that landed but whose answer was lost succeeds instead of failing its own conditions. Errors
 * other than a cancellation (throttling beyond the SDK's retries, timeouts) are thrown: the outcome is
 * then unknown and callers must not clean up as if nothing was written.
 */
export async function transactWrite(
  items: readonly TransactItem[],
  token: string,
  doc: DynamoDBDocumentClient,
): Promise<TransactOutcome> {
  try {
    await doc.send(new TransactWriteCommand({ TransactItems: [...items], ClientRequestToken: token }));
    return { ok: true };
  } catch (error) {
    if (isAwsError(error, 'TransactionInProgressException')) {
      return { ok: false, conditionFailed: false, codes: [] };
    }
    if (!isAwsError(error, 'TransactionCanceledException')) throw error;
    const codes = ((error as TransactionCanceledException).CancellationReasons ?? []).map(
      (reason) => reason.Code ?? 'None',
    );
    const unexpected = codes.find(
      (code) => code !== 'None' && code !== 'ConditionalCheckFailed' && !RETRY_CODES.has(code),
    );
    if (unexpected !== undefined) throw error;
    return { ok: false, conditionFailed: codes.includes('ConditionalCheckFailed'), codes };
  }
}
