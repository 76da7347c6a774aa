import { ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runWorkerProcess } from '../../bin/worker.js';
import { transactWrite } from '../../shared/aws/transact.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { config } from '../../shared/base/config.js';
import { mintRunId } from '../../shared/base/ids.js';
import { laneQueueId } from '../../shared/base/topology.js';
import { workManifestSchema } from '../../shared/domain/planning/work-item.js';
import { resolveTables } from '../../shared/repositories/tables.js';
import { acquireLane } from '../../shared/repositories/work-lanes.js';
import { runTick } from '../../shared/services/scheduler/tick.js';
import { commitToken, modelCommitTransaction } from '../../shared/services/worker/commit-items.js';
import { Residency } from '../../shared/services/worker/residency.js';
import { WorkLane } from '../../shared/services/worker/work-lane.js';
import type { TestCloud } from '../support/cloud.js';
import {
  createModel,
  drainManifests,
  drainWorkItems,
  readModelRow,
  readyModel,
  schedulerCloud,
  submitStep,
} from '../support/scheduler-harness.js';
import { waitFor } from '../support/wait.js';

/**
 * Routing to the holder (S2 of docs/design.md#s1): a model whose state a worker holds gets its work
 * items on that worker's lane queue while the hold is live, and on the shared queue otherwise; lanes
 * are leased one worker each; a worker process polls its lane beside the shared queue.
 */

let cloud: TestCloud;

beforeAll(async () => {
  cloud = await schedulerCloud();
});

afterAll(() => cloud?.clients.dynamo.destroy());

const store = () => ({
  doc: cloud.clients.doc,
  registryTable: config().table('registry'),
  pool: config().pool,
});

/** Manifests waiting on lane `lane` (received and left to expire: each test uses its own lane). */
async function laneManifests(lane: number): Promise<string[]> {
  const answer = await cloud.clients.sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: config().queueUrl(laneQueueId(lane)),
      MaxNumberOfMessages: 10,
      WaitTimeSeconds: 0,
      VisibilityTimeout: 600,
    }),
  );
  return (answer.Messages ?? []).map(
    (message) => workManifestSchema.parse(JSON.parse(message.Body ?? '')).work_item_id,
  );
}

/** Commits a model's pending create_model-free work item as a holder on `lane` until `until`. */
async function commitAsHolder(modelId: string, lane: number, until: number): Promise<void> {
  const [workItem] = await drainWorkItems(cloud.clients);
  const model = workItem?.models.find((entry) => entry.model_id === modelId);
  if (model === undefined) throw new Error(`no work item for ${modelId}`);
  const run = mintRunId();
  const commit = modelCommitTransaction(
    {
      model_id: modelId,
      inflight: model.inflight,
      run,
      base_applied_through: model.base_applied_through,
      applied_through: model.steps.at(-1)?.seq ?? model.base_applied_through,
      replay_append: model.steps.map((step) => ({
        seq: step.seq,
        request_id: step.request_id,
        request_type: step.request_type,
      })),
      holder: { holder: { worker: 'w-test', lane }, until },
      unloaded: false,
      now: Date.now(),
      steps: model.steps.map((step) => ({
        request_id: step.request_id,
        outcome: { status: 'completed', result: '{}' },
      })),
    },
    resolveTables(['futures', 'models', 'registry']),
  );
  const outcome = await transactWrite(commit.items, commitToken(model.inflight, run, 0), cloud.clients.doc);
  expect(outcome.ok).toBe(true);
}

