import { marshall } from '@aws-sdk/util-dynamodb';
import type { AttributeValue, DynamoDBRecord, DynamoDBStreamEvent } from 'aws-lambda';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import type { AwsClients } from '../../shared/aws/clients.js';
import { config } from '../../shared/base/config.js';
import { BY_OWNER_INDEX, LIVE_BY_MODEL_INDEX, LIVE_INDEX } from '../../shared/base/topology.js';
import type { WorkItem } from '../../shared/domain/planning/work-item.js';
import { baseModelId, type FutureRow } from '../../shared/domain/records.js';
import { schedulerAdapters } from '../../shared/services/scheduler/adapters.js';
import { createSchedulerHandler } from '../../shared/services/scheduler/invocation.js';
import { schedulerSettings } from '../../shared/services/scheduler/settings.js';
import { runPass, runTick, tickContext } from '../../shared/services/scheduler/tick.js';
import { tickLock } from '../../shared/services/scheduler/tick-lock.js';
import { WAKE_ALL, wakeModels } from '../../shared/services/scheduler/wake.js';
import { sweep } from '../../shared/services/sweeper/sweep.js';
import type { TestCloud } from '../support/cloud.js';
import {
  commitWorkItem,
  drainWorkItems,
  readFutureRow,
  readModelRow,
  readyModel,
  samplingSession,
  schedulerCloud,
  stepIds,
  submitSampleRequest,
  submitStep,
} from '../support/scheduler-harness.js';

/**
 * Incremental ticks (R5): a stream batch's tick reads the pending rows of the models its records
 * name through `live_by_model`, their model rows and their samples' claims, and nothing of the
 * models it does not name; the schedule's safety tick still reads everything.
 */

/** What a tick asked DynamoDB for: index queries by index and partition, model rows by key. */
interface ReadLog {
  queries: { index: string; partition: string }[];
  modelKeys: string[];
}

/** Clients whose DynamoDB reads are logged (marshalled or not, as the middleware sees them). */
function loggedClients(cloud: TestCloud): { clients: AwsClients; log: ReadLog } {
  const clients = localAwsClients(cloud.endpoints);
  const log: ReadLog = { queries: [], modelKeys: [] };
  const text = (value: unknown): string =>
    typeof value === 'string' ? value : String((value as { S?: string } | undefined)?.S);
  clients.dynamo.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Record<string, unknown>;
      if (context.commandName === 'QueryCommand') {
        const values = (input.ExpressionAttributeValues ?? {}) as Record<string, unknown>;
        log.queries.push({
          index: String(input.IndexName),
          partition: text(values[':model'] ?? values[':key']),
        });
      }
      if (context.commandName === 'BatchGetItemCommand') {
        const requests = (input.RequestItems ?? {}) as Record<string, { Keys: Record<string, unknown>[] }>;
        for (const key of requests[config().table('models')]?.Keys ?? [])
          log.modelKeys.push(text(key.model_id));
      }
      return next(args);
    },
    { step: 'initialize', name: 'logReads' },
  );
  return { clients, log };
}

function futuresRecord(row: FutureRow): DynamoDBRecord {
  return {
    eventName: 'INSERT',
    eventSource: 'aws:dynamodb',
    dynamodb: {
      Keys: { request_id: { S: row.request_id } },
      NewImage: marshall(row, { removeUndefinedValues: true }) as Record<string, AttributeValue>,
      SequenceNumber: row.request_id,
      StreamViewType: 'NEW_IMAGE',
    },
  };
}

/** The models stream's record of a commit: `inflight` cleared (the stack's filter passes only those). */
function commitRecord(modelId: string): DynamoDBRecord {
  return {
    eventName: 'MODIFY',
    eventSource: 'aws:dynamodb',
    dynamodb: {
      Keys: { model_id: { S: modelId } },
      NewImage: marshall({ model_id: modelId }) as Record<string, AttributeValue>,
      OldImage: marshall({ model_id: modelId, inflight: `${modelId}@2` }) as Record<string, AttributeValue>,
      SequenceNumber: `commit-${modelId}`,
      StreamViewType: 'NEW_AND_OLD_IMAGES',
    },
  };
}

