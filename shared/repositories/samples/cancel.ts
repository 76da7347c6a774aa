import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { backoffDelay, realSleep } from '../../aws/backoff.js';
import { type TransactItem, transactWrite } from '../../aws/transact.js';
import { InfrastructureError } from '../../base/errors.js';
import { sha256Hex } from '../../base/ids.js';
import type { FutureError } from '../../domain/records.js';
import { futureEndItem } from '../futures.js';
import { logEntryItem, takeLogPosition, voidLogPosition } from '../session-log.js';
import type { Tables } from '../tables.js';
import { sampleUnclaimedItem } from './claims.js';

/** What a cancelled sample's future answers through retrieve_future. */
export const CANCELLED: FutureError = { message: 'the sample was cancelled by the client', category: 'user' };

const MAX_ATTEMPTS = 20;
const BACKOFF = { baseMs: 10, capMs: 500, maxRetries: MAX_ATTEMPTS };

/**
 * cancel_future (W9): ends a queued sample as failed, in one transaction with the check that no worker
 * holds its claim and, when the sample has a session log, its log entry (so the session's poll answers
 * it like any other end). `false` when the sample is running (a claim is held) or already ended: it is
 * left to finish, and the log position taken for it is voided. A log position voided meanwhile is
 * replaced by a new one, as a commit does.
 */
export async function cancelQueuedSample(
  doc: DynamoDBDocumentClient,
  tables: Tables<'futures' | 'registry'>,
  sample: { readonly requestId: string; readonly tenant: string; readonly sessionLog?: string },
  now: number,
): Promise<boolean> {
  // The log position taken for the entry: kept across contention retries, replaced only when a poll
  // voided it, and voided here when the cancel does not land (a running or ended sample), so the
  // session's polls never wait at a position nobody fills.
  let position: number | undefined;
  const giveUp = async (): Promise<false> => {
    if (sample.sessionLog !== undefined && position !== undefined) {
      await voidLogPosition(doc, tables.registry, sample.sessionLog, position, now).catch(() => false);
    }
    return false;
  };
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
    const items: TransactItem[] = [
      futureEndItem(tables.futures, sample.requestId, { status: 'failed', error: CANCELLED }, now),
      sampleUnclaimedItem(tables.registry, sample.requestId, now),
    ];
    if (sample.sessionLog !== undefined) {
      position ??= await takeLogPosition(doc, tables.registry, sample.sessionLog, now);
      items.push(
        logEntryItem(tables.registry, {
          logKey: sample.sessionLog,
          position,
          requestId: sample.requestId,
          state: 'failed',
          tenant: sample.tenant,
          now,
        }),
      );
    }
    // Unique per attempt (at most 36 characters, like the commits' tokens).
    const token = sha256Hex(`cancel\u0000${sample.requestId}\u0000${attempt}`).slice(0, 36);
    const outcome = await transactWrite(items, token, doc);
    if (outcome.ok) return true;
    const [future, claim, entry] = outcome.codes;
    if (future === 'ConditionalCheckFailed' || claim === 'ConditionalCheckFailed') return giveUp();
    if (entry === 'ConditionalCheckFailed') {
      // A poll voided the position: the next attempt takes a new one.
      position = undefined;
    } else if (outcome.conditionFailed) {
      return giveUp();
    }
    await realSleep(backoffDelay(attempt, BACKOFF, Math.random));
  }
  throw new InfrastructureError(`cancel of ${sample.requestId} met too much contention; retry`, {
    context: { request_id: sample.requestId },
  });
}
