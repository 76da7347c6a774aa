import { HeadObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RolloutCuts } from '../../local/demos/parts/rollout-cuts.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { config } from '../../shared/base/config.js';
import { storageKeys } from '../../shared/base/storage-keys.js';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import type { ModelRow } from '../../shared/domain/records.js';
import { requestCut } from '../../shared/services/ops/control-store.js';
import { processWorkMessage, type WorkerEvent } from '../../shared/services/worker/index.js';
import { answersOverHttp, Pipeline, waitTerminal } from '../support/pipeline.js';
import { BAD_DATUM_VOCABULARY, TenantDriver } from '../support/tenant-driver.js';
import { gate, waitFor } from '../support/wait.js';
import { WorkerHarness } from '../support/worker-harness.js';
import { type Action, countFutures, generateWorkload, type TenantScript } from '../support/workload.js';

/**
 * R1 end to end: requests go over HTTP to the API, the futures and models streams wake the scheduler,
 * work items go through SQS to two concurrent workers (the worker Lambda behind the runtime's queue
 * trigger, and a worker process loop), and every future's answer equals what running each model's
 * requests one by one in submit order directly on the reference backend gives, bit-exact (the worker
 * harness's oracle). The workload holds policy-gradient passes (importance_sampling and ppo, see
 * shared/client/rl-inputs.ts), and the operator's cut (`cut#<pool>`) lands while samples generate,
 * so cut samples are saved, resumed (P1-P6) and still answer as if never cut. Then, one pipeline-level
 * check each: a redelivered work item, a worker killed mid-item, and a zombie that finishes after a
 * re-plan change nothing in the results.
 */

const SEED = Number(process.env.E2E_SEED ?? 20260529);

/** Every item of the tables and every object key, minus the scheduler's transient tick lock. */
async function settledSnapshot(harness: WorkerHarness) {
  const snapshot = await harness.snapshot();
  const registry = (snapshot.tables.registry ?? []).filter(
    (item) => !String((item as { pk?: string }).pk).startsWith('tick#'),
  );
  return { ...snapshot, tables: { ...snapshot.tables, registry } };
}

/** Every submission's answer over HTTP equals the oracle's; returns the answers. */
async function expectOracle(
  harness: WorkerHarness,
  clients: ReadonlyMap<string, TinkerClient>,
): Promise<Record<string, unknown>> {
  const answers = Object.fromEntries(await answersOverHttp(harness, clients));
  const expected = Object.fromEntries(await harness.oracle());
  expect(Object.keys(answers)).toHaveLength(harness.submissions.length);
  expect(answers).toEqual(expected);
  return answers;
}

/** Sample requests to cut while they generate (one operator cut stops every sample running then). */
const CUTS = 3;