function requestIds(items: readonly WorkItem[]): string[] {
  return items.flatMap((item) => [
    ...item.models.flatMap((model) => model.steps.map((step) => step.request_id)),
    ...item.samples.map((sample) => sample.request_id),
  ]);
}

describe('incremental ticks (R5)', () => {
  let cloud: TestCloud;
  let logged: { clients: AwsClients; log: ReadLog };
  beforeEach(async () => {
    cloud = await schedulerCloud();
    logged = loggedClients(cloud);
  });
  afterEach(() => logged.clients.dynamo.destroy());

  const handler = () => {
    const settings = schedulerSettings();
    const adapters = schedulerAdapters(settings, { ...cloud.clients, doc: logged.clients.doc });
    return createSchedulerHandler(() => ({ settings, adapters }));
  };

  it("a tick woken by model M's commit dispatches M's ready work and reads no other model's rows", async () => {
    const m = await readyModel(cloud.clients);
    const others = [await readyModel(cloud.clients), await readyModel(cloud.clients)];
    const mine = [
      await submitStep(cloud.clients, m, 'forward_backward'),
      await submitStep(cloud.clients, m, 'optim_step'),
      await submitStep(cloud.clients, m, 'forward_backward'),
    ];
    // Ready work of two other models whose stream records were lost: M's tick must not see it.
    const theirs = [];
    for (const other of others) {
      theirs.push(await submitStep(cloud.clients, other, 'forward_backward'));
      theirs.push(await submitStep(cloud.clients, other, 'forward'));
    }
    const otherCheckpointSample = await submitSampleRequest(
      cloud.clients,
      samplingSession({ modelId: others[0]!, checkpointId: 'c-other' }),
    );
    logged.log.queries.length = 0;
    logged.log.modelKeys.length = 0;

    const event: DynamoDBStreamEvent = { Records: [commitRecord(m)] };
    expect(await handler()(event)).toEqual({ batchItemFailures: [] });

    // M's 3 pending rows, one query of M's partition, M's model row: nothing else was read.
    expect(logged.log.queries).toEqual([{ index: LIVE_BY_MODEL_INDEX, partition: m }]);
    expect(logged.log.modelKeys).toEqual([m]);
    const [item, ...more] = await drainWorkItems(cloud.clients);
    expect(more).toEqual([]);
    expect(stepIds(item!)).toEqual({ [m]: [mine[0]!.requestId, mine[1]!.requestId] });
    for (const other of others) expect((await readModelRow(cloud.clients, other)).planned_through).toBe(1);

    // The safety tick reads the whole pool and dispatches what lost its trigger.
    logged.log.queries.length = 0;
    const safety = await sweep({ clients: { ...cloud.clients, doc: logged.clients.doc } });
    expect(safety.tick.models_woken).toBe(0);
    // Of the futures indexes, the full look's (the sweep's checkpoint collection also queries by_owner).
    const futuresQueries = logged.log.queries.filter((query) => query.index !== BY_OWNER_INDEX);
    expect(new Set(futuresQueries.map((query) => query.index))).toEqual(new Set([LIVE_INDEX]));
    const late = await drainWorkItems(cloud.clients);
    expect(requestIds(late).sort()).toEqual(
      [...theirs.map((step) => step.requestId), otherCheckpointSample.requestId].sort(),
    );
  });

  it("counts what it read: M's pending rows only, however many others are parked", async () => {
    const m = await readyModel(cloud.clients);
    const parked = await readyModel(cloud.clients);
    await submitStep(cloud.clients, parked, 'forward_backward');
    await submitStep(cloud.clients, parked, 'optim_step');
    await runTick();
    await drainWorkItems(cloud.clients); // left uncommitted: parked's model is in flight (R3)
    for (let n = 0; n < 20; n++) await submitStep(cloud.clients, parked, 'forward_backward');
    const step = await submitStep(cloud.clients, m, 'forward_backward');

    const woken = await runTick({ wake: wakeModels([m]) });
    expect(woken.counters).toMatchObject({
      models_woken: 1,
      index_pages: 1,
      rows_scanned: 1,
      models_read: 1,
      steps_dispatched: 1,
    });
    const full = await runTick();
    // The full look reads all 23 pending rows (M's step is dispatched, not yet committed).
    expect(full.counters).toMatchObject({ models_woken: 0, rows_scanned: 23, work_items: 0 });
    expect(requestIds(await drainWorkItems(cloud.clients))).toEqual([step.requestId]);
  });

  it('base-model samples a batch names are read under their base-model key and batch with the models it names', async () => {
    const m = await readyModel(cloud.clients);
    const b = await readyModel(cloud.clients);
    const fb = await submitStep(cloud.clients, m, 'forward_backward');
    const notWoken = await submitStep(cloud.clients, b, 'forward_backward');
    // Three base-model samples from different sessions; the batch carries the record of one only.
    const bases = [
      await submitSampleRequest(cloud.clients, samplingSession()),
      await submitSampleRequest(cloud.clients, samplingSession()),
      await submitSampleRequest(cloud.clients, samplingSession()),
    ];
    logged.log.queries.length = 0;
    const event: DynamoDBStreamEvent = {
      Records: [futuresRecord(await readFutureRow(cloud.clients, bases[2]!.requestId)), commitRecord(m)],
    };
    expect(await handler()(event)).toEqual({ batchItemFailures: [] });

    const base = baseModelId('reference/byte-lm');
    expect(logged.log.queries.map((query) => query.partition).sort()).toEqual([base, m].sort());
    const items = await drainWorkItems(cloud.clients);
    expect(items).toHaveLength(1);
    expect(stepIds(items[0]!)).toEqual({ [m]: [fb.requestId] });
    expect(items[0]!.samples.map((sample) => sample.request_id)).toEqual(bases.map((s) => s.requestId));
    expect((await readFutureRow(cloud.clients, notWoken.requestId)).status).toBe('pending');
  });

  it('a stream record whose row the incremental read misses is retried, as with the full look', async () => {
    const m = await readyModel(cloud.clients);
    const step = await submitStep(cloud.clients, m, 'forward_backward');
    const settings = schedulerSettings();
    const base = schedulerAdapters(settings);
    const lagging = createSchedulerHandler(() => ({
      settings,
      adapters: { ...base, readLiveOf: async () => ({ rows: [], pages: 1 }) },
    }));
    const record = futuresRecord(await readFutureRow(cloud.clients, step.requestId));
    expect(await lagging({ Records: [record] })).toEqual({
      batchItemFailures: [{ itemIdentifier: step.requestId }],
    });
    expect(await handler()({ Records: [record] })).toEqual({ batchItemFailures: [] });
    expect(requestIds(await drainWorkItems(cloud.clients))).toEqual([step.requestId]);
  });
});

