import { ProvisionedThroughputExceededException } from '@aws-sdk/client-dynamodb';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import { realSleep } from '../../shared/aws/backoff.js';
import type { AwsClients } from '../../shared/aws/clients.js';
import { tickLock, tickLockKey } from '../../shared/services/scheduler/tick-lock.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { createFaultInjector, type FaultInjector } from '../support/faults.js';

/**
 * The pool's tick lock under the faults the chaos run found (regression): a lock write that timed
 * out after it landed, or a release that failed once, left the lock held until its lease ended, and
 * every tick of the pool coalesced into a holder that no longer existed: no dispatch for a lease. And
 * the lease itself: a live holder keeps renewing it, a dead one loses the lock after one short lease.
 */

describe('tick lock under SDK faults', () => {
  let cloud: TestCloud;
  let faulty: AwsClients;
  let faults: FaultInjector;
  let detach: () => void;
  let pool = 0;

  beforeAll(async () => {
    cloud = await setupTestCloud();
    faulty = localAwsClients(cloud.endpoints);
    faults = createFaultInjector({ seed: 1 });
    detach = faults.attach(faulty);
  });
  afterAll(() => {
    detach?.();
    for (const client of [faulty?.dynamo, faulty?.s3, faulty?.sqs]) client?.destroy();
  });

  const lockItem = async (name: string) =>
    (
      await cloud.clients.doc.send(
        new GetCommand({
          TableName: cloud.names.tables.registry,
          Key: { pk: tickLockKey(name) },
          ConsistentRead: true,
        }),
      )
    ).Item;

  it('an acquire whose write timed out after landing lets go of the lock: the next tick runs', async () => {
    const name = `lock-timeout-${pool++}`;
    const now = Date.now();
    // Taking the lock is an update (it keeps asks a dead holder left unserved).
    faults.set('timeoutAfterWrite', 1, 'UpdateItem');
    try {
      const holder = tickLock(faulty.doc, cloud.names.tables.registry, name);
      await expect(holder.acquire('crashed-holder', now)).rejects.toMatchObject({ name: 'TimeoutError' });
      expect(faults.counts.timeoutAfterWrite).toBeGreaterThan(0);
    } finally {
      faults.set('timeoutAfterWrite', 0, 'UpdateItem');
    }
    expect(await lockItem(name)).toBeUndefined();
    const next = tickLock(cloud.clients.doc, cloud.names.tables.registry, name);
    expect(await next.acquire('next-holder', now + 1)).toBe('acquired');
  });

  it('a live holder keeps the lock past its lease; one that stops renewing loses it after one lease', async () => {
    const name = `lock-hold-${pool++}`;
    const leaseMs = 400;
    const holder = tickLock(cloud.clients.doc, cloud.names.tables.registry, name, leaseMs);
    const other = tickLock(cloud.clients.doc, cloud.names.tables.registry, name, leaseMs);
    expect(await holder.acquire('alive', Date.now())).toBe('acquired');
    const heartbeat = holder.hold('alive', Date.now);
    try {
      await realSleep(3 * leaseMs);
      // Three leases later the renewed lock is still held: the other tick coalesces into it.
      expect(await other.acquire('late', Date.now())).toBe('held');
    } finally {
      heartbeat.stop();
    }
    // The holder dies (no release): within one lease of its last renewal the lock is free again.
    await realSleep(leaseMs + 50);
    expect(await other.acquire('late', Date.now())).toBe('acquired');
    expect(await lockItem(name)).toMatchObject({ holder: 'late' });
  });

  it('a holder whose lock was taken over cannot renew it back', async () => {
    const name = `lock-lost-${pool++}`;
    const leaseMs = 400;
    const holder = tickLock(cloud.clients.doc, cloud.names.tables.registry, name, leaseMs);
    const other = tickLock(cloud.clients.doc, cloud.names.tables.registry, name, leaseMs);
    expect(await holder.acquire('stalled', Date.now())).toBe('acquired');
    // The holder stalled past its lease (as seen from the other tick's clock), which takes over.
    expect(await other.acquire('taker', Date.now() + leaseMs + 1)).toBe('acquired');
    const heartbeat = holder.hold('stalled', Date.now);
    try {
      await realSleep(2 * leaseMs);
      expect(await lockItem(name)).toMatchObject({ holder: 'taker' });
    } finally {
      heartbeat.stop();
    }
  });

  it('a release that fails once is tried again: the lock is free afterwards', async () => {
    const name = `lock-release-${pool++}`;
    const now = Date.now();
    const lock = tickLock(faulty.doc, cloud.names.tables.registry, name);
    expect(await lock.acquire('holder', now)).toBe('acquired');
    // The first DeleteItem is throttled (as after the SDK's own retries), the next one goes through.
    let throttled = 0;
    faulty.dynamo.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'DeleteItemCommand' && throttled++ === 0) {
          throw new ProvisionedThroughputExceededException({ message: 'throttled once', $metadata: {} });
        }
        return next(args);
      },
      { step: 'initialize', name: 'throttleOneDelete' },
    );
    try {
      await lock.release('holder');
    } finally {
      faulty.dynamo.middlewareStack.remove('throttleOneDelete');
    }
    expect(throttled).toBe(2);
    expect(await lockItem(name)).toBeUndefined();
    const next = tickLock(cloud.clients.doc, cloud.names.tables.registry, name);
    expect(await next.acquire('next-holder', now + 1)).toBe('acquired');
  });
});
