import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { baseModelId } from '../../shared/domain/records.js';
import { schedulerAdapters } from '../../shared/services/scheduler/adapters.js';
import { schedulerSettings } from '../../shared/services/scheduler/settings.js';
import { runTick } from '../../shared/services/scheduler/tick.js';
import { wakeModels } from '../../shared/services/scheduler/wake.js';
import { type CallLog, loggedClients } from '../support/call-log.js';
import type { TestCloud } from '../support/cloud.js';
import {
  drainWorkItems,
  readyModel,
  samplingSession,
  schedulerCloud,
  submitSampleRequest,
  submitStep,
} from '../support/scheduler-harness.js';

/**
 * What one incremental tick costs, call by call (issue #16: on a CPU-bound stack its latency is its
 * number of calls and of round trips in sequence). A change that adds a call, or puts one that may
 * overlap back in sequence, fails here.
 */
describe('the calls of one incremental tick', () => {
  let cloud: TestCloud;
  let log: CallLog;
  let tick: (modelIds: string[]) => ReturnType<typeof runTick>;
  beforeEach(async () => {
    cloud = await schedulerCloud();
    const logged = loggedClients(cloud.endpoints, cloud.prefix);
    log = logged.log;
    const settings = schedulerSettings();
    const adapters = schedulerAdapters(settings, logged.clients);
    tick = (modelIds) => runTick({ settings, adapters, wake: wakeModels(modelIds) });
  });
  afterEach(() => {
    cloud.clients.dynamo.destroy();
  });

  it("training steps: 10 calls, 7 in sequence (the drain switch beside the lock, the lock's end beside the send)", async () => {
    const m = await readyModel(cloud.clients);
    await submitStep(cloud.clients, m, 'forward_backward');
    await submitStep(cloud.clients, m, 'optim_step');
    log.reset();
    const outcome = await tick([m]);
    expect(outcome.counters).toMatchObject({ work_items: 1, steps_dispatched: 2 });
    expect([...log.calls].sort()).toEqual(
      [
        'Query futures', // the model's entries of live_by_model
        'BatchGetItem models', // its row, strongly (R5)
        'UpdateItem registry', // the tick lock
        'GetItem registry', // the drain switch, beside it
        'UpdateItem models', // the claim (E2)
        'GetObject payloads', // the two dispatched payloads (R6)
        'GetObject payloads',
        'PutObject work', // the work item
        'SendMessage queue', // its manifest
        'DeleteItem registry', // the lock let go, beside the work item's writes
      ].sort(),
    );
    // Query, BatchGet, lock + drain, claim, payloads, PUT, send (the lock's delete beside them).
    expect(log.depth()).toBe(7);
    expect(await drainWorkItems(cloud.clients)).toHaveLength(1);
  });

  it("a training step and a base-model sample: the claims together, the steps' payloads beside the sample's row", async () => {
    const m = await readyModel(cloud.clients);
    await submitStep(cloud.clients, m, 'forward_backward');
    const base = samplingSession();
    await submitSampleRequest(cloud.clients, base);
    log.reset();
    const outcome = await tick([m, baseModelId('reference/byte-lm')]);
    expect(outcome.counters).toMatchObject({ work_items: 1, steps_dispatched: 1, samples_dispatched: 1 });
    expect([...log.calls].sort()).toEqual(
      [
        'Query futures',
        'Query futures',
        'BatchGetItem models',
        'BatchGetItem registry', // the sample's claim, strongly (R5)
        'UpdateItem registry',
        'GetItem registry',
        'UpdateItem models',
        'UpdateItem registry', // the sample's claim (R4), beside the model's
        'BatchGetItem futures', // the claimed sample's row: still pending?
        'GetObject payloads',
        'GetObject payloads',
        'PutObject work',
        'SendMessage queue',
        'DeleteItem registry',
      ].sort(),
    );
    // Queries, reads, lock + drain, claims, the sample's row (the step's payload beside it), the
    // sample's payload, PUT, send.
    expect(log.depth()).toBe(8);
  });

  it('three base-model samples: their claims in one transaction (R4), their payloads once their rows show them pending', async () => {
    const base = samplingSession();
    for (let n = 0; n < 3; n++) await submitSampleRequest(cloud.clients, base);
    log.reset();
    const outcome = await tick([baseModelId('reference/byte-lm')]);
    expect(outcome.counters).toMatchObject({ work_items: 1, samples_dispatched: 3, sample_claims_lost: 0 });
    expect([...log.calls].sort()).toEqual(
      [
        'Query futures',
        'BatchGetItem registry', // the samples' claims, strongly (R5)
        'UpdateItem registry', // the tick lock
        'GetItem registry', // the drain switch
        'TransactWriteItems Update:registry+Update:registry+Update:registry', // the three claims
        'BatchGetItem futures', // the claimed samples' rows: still pending?
        'GetObject payloads',
        'GetObject payloads',
        'GetObject payloads',
        'PutObject work',
        'SendMessage queue',
        'DeleteItem registry',
      ].sort(),
    );
    expect(log.depth()).toBe(8);
  });

  it('a tick that finds nothing to dispatch makes its one look and nothing else', async () => {
    const m = await readyModel(cloud.clients);
    await submitStep(cloud.clients, m, 'forward_backward');
    await tick([m]);
    await submitStep(cloud.clients, m, 'forward_backward');
    log.reset();
    expect((await tick([m])).status).toBe('idle');
    expect([...log.calls].sort()).toEqual(['BatchGetItem models', 'Query futures']);
  });
});