describe('random workloads through API -> streams -> scheduler -> SQS -> two workers', () => {
  const cuts = new RolloutCuts();
  // Short slices and a fast cut poll, so a cut lands between slices of the workload's short samples.
  const sampling = { onEvent: cuts.onEvent, cutPollMs: 50, sampleSliceTokens: 2 };
  let harness: WorkerHarness;
  let pipeline: Pipeline;
  const clients = new Map<string, TinkerClient>();
  let scripts: TenantScript[];
  let drivers: TenantDriver[];

  beforeAll(async () => {
    harness = await WorkerHarness.start({ vocabulary: BAD_DATUM_VOCABULARY });
    pipeline = await Pipeline.start(harness, { lambdaWorker: true, lambdaWorkerOptions: sampling });
  });
  afterAll(async () => {
    await pipeline?.stop();
  });

  it(`3 tenants, 5 models, ~150 requests (seed ${SEED}), RL passes, cuts: every future ends, with the sequential oracle's answer`, {
    timeout: 120_000,
  }, async () => {
    const second = pipeline.startProcessWorker(sampling);
    // The worker Lambda waits (20 s at most) until the process worker has taken a work item, so both
    // consumers take some whichever poller the queue answers first.
    pipeline.holdLambdaWorkerUntil(
      waitFor('the process worker to take a work item', () => second.lines.length > 0, 20_000),
    );
    let settled = false;
    const cutting = (async () => {
      const cut = () =>
        requestCut(harness.cloud.clients.doc, config().table('registry'), config().pool, 'e2e');
      // A held slice may be its sample's last (nothing left to cut): then the next one is tried.
      while (cuts.cutRequests.length < CUTS && !settled) await cuts.cutAtNextSlice(cut);
    })();
    scripts = generateWorkload({ seed: SEED, modelsPerTenant: [2, 2, 1], actionsPerTenant: [55, 50, 40] });
    drivers = await Promise.all(
      scripts.map(async (script) => {
        const client = await pipeline.client(script.tenant);
        clients.set(script.tenant, client);
        return new TenantDriver(script, client, harness);
      }),
    );
    await Promise.all(drivers.map((driver) => driver.run()));

    const ids = harness.submissions.map((submission) => submission.request_id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids.length).toBe(countFutures(scripts));
    expect(ids.length).toBeGreaterThanOrEqual(120);
    await waitTerminal(harness, ids, 60_000);
    settled = true;
    cuts.cancel();
    await cutting;
    const answers = await expectOracle(harness, clients);
    // Samples were cut mid-generation and resumed from their saved prefixes; the answers above are exact.
    expect(cuts.cut).toBeGreaterThan(0);
    expect(cuts.resumed).toBeGreaterThan(0);

    // The workload exercised what it claims to: every kind, user errors, R7's three checks.
    const kinds = new Set(harness.submissions.map((submission) => submission.kind));
    for (const kind of ['create_model', 'forward', 'forward_backward', 'optim_step', 'save_weights'] as const)
      expect(kinds).toContain(kind);
    for (const kind of ['save_weights_for_sampler', 'load_weights', 'sample'] as const)
      expect(kinds).toContain(kind);
    const checkpointSamples = harness.submissions.filter(
      (s) => s.kind === 'sample' && harness.samplingTargets.get(s.sampling_session_id) !== null,
    );
    expect(checkpointSamples.length).toBeGreaterThan(0);
    const rlPasses = harness.submissions.filter(
      (s) => s.kind === 'forward_backward' && s.input.data.some((d) => 'advantages' in d.loss_fn_inputs),
    );
    expect(rlPasses.length).toBeGreaterThan(0);
    const userErrors = Object.values(answers).filter(
      (answer) => (answer as { category?: string }).category === 'user',
    );
    expect(userErrors.length).toBeGreaterThan(0);
    const checks = drivers.reduce(
      (sum, driver) => ({
        resends: sum.resends + driver.checks.resends,
        concurrentDuplicates: sum.concurrentDuplicates + driver.checks.concurrentDuplicates,
        conflicts: sum.conflicts + driver.checks.conflicts,
      }),
      { resends: 0, concurrentDuplicates: 0, conflicts: 0 },
    );
    expect(checks.resends).toBeGreaterThan(0);
    expect(checks.concurrentDuplicates).toBeGreaterThan(0);
    expect(checks.conflicts).toBeGreaterThan(0);
    // Both consumers took work items from the queue.
    await second.stop();
    expect(pipeline.lambdaMessages).toBeGreaterThan(0);
    expect(second.lines.length).toBeGreaterThan(0);
  });

  it('a redelivered work item (its manifest sent again) changes nothing', async () => {
    const worker = pipeline.startProcessWorker();
    const before = await settledSnapshot(harness);
    const items = await pipeline.workItemIds();
    const lambdaBefore = pipeline.lambdaMessages;
    // Every fourth work item, from the first: creates, training runs and sample batches.
    const redelivered = items.filter((_, index) => index % 4 === 0);
    expect(redelivered.length).toBeGreaterThan(3);
    await pipeline.resendManifests(redelivered);
    await waitFor(
      'the redelivered items to be consumed',
      async () => (await pipeline.queueDepth()) === 0,
      20_000,
      100,
    );
    await worker.stop();
    expect(pipeline.lambdaMessages - lambdaBefore + worker.lines.length).toBe(redelivered.length);
    expect(await settledSnapshot(harness)).toEqual(before);
    await expectOracle(harness, clients);
  });
});

/**
 * Worker faults, one each, through the pipeline. No worker Lambda here: the test receives the work
 * message itself to play the faulty worker, then starts a healthy worker process. Leases last 2 s,
 * so the sweeper (run on demand) re-plans the model soon; the scheduler, woken by the models stream,
 * dispatches it again.
 */