describe('the tick lock carries what askers name (R5 with the lock of tick-lock.ts)', () => {
  let cloud: TestCloud;
  beforeEach(async () => {
    cloud = await schedulerCloud();
  });

  const lockOf = () => tickLock(cloud.clients.doc, config().table('registry'), `lock-${Math.random()}`);

  it("a holder's next pass reads the union of the models its askers named, or everything if one asked so", async () => {
    const lock = lockOf();
    const now = Date.now();
    expect(await lock.acquire('holder', now)).toBe('acquired');
    expect(await lock.acquire('a1', now, wakeModels(['a', 'b']))).toBe('held');
    expect(await lock.acquire('a2', now, wakeModels(['b', 'c']))).toBe('held');
    const end = await lock.finishPass('holder', now);
    expect(end.status).toBe('again');
    expect(
      end.status === 'again' && end.wake.kind === 'models' ? [...end.wake.modelIds].sort() : end,
    ).toEqual(['a', 'b', 'c']);
    // The asks were taken up: with nobody asking again, the holder lets go.
    expect(await lock.finishPass('holder', now)).toEqual({ status: 'released' });

    expect(await lock.acquire('holder', now)).toBe('acquired');
    expect(await lock.acquire('a1', now, wakeModels(['a']))).toBe('held');
    expect(await lock.acquire('schedule', now)).toBe('held');
    expect(await lock.finishPass('holder', now)).toEqual({ status: 'again', wake: WAKE_ALL });
  });

  it('asks a dead holder never served are served by the next holder', async () => {
    const lock = tickLock(cloud.clients.doc, config().table('registry'), 'lock-dead', 1_000);
    const now = Date.now();
    expect(await lock.acquire('dies', now)).toBe('acquired');
    expect(await lock.acquire('asker', now, wakeModels(['a']))).toBe('held');
    // No release: the next tick after the lease takes the lock, asks and all.
    expect(await lock.acquire('next', now + 1_001)).toBe('acquired');
    const end = await lock.finishPass('next', now + 1_001);
    expect(end.status === 'again' && end.wake.kind === 'models' ? [...end.wake.modelIds] : end).toEqual([
      'a',
    ]);
  });

  it('an incremental tick that finds the lock held is served by the holder: its model is dispatched once', async () => {
    const m = await readyModel(cloud.clients);
    const step = await submitStep(cloud.clients, m, 'forward_backward');
    const settings = schedulerSettings();
    const adapters = schedulerAdapters(settings);
    expect(await adapters.lock.acquire('someone', Date.now())).toBe('acquired');
    const coalesced = await runTick({ settings, adapters, wake: wakeModels([m]) });
    expect(coalesced.status).toBe('coalesced');
    expect(await drainWorkItems(cloud.clients)).toEqual([]);

    const end = await adapters.lock.finishPass('someone', Date.now());
    if (end.status !== 'again') throw new Error(`expected another pass, got ${end.status}`);
    expect(end.wake).toEqual(wakeModels([m]));
    const pass = await runPass(tickContext({ settings, adapters }), end.wake);
    expect(pass.counters).toMatchObject({ models_woken: 1, steps_dispatched: 1 });
    await adapters.lock.release('someone');
    expect(requestIds(await drainWorkItems(cloud.clients))).toEqual([step.requestId]);
  });

  it('incremental and full ticks racing over the same work dispatch each request once', async () => {
    const models = [await readyModel(cloud.clients), await readyModel(cloud.clients)];
    const submitted: string[] = [];
    const sent: WorkItem[] = [];
    for (let round = 0; round < 3; round++) {
      for (const m of models) {
        submitted.push((await submitStep(cloud.clients, m, 'forward_backward')).requestId);
        submitted.push((await submitStep(cloud.clients, m, 'optim_step')).requestId);
      }
      submitted.push((await submitSampleRequest(cloud.clients, samplingSession())).requestId);
      const base = baseModelId('reference/byte-lm');
      await Promise.all([
        runTick({ wake: wakeModels([models[0]!, base]) }),
        runTick(),
        runTick({ wake: wakeModels(models) }),
        runTick({ wake: wakeModels([base]) }),
      ]);
      const items = await drainWorkItems(cloud.clients);
      sent.push(...items);
      for (const item of items) await commitWorkItem(cloud.clients, item);
    }
    // Whatever the last round's race left (a coalesced ask past its holder) the safety tick sends.
    await runTick();
    sent.push(...(await drainWorkItems(cloud.clients)));
    expect(requestIds(sent).sort()).toEqual([...submitted].sort());
  });
});
