import { DeleteCommand, type DynamoDBDocumentClient, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { registryKey } from '../domain/records.js';
import { isAwsError } from '../errors.js';
import { logger } from '../logger.js';

/**
 * One tick at a time per pool. The lock is a registry item `tick#<pool>` taken by a conditional put
 * with a short lease. An invocation that finds it held sets `again` and returns: the holder runs one
 * more pass before it lets go, so a burst of triggers coalesces into a few passes instead of
 * stacking overlapping ticks. Safety never rests on this lock (the claim condition does, E2, E7): it
 * only saves work. The lease is short and a live holder renews it while it works (`hold`), so a
 * holder that dies (a Lambda timeout, an out-of-memory kill: no code runs to release) stalls the
 * pool's ticks for at most one short lease, not for the longest pass a live holder could run.
 */
export interface TickLock {
  /** `acquired`, or `held` by someone else (who was asked to run again). */
  acquire(holder: string, now: number): Promise<'acquired' | 'held'>;
  /**
   * After a pass: `released` when nobody asked for another pass, `again` (lease renewed, flag
   * cleared) when someone did, `lost` when the lease ran out and another holder took over.
   */
  finishPass(holder: string, now: number): Promise<'released' | 'again' | 'lost'>;
  /** Lets go whatever was asked (at the pass limit, or after an error). */
  release(holder: string): Promise<void>;
  /**
   * Renews the holder's lease every quarter lease until `stop()`, so passes may run longer than the
   * lease. It stops by itself once a renewal finds the lock lost; a renewal that errors is skipped
   * (the next one tries again, three of them fit in a lease).
   */
  hold(holder: string, now: () => number): { stop(): void };
}

/** How long a holder that stopped renewing keeps the lock; renewed every quarter of it. */
export const TICK_LOCK_LEASE_MS = 10_000;
/** A put and a flag can race with a release at most this many times before one of them wins. */
const ACQUIRE_ROUNDS = 5;
/** Tries of a release that fails (throttling, a 5xx): each failure would cost a whole lease. */
const RELEASE_ATTEMPTS = 3;
const RELEASE_BACKOFF_MS = 25;

export function tickLockKey(pool: string): string {
  return registryKey.tickLock(pool);
}

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
  const renew = async (holder: string, now: number, clearAgain = false): Promise<boolean> => {
    try {
      await doc.send(
        new UpdateCommand({
          TableName: registryTable,
          Key,
          UpdateExpression: `SET lease_until = :lease_until, #ttl = :ttl${clearAgain ? ' REMOVE again' : ''}`,
          ConditionExpression: 'holder = :holder',
          ExpressionAttributeNames: { '#ttl': 'ttl' },
          ExpressionAttributeValues: {
            ':holder': holder,
            ':lease_until': now + leaseMs,
            ':ttl': ttlFor(now),
          },
        }),
      );
      return true;
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
        await new Promise((resolve) => setTimeout(resolve, RELEASE_BACKOFF_MS * 2 ** attempt));
      }
    }
  };

  const tryPut = async (holder: string, now: number): Promise<boolean> => {
    try {
      await doc.send(
        new PutCommand({
          TableName: registryTable,
          Item: { ...Key, holder, lease_until: now + leaseMs, ttl: ttlFor(now) },
          ConditionExpression: 'attribute_not_exists(pk) OR lease_until <= :now',
          ExpressionAttributeValues: { ':now': now },
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

  const tryFlag = async (now: number): Promise<boolean> => {
    try {
      await doc.send(
        new UpdateCommand({
          TableName: registryTable,
          Key,
          UpdateExpression: 'SET again = :true',
          ConditionExpression: 'attribute_exists(pk) AND lease_until > :now',
          ExpressionAttributeValues: { ':true': true, ':now': now },
        }),
      );
      return true;
    } catch (error) {
      if (isAwsError(error, 'ConditionalCheckFailedException')) return false;
      throw error;
    }
  };

  return {
    async acquire(holder, now) {
      for (let round = 0; round < ACQUIRE_ROUNDS; round++) {
        if (await tryPut(holder, now)) return 'acquired';
        // Held: ask the holder for one more pass. If it let go meanwhile, try to take it again.
        if (await tryFlag(now)) return 'held';
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
        return 'released';
      } catch (error) {
        if (!isAwsError(error, 'ConditionalCheckFailedException')) throw error;
      }
      return (await renew(holder, now, true)) ? 'again' : 'lost';
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