describe('worker faults through the pipeline', () => {
  let harness: WorkerHarness;
  let pipeline: Pipeline;
  const clients = new Map<string, TinkerClient>();
  const backend = new ReferenceBackend();
  let tenants = 0;

  beforeAll(async () => {
    harness = await WorkerHarness.start({ vocabulary: BAD_DATUM_VOCABULARY });
    pipeline = await Pipeline.start(harness, { lambdaWorker: false, env: { LEASE_SECONDS: '2' } });
  });
  afterAll(async () => {
    await pipeline?.stop();
  });

  // After the create (seq 1), R2 makes at least two runs of these: fb, forward, optim, save | fb, optim.
  const training: readonly Action[] = [
    {
      kind: 'pass',
      type: 'forward_backward',
      model: 0,
      data: [{ text: 'tolerant' }],
      concurrentDuplicate: false,
    },
    { kind: 'pass', type: 'forward', model: 0, data: [{ text: 'on a rail' }], concurrentDuplicate: false },
    { kind: 'optim', model: 0, learning_rate: 0.05 },
    { kind: 'save_sampler', model: 0, name: 'after-one' },
    {
      kind: 'pass',
      type: 'forward_backward',
      model: 0,
      data: [{ text: 'its lesson' }],
      concurrentDuplicate: false,
    },
    { kind: 'optim', model: 0, learning_rate: 0.05 },
  ];

  /** A tenant with one created model, and its training requests submitted but not yet run. */
  async function modelWithPendingWork(): Promise<{ driver: TenantDriver; modelId: string }> {
    const tenant = `fault-${tenants++}`;
    const script: TenantScript = {
      tenant,
      models: [0],
      actions: [{ kind: 'create', model: 0, rank: 4, seed: 5 }, ...training],
    };
    const client = await pipeline.client(tenant);
    clients.set(tenant, client);
    const driver = new TenantDriver(script, client, harness);
    const creator = pipeline.startProcessWorker();
    await driver.run(script.actions.slice(0, 1));
    await waitTerminal(harness, driver.requestIds, 20_000);
    await creator.stop();
    await driver.run(training);
    return { driver, modelId: driver.modelIds.get(0) as string };
  }

  /**
   * Runs the sweeper until the model has moved past `epoch`: re-planned once its lease ended (by this
   * sweep, or the runtime's own schedule), then claimed again by the scheduler.
   */
  async function sweepUntilReplanned(modelId: string, epoch: number): Promise<void> {
    await waitFor(
      'the sweeper to re-plan the expired lease',
      async () => {
        if (((await harness.modelRow(modelId)) as ModelRow).epoch > epoch) return true;
        await pipeline.runtime.runSchedule('sweeper');
        return false;
      },
      20_000,
      250,
    );
  }

  const stateExists = async (key: string) =>
    harness.cloud.clients.s3
      .send(new HeadObjectCommand({ Bucket: harness.cloud.names.bucket, Key: key }))
      .then(() => true)
      .catch(() => false);

  for (const killAt of ['step-done', 'model-written'] as const) {
    const where =
      killAt === 'step-done' ? 'mid-item (after its first step)' : 'after writing state, before committing';
    it(`a worker killed ${where}: lease ends, re-plan, another worker finishes; the oracle's results`, async () => {
      const { driver, modelId } = await modelWithPendingWork();
      const message = await pipeline.receiveWork(60);
      const claimed = (await harness.modelRow(modelId)) as ModelRow;
      expect(claimed.inflight).toBeDefined();
      const kill = new AbortController();
      const verdict = await processWorkMessage(message.Body ?? '', {
        backend,
        runId: 'killed',
        signal: kill.signal,
        onEvent: (event: WorkerEvent) => {
          // The item holds at least its first step (how many more depends on what the tick saw).
          if (event.kind === killAt) kill.abort();
        },
      });
      expect(kill.signal.aborted).toBe(true);
      expect(verdict.done).toBe(false);
      expect('outcome' in verdict && verdict.outcome.models.map((model) => model.outcome)).toEqual([
        'abandoned',
      ]);
      // Nothing committed: still in flight under the killed worker's claim, its requests pending.
      const { lease_until: _renewed, ...unchanged } = claimed;
      expect(await harness.modelRow(modelId)).toMatchObject(unchanged);
      expect(await stateExists(storageKeys.modelState(modelId, claimed.epoch, 'killed'))).toBe(
        killAt === 'model-written',
      );

      const healthy = pipeline.startProcessWorker();
      await sweepUntilReplanned(modelId, claimed.epoch);
      await waitTerminal(harness, driver.requestIds, 30_000);
      await healthy.stop();
      const finished = (await harness.modelRow(modelId)) as ModelRow;
      expect(finished.epoch).toBeGreaterThan(claimed.epoch);
      expect(finished.inflight).toBeUndefined();
      expect(finished.applied_through).toBe(1 + training.length);
      await expectOracle(harness, clients);
    });
  }

  it('a zombie worker that finishes after a re-plan changes nothing', async () => {
    const { driver, modelId } = await modelWithPendingWork();
    const message = await pipeline.receiveWork(60);
    const paused = gate<WorkerEvent>((event) => event.kind === 'model-written');
    // It stalls after writing its state, renewing nothing, so its lease ends.
    const zombie = processWorkMessage(message.Body ?? '', {
      backend,
      renewEveryMs: 3_600_000,
      onEvent: paused.onEvent,
    });
    await paused.arrived;
    const stalled = (await harness.modelRow(modelId)) as ModelRow;

    const healthy = pipeline.startProcessWorker();
    await sweepUntilReplanned(modelId, stalled.epoch);
    await waitTerminal(harness, driver.requestIds, 30_000);
    await healthy.stop();
    const before = await settledSnapshot(harness);
    expect(((await harness.modelRow(modelId)) as ModelRow).epoch).toBeGreaterThan(stalled.epoch);

    paused.open();
    const verdict = await zombie;
    expect('outcome' in verdict && verdict.outcome.models.map((model) => model.outcome)).toEqual(['lost']);
    expect(verdict.done).toBe(true);
    expect(await settledSnapshot(harness)).toEqual(before);
    await expectOracle(harness, clients);
  });
});