describe('work lanes (S2)', () => {
  it('leases each lane to one worker at a time; a lapsed lease can be taken, a taken one is lost', async () => {
    const a = await WorkLane.acquire(store(), 'w-a');
    const b = await WorkLane.acquire(store(), 'w-b', { leaseMs: 300 });
    expect(a?.lane).toBe(0);
    expect(b?.lane).toBe(1);
    await a?.release();
    expect((await WorkLane.acquire(store(), 'w-c'))?.lane).toBe(0);
    // Lane 1's lease lapses (its holder paused past it) and another worker takes it.
    expect(
      await acquireLane(
        cloud.clients.doc,
        config().table('registry'),
        config().pool,
        1,
        'w-d',
        Date.now() + 120_000,
        60_000,
      ),
    ).toBe(true);
    const lapsed = await WorkLane.acquire(store(), 'w-b2', { lanes: 2 });
    expect(lapsed).toBeUndefined();
    // The paused worker's next renewal finds the lane taken: it stops polling it.
    await waitFor('the lost lane', () => b?.lost.aborted === true);
    await b?.release();
  });

  it("sends a held model's work item to its holder's lane while the hold is live, else to the shared queue", async () => {
    const lane = 5;
    const modelId = await readyModel(cloud.clients);
    await submitStep(cloud.clients, modelId, 'forward_backward');
    await runTick();
    await commitAsHolder(modelId, lane, Date.now() + 60_000);
    expect((await readModelRow(cloud.clients, modelId)).holder).toEqual({ worker: 'w-test', lane });

    await submitStep(cloud.clients, modelId, 'optim_step');
    const routed = await runTick();
    expect(routed.counters.work_items_to_lanes).toBe(1);
    expect(await drainManifests(cloud.clients)).toEqual([]);
    expect(await laneManifests(lane)).toHaveLength(1);

    // An expired hold: the next work item goes to the shared queue.
    const expiredLane = 6;
    const other = await readyModel(cloud.clients);
    await submitStep(cloud.clients, other, 'forward_backward');
    await runTick();
    await commitAsHolder(other, expiredLane, Date.now() - 1);
    await submitStep(cloud.clients, other, 'optim_step');
    const shared = await runTick();
    expect(shared.counters.work_items_to_lanes).toBe(0);
    expect(await laneManifests(expiredLane)).toEqual([]);
    expect(await drainManifests(cloud.clients)).toHaveLength(1);
  });

  it('a worker process polls its lane beside the shared queue and keeps the state resident between work items', async () => {
    const lane = await WorkLane.acquire(store(), 'w-process', { lanes: 8 });
    if (lane === undefined) throw new Error('no free lane');
    const backend = new ReferenceBackend();
    const residency = new Residency(backend, undefined, undefined, { worker: 'w-process', lane: lane.lane });
    const stop = new AbortController();
    const running = runWorkerProcess({
      queueUrl: config().workQueueUrl,
      lane: { queueUrl: config().queueUrl(laneQueueId(lane.lane)), lost: lane.lost },
      backend,
      sqs: cloud.clients.sqs,
      stop: stop.signal,
      waitTimeSeconds: 1,
      worker: { residency },
      print: () => undefined,
    });
    try {
      // create_model comes from the shared queue (nobody holds the model yet), every later step on the lane.
      const { modelId } = await createModel(cloud.clients);
      await runTick();
      await waitFor(
        'applied_through 1',
        async () => (await readModelRow(cloud.clients, modelId)).applied_through === 1,
      );
      await submitStep(cloud.clients, modelId, 'forward_backward');
      expect((await runTick()).counters.work_items_to_lanes).toBe(1);
      await waitFor(
        'applied_through 2',
        async () => (await readModelRow(cloud.clients, modelId)).applied_through === 2,
      );
      expect((await readModelRow(cloud.clients, modelId)).holder).toEqual({
        worker: 'w-process',
        lane: lane.lane,
      });
      await submitStep(cloud.clients, modelId, 'optim_step');
      const routed = await runTick();
      expect(routed.counters.work_items_to_lanes).toBe(1);
      await waitFor(
        'applied_through 3',
        async () => (await readModelRow(cloud.clients, modelId)).applied_through === 3,
      );
      expect(residency.counters).toMatchObject({ hits: 2, misses: 1 });
    } finally {
      stop.abort();
      await running;
      await residency.letGoAll();
      await lane.release();
    }
  });
});
