import { DeleteCommand, type DynamoDBDocumentClient, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { exponentialDelay, realSleep } from '../../aws/backoff.js';
import { isAwsError } from '../../base/errors.js';
import { logger } from '../../base/logger.js';
import { registryKey } from '../../base/registry-keys.js';
import { WAKE_ALL, type WakeScope, wakeModels } from './wake.js';

/**
 * One tick at a time per pool. The lock is a registry item `tick#<pool>` taken by a conditional put
 * with a short lease. An invocation that finds it held sets `again` and returns: the holder runs one
 * more pass before it lets go, so a burst of triggers coalesces into a few passes instead of
 * stacking overlapping ticks. Safety never rests on this lock (the claim condition does, E2, E7): it
 * only saves work. The lease is short and a live holder renews it while it works (`hold`), so a
 * holder that dies (a Lambda timeout, an out-of-memory kill: no code runs to release) stalls the
 * pool's ticks for at most one short lease, not for the longest pass a live holder could run.
 *
 * An asker says what its extra pass must read (R5): the models its trigger named (`wake`, a string
 * set, unioned over askers) or everything (`again_all`). A plain `again` means everything, as it
 * did before askers named models. Taking the lock is an update, not a put, so asks a holder left
 * unserved (it died, or lost its lease) stay on the item and are served by the next holder.
 */
export interface TickLock {
  /**
   * `acquired`, or `held` by someone else (who was asked to run again over `wake`, by default
   * everything).
   */
  acquire(holder: string, now: number, wake?: WakeScope): Promise<'acquired' | 'held'>;
  /**
   * After a pass: `released` when nobody asked for another pass, `again` (lease renewed, asks
   * cleared) with what the asks name when someone did, `lost` when the lease ran out and another
   * holder took over.
   */
  finishPass(holder: string, now: number): Promise<PassEnd>;
  /** Lets go whatever was asked (at the pass limit, or after an error). */
  release(holder: string): Promise<void>;
  /**
   * Renews the holder's lease every quarter lease until `stop()`, so passes may run longer than the
   * lease. It stops by itself once a renewal finds the lock lost; a renewal that errors is skipped
   * (the next one tries again, three of them fit in a lease).
   */
  hold(holder: string, now: () => number): { stop(): void };
}

export type PassEnd =
  | { readonly status: 'released' | 'lost' }
  | { readonly status: 'again'; readonly wake: WakeScope };

/** Models one lock item may name before askers ask for everything (the item stays far below 400 KB). */
export const MAX_ASKED_MODELS = 1_000;

/** How long a holder that stopped renewing keeps the lock; renewed every quarter of it. */
export const TICK_LOCK_LEASE_MS = 10_000;
/** A put and a flag can race with a release at most this many times before one of them wins. */
const ACQUIRE_ROUNDS = 5;
/** Tries of a release that fails (throttling, a 5xx): each failure would cost a whole lease. */
const RELEASE_ATTEMPTS = 3;
/** Waits 50 ms, then 100 ms, between release tries. */
const RELEASE_BACKOFF = { baseMs: 25, capMs: 1_000 } as const;

export const tickLockKey = registryKey.tickLock;

export function tickLock(
  doc: DynamoDBDocumentClient,
  registryTable: string,
  pool: string,
  leaseMs: number = TICK_LOCK_LEASE_MS,
): TickLock {
  const Key = { pk: tickLockKey(pool) };
  /** TTL (epoch seconds) removes a lock whose holder vanished, long after its lease. */
  const ttlFor = (now: number): number => Math.ceil((now + leaseMs) / 1000) + 3600;

  /**
   * The holder's lease from `now` (and, with `clearAgain`, the request for another pass taken up);
   * false when the lock is no longer the holder's.
   */
  const renew = async (holder: string, now: number, clearAgain = false): Promise<WakeScope | boolean> => {
    try {
      const answer = await doc.send(
        new UpdateCommand({
          TableName: registryTable,
          Key,
          UpdateExpression: `SET lease_until = :lease_until, #ttl = :ttl${clearAgain ? ' REMOVE again, again_all, wake' : ''}`,
          ConditionExpression: 'holder = :holder',
          ExpressionAttributeNames: { '#ttl': 'ttl' },
          ExpressionAttributeValues: {
            ':holder': holder,
            ':lease_until': now + leaseMs,
            ':ttl': ttlFor(now),
          },
          ...(clearAgain ? { ReturnValues: 'ALL_OLD' as const } : {}),
        }),
      );
      return clearAgain ? askedScope(answer.Attributes) : true;
    } catch (error) {
      if (isAwsError(error, 'ConditionalCheckFailedException')) return false;
      throw error;
    }
  };

  const deleteMine = async (holder: string): Promise<void> => {
    try {
      await doc.send(
        new DeleteCommand({
          TableName: registryTable,
          Key,
          ConditionExpression: 'holder = :holder',
          ExpressionAttributeValues: { ':holder': holder },
        }),
      );
    } catch (error) {
      if (!isAwsError(error, 'ConditionalCheckFailedException')) throw error;
    }
  };

  /** A failed delete would leave the pool without ticks until the lease ends: try a few times. */
  const release = async (holder: string): Promise<void> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await deleteMine(holder);
      } catch (error) {
        if (attempt >= RELEASE_ATTEMPTS) throw error;
        await realSleep(exponentialDelay(attempt, RELEASE_BACKOFF));
      }
    }
  };

  const tryTake = async (holder: string, now: number): Promise<boolean> => {
    try {
      // An update keeps what a previous holder was asked and never served (see above).
      await doc.send(
        new UpdateCommand({
          TableName: registryTable,
          Key,
          UpdateExpression: 'SET holder = :holder, lease_until = :lease_until, #ttl = :ttl',
          ConditionExpression: 'attribute_not_exists(pk) OR lease_until <= :now',
          ExpressionAttributeNames: { '#ttl': 'ttl' },
          ExpressionAttributeValues: {
            ':holder': holder,
            ':lease_until': now + leaseMs,
            ':ttl': ttlFor(now),
            ':now': now,
          },
        }),
      );
      return true;
    } catch (error) {
      if (isAwsError(error, 'ConditionalCheckFailedException')) return false;
      // The put may have landed (a timeout after the write): let go of what may be ours, or the
      // pool has no tick until the lease ends.
      await release(holder).catch(() => undefined);
      throw error;
    }
  };

  /** Asks the live holder for another pass over `wake`; false when nobody holds the lock. */
  const tryFlag = async (now: number, wake: WakeScope): Promise<boolean> => {
    if (wake.kind === 'models') {
      // A set grown past its bound asks for everything instead (the second form below).
      if (
        await tryAsk(now, 'SET again = :true ADD wake :wake', {
          condition: ' AND (attribute_not_exists(wake) OR size(wake) < :max)',
          values: { ':wake': new Set(wake.modelIds), ':max': MAX_ASKED_MODELS },
        })
      )
        return true;
    }
    return tryAsk(now, 'SET again = :true, again_all = :true', { condition: '', values: {} });
  };

  const tryAsk = async (
    now: number,
    update: string,
    extra: { condition: string; values: Record<string, unknown> },
  ): Promise<boolean> => {
    try {
      await doc.send(
        new UpdateCommand({
          TableName: registryTable,
          Key,
          UpdateExpression: update,
          ConditionExpression: `attribute_exists(pk) AND lease_until > :now${extra.condition}`,
          ExpressionAttributeValues: { ':true': true, ':now': now, ...extra.values },
        }),
      );
      return true;
    } catch (error) {
      if (isAwsError(error, 'ConditionalCheckFailedException')) return false;
      throw error;
    }
  };

  return {
    async acquire(holder, now, wake = WAKE_ALL) {
      for (let round = 0; round < ACQUIRE_ROUNDS; round++) {
        if (await tryTake(holder, now)) return 'acquired';
        // Held: ask the holder for one more pass. If it let go meanwhile, try to take it again.
        if (await tryFlag(now, wake)) return 'held';
      }
      return 'held';
    },

    async finishPass(holder, now) {
      try {
        await doc.send(
          new DeleteCommand({
            TableName: registryTable,
            Key,
            ConditionExpression: 'holder = :holder AND attribute_not_exists(again)',
            ExpressionAttributeValues: { ':holder': holder },
          }),
        );
        return { status: 'released' };
      } catch (error) {
        if (!isAwsError(error, 'ConditionalCheckFailedException')) throw error;
      }
      const asked = await renew(holder, now, true);
      return typeof asked === 'boolean' ? { status: 'lost' } : { status: 'again', wake: asked };
    },

    release,

    hold(holder, now) {
      let renewing = false;
      const timer = setInterval(() => {
        if (renewing) return;
        renewing = true;
        renew(holder, now())
          .then(
            (kept) => {
              if (!kept) clearInterval(timer);
            },
            (error: unknown) => logger.debug('tick lock renewal failed; the next one tries again', { error }),
          )
          .finally(() => {
            renewing = false;
          });
      }, leaseMs / 4);
      // Never keeps a process alive on its own.
      timer.unref();
      return { stop: () => clearInterval(timer) };
    },
  };
}

/** What the asks on a lock item name: everything, unless only model-naming askers asked. */
function askedScope(item: Record<string, unknown> | undefined): WakeScope {
  const wake = item?.wake;
  if (item?.again_all === true || !(wake instanceof Set) || wake.size === 0) return WAKE_ALL;
  return wakeModels([...wake].filter((id): id is string => typeof id === 'string'));
}
