import { DeleteObjectCommand, HeadObjectCommand } from '@aws-sdk/client-s3';
import { PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import type { Backend, BackendState } from '../../shared/backend/backend.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { asReferenceState } from '../../shared/backend/reference/state.js';
import { config } from '../../shared/base/config.js';
import { InfrastructureError } from '../../shared/base/errors.js';
import { storageKeys } from '../../shared/base/storage-keys.js';
import { type LiveRow, type ModelRow, registryKey } from '../../shared/domain/records.js';
import { runWorkItem, type WorkerEvent } from '../../shared/services/worker/index.js';
import { pause } from '../support/wait.js';
import {
  BASE_MODEL,
  crossEntropy,
  type TenantClient,
  textDatum,
  WorkerHarness,
} from '../support/worker-harness.js';

let h: WorkerHarness;
const backend = new ReferenceBackend();

beforeAll(async () => {
  h = await WorkerHarness.start();
});

afterAll(() => h?.cloud.clients.dynamo.destroy());

const onlyModel = (modelId: string) => (row: LiveRow) => row.model_id === modelId;

/** create_model, two forward_backwards, an optimizer step, a save and a forward: one model's sequence. */
async function workload(t: TenantClient, rank = 4): Promise<{ model_id: string; ids: string[] }> {
  const m = await t.createModel(rank, 9);
  const ids = [m.request_id];
  ids.push(await t.pass('forward_backward', m.model_id, crossEntropy(textDatum('fault tolerance'))));
  ids.push(await t.pass('forward_backward', m.model_id, crossEntropy(textDatum('exactly once'))));
  ids.push(await t.optimStep(m.model_id));
  return { model_id: m.model_id, ids };
}

async function drainModel(modelId: string, run: Backend = backend): Promise<void> {
  for (
    let d = await h.dispatch({ only: onlyModel(modelId) });
    d;
    d = await h.dispatch({ only: onlyModel(modelId) })
  ) {
    const outcome = await runWorkItem(d.manifest, { backend: run });
    expect(outcome.retry).toBe(false);
  }
}

async function expectOracle(
  ids: readonly string[],
  serverFailed: ReadonlySet<string> = new Set(),
): Promise<void> {
  const [expected, actual] = [await h.oracle({ serverFailed }), await h.answers()];
  for (const id of ids) expect(actual.get(id), id).toEqual(expected.get(id));
}

/** A hook that pauses the worker at the first event matching `at` until the test lets it go. */
function gate(at: (event: WorkerEvent) => boolean) {
  let open!: () => void;
  let reached!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  const arrived = new Promise<void>((resolve) => (reached = resolve));
  let passed = false;
  return {
    onEvent: async (event: WorkerEvent) => {
      if (passed || !at(event)) return;
      passed = true;
      reached();
      await opened;
    },
    arrived,
    open: () => open(),
  };
}

async function objectExists(key: string): Promise<boolean> {
  try {
    await h.cloud.clients.s3.send(new HeadObjectCommand({ Bucket: config().bucket, Key: key }));
    return true;
  } catch {
    return false;
  }
}

describe('worker faults change nothing in the results', () => {
  it('a redelivered work item (run twice) changes nothing the second time', async () => {
    const { model_id, ids } = await workload(h.tenant('redeliver'));
    const dispatched = await h.dispatch({ only: onlyModel(model_id) });
    const first = await runWorkItem(dispatched!.manifest, { backend });
    expect(first.models.map((m) => m.outcome)).toEqual(['committed']);
    const before = await h.snapshot();
    const second = await runWorkItem(dispatched!.manifest, { backend });
    expect(second.models.map((m) => m.outcome)).toEqual(['not_inflight']);
    expect(second.retry).toBe(false);
    expect(await h.snapshot()).toEqual(before);
    await expectOracle(ids);
  });

  it('a sample whose payload is missing is failed by its worker under its claim, not by the scheduler', async () => {
    const t = h.tenant('lost-sample-payload');
    const session = await t.samplingSession({ base_model: BASE_MODEL });
    const requestId = await t.sample(session, {
      num_samples: 1,
      prompt: { chunks: [{ type: 'encoded_text', tokens: [72] }] },
      sampling_params: { max_tokens: 2, seed: 1 },
    });
    await h.cloud.clients.s3.send(
      new DeleteObjectCommand({ Bucket: config().bucket, Key: storageKeys.payload(requestId) }),
    );
    const dispatched = await h.dispatch({ only: (row) => row.request_id === requestId });
    expect(dispatched!.item.samples).toEqual([
      expect.objectContaining({
        request_id: requestId,
        fail: expect.objectContaining({ category: 'server' }),
      }),
    ]);
    const outcome = await runWorkItem(dispatched!.manifest, { backend });
    expect(outcome.samples.map((sample) => sample.outcome)).toEqual(['committed']);
    expect(await h.future(requestId)).toMatchObject({
      status: 'failed',
      error: { message: 'The request payload is missing', category: 'server' },
    });
    expect(await h.registry(registryKey.sampleClaim(requestId))).toBeUndefined();
  });

  it('a worker killed mid-item, then re-planned and rerun, gives the results of one clean run', async () => {
    const { model_id, ids } = await workload(h.tenant('killed'));
    const dispatched = await h.dispatch({ only: onlyModel(model_id) });
    const kill = new AbortController();
    const outcome = await runWorkItem(dispatched!.manifest, {
      backend,
      runId: 'killed',
      signal: kill.signal,
      onEvent: (event) => {
        if (event.kind === 'step-done' && event.seq === 2) kill.abort();
      },
    });
    expect(outcome.models.map((m) => m.outcome)).toEqual(['abandoned']);
    expect(outcome.retry).toBe(true);
    const row = (await h.modelRow(model_id)) as ModelRow;
    expect(row.inflight).toBe(dispatched!.item.models[0]?.inflight);
    expect(row.applied_through).toBe(0);
    for (const id of ids) expect((await h.future(id))?.status).toBe('pending');
    expect(await objectExists(storageKeys.modelState(model_id, row.epoch, 'killed'))).toBe(false);

    await h.replan(model_id);
    await drainModel(model_id);
    await expectOracle(ids);
  });

  it('a worker that wrote its state but did not commit, then re-plan and rerun: the same results', async () => {
    const { model_id, ids } = await workload(h.tenant('crashed'));
    const dispatched = await h.dispatch({ only: onlyModel(model_id) });
    const kill = new AbortController();
    const outcome = await runWorkItem(dispatched!.manifest, {
      backend,
      runId: 'crashed',
      signal: kill.signal,
      onEvent: (event) => {
        if (event.kind === 'model-written') kill.abort();
      },
    });
    expect(outcome.models.map((m) => m.outcome)).toEqual(['abandoned']);
    const epoch = dispatched!.item.models[0]?.epoch as number;
    const orphan = storageKeys.modelState(model_id, epoch, 'crashed');
    expect(await objectExists(orphan)).toBe(true);
    const row = (await h.modelRow(model_id)) as ModelRow;
    expect(row.state_ref).toBeUndefined();
    for (const id of ids) expect((await h.future(id))?.status).toBe('pending');

    await h.replan(model_id);
    await drainModel(model_id);
    await expectOracle(ids);
    const after = (await h.modelRow(model_id)) as ModelRow;
    expect(after.state_ref).toMatch(new RegExp(`^state/${model_id}/${after.epoch}/[^/]+\\.bin$`));
    expect(after.state_ref).not.toBe(orphan);
  });

  for (const losses of [1, Number.POSITIVE_INFINITY]) {
    it(`a commit whose answer was lost (${losses === 1 ? 'once' : 'every time'}) is settled and applied once`, async () => {
      const t = h.tenant(`lost-${losses}`);
      const { model_id, ids } = await workload(t);
      const check = await t.pass('forward', model_id, crossEntropy(textDatum('fault tolerance')));
      // A client whose TransactWriteItems calls land, after which the caller gets a timeout.
      const clients = localAwsClients(h.cloud.endpoints);
      let lost = 0;
      clients.dynamo.middlewareStack.add(
        (next, context) => async (args) => {
          const result = await next(args);
          if (context.commandName?.startsWith('TransactWrite') && lost < losses) {
            lost++;
            throw Object.assign(new Error('socket timed out after the request was sent'), {
              name: 'TimeoutError',
            });
          }
          return result;
        },
        { step: 'initialize', name: 'loseTransactAnswers' },
      );
      const first = await h.dispatch({ only: onlyModel(model_id) });
      const outcome = await runWorkItem(first!.manifest, { backend, clients });
      expect(lost).toBeGreaterThanOrEqual(1);
      expect(outcome.models).toEqual([
        expect.objectContaining({ outcome: 'committed', ...(losses > 1 ? { settled_by_reread: true } : {}) }),
      ]);
      expect(outcome.retry).toBe(false);
      await drainModel(model_id);
      await expectOracle([...ids, check]);
      // The optimizer step was applied exactly once.
      const forward = (await h.answer(t.tenant, check)) as { metrics: Record<string, number> };
      expect(forward.metrics['weights_version:max']).toBe(1);
      clients.dynamo.destroy();
    });
  }

  it('a zombie worker that finishes after a re-plan changes nothing', async () => {
    const { model_id, ids } = await workload(h.tenant('zombie'));
    const dispatched = await h.dispatch({ only: onlyModel(model_id) });
    const pausedBeforeCommit = gate((event) => event.kind === 'model-written');
    // Renewals are rare here, so the zombie does not notice the re-plan before it tries to commit.
    const zombie = runWorkItem(dispatched!.manifest, {
      backend,
      renewEveryMs: 3_600_000,
      onEvent: pausedBeforeCommit.onEvent,
    });
    await pausedBeforeCommit.arrived;
    await h.replan(model_id);
    await drainModel(model_id);
    const before = await h.snapshot();
    pausedBeforeCommit.open();
    const outcome = await zombie;
    expect(outcome.models.map((m) => m.outcome)).toEqual(['lost']);
    expect(outcome.retry).toBe(false);
    expect(await h.snapshot()).toEqual(before);
    await expectOracle(ids);
  });

  it('lease renewal stops a worker whose lease was taken over (E7)', async () => {
    const { model_id, ids } = await workload(h.tenant('renewal'));
    const dispatched = await h.dispatch({ only: onlyModel(model_id) });
    const paused = gate((event) => event.kind === 'step-done' && event.seq === 2);
    const worker = runWorkItem(dispatched!.manifest, {
      backend,
      runId: 'stalled',
      renewEveryMs: 50,
      onEvent: paused.onEvent,
    });
    await paused.arrived;
    // The worker stalled past its lease (renewals keep it 60 s ahead): the sweeper re-plans it later.
    const replanned = await h.replan(model_id, Date.now() + 10 * 60_000);
    await pause(300);
    const before = await h.snapshot();
    paused.open();
    const outcome = await worker;
    expect(outcome.models.map((m) => m.outcome)).toEqual(['lease_lost']);
    expect(await h.snapshot()).toEqual(before);
    expect(await h.modelRow(model_id)).toEqual(replanned);
    expect(
      await objectExists(
        storageKeys.modelState(model_id, dispatched!.item.models[0]?.epoch as number, 'stalled'),
      ),
    ).toBe(false);
    await drainModel(model_id);
    await expectOracle(ids);
  });

  describe('sample claims (R4)', () => {
    async function longSample(tenant: string): Promise<string> {
      const t = h.tenant(tenant);
      const session = await t.samplingSession({ base_model: BASE_MODEL });
      return t.sample(session, {
        num_samples: 1,
        prompt: { chunks: [{ type: 'encoded_text', tokens: [72, 105] }] },
        sampling_params: { max_tokens: 8, seed: 5 },
      });
    }

    it('a sample whose runs keep failing as the infrastructure’s fails as a server error after K attempts (E2)', async () => {
      const requestId = await longSample('sample-attempts');
      const failing = Object.create(backend) as Backend;
      failing.sample = async () => {
        throw new InfrastructureError('device lost');
      };
      const maxAttempts = config().tunables.maxAttempts;
      for (let attempt = 1; attempt <= maxAttempts; attempt++) {
        const dispatched = await h.dispatch({ only: (row) => row.request_id === requestId });
        const outcome = await runWorkItem(dispatched!.manifest, { backend: failing });
        expect(outcome.samples.map((sample) => sample.outcome)).toEqual(['failed']);
        expect(await h.future(requestId)).toMatchObject({ status: 'pending', attempts: attempt });
      }
      // The next run does not sample: the sample ends failed, as a model's step does after K attempts.
      const dispatched = await h.dispatch({ only: (row) => row.request_id === requestId });
      const outcome = await runWorkItem(dispatched!.manifest, { backend: failing });
      expect(outcome.samples.map((sample) => sample.outcome)).toEqual(['committed']);
      const answer = (await h.answer('sample-attempts', requestId)) as { error: string; category: string };
      expect(answer).toEqual({ error: `Request failed after ${maxAttempts} attempts`, category: 'server' });
    });

    it('a sample whose workers vanish with its claim fails as a server error after K attempts (E2)', async () => {
      const requestId = await longSample('sample-vanished');
      const maxAttempts = config().tunables.maxAttempts;
      const expire = () =>
        h.cloud.clients.doc.send(
          new UpdateCommand({
            TableName: config().table('registry'),
            Key: { pk: registryKey.sampleClaim(requestId) },
            UpdateExpression: 'SET lease_until = :ended',
            ExpressionAttributeValues: { ':ended': Date.now() - 1 },
          }),
        );
      // K dispatches whose workers die before doing anything: each claim's lease runs out.
      for (let attempt = 1; attempt <= maxAttempts; attempt++) {
        expect(await h.dispatch({ only: (row) => row.request_id === requestId })).toBeDefined();
        await expire();
        expect(await h.registry(registryKey.sampleClaim(requestId))).toMatchObject({ claims: attempt });
      }
      // The next dispatch takes the claim over a K-th time: its run fails the sample instead of sampling.
      const dispatched = await h.dispatch({ only: (row) => row.request_id === requestId });
      const outcome = await runWorkItem(dispatched!.manifest, { backend });
      expect(outcome.samples.map((sample) => sample.outcome)).toEqual(['committed']);
      const answer = (await h.answer('sample-vanished', requestId)) as { error: string; category: string };
      expect(answer).toEqual({ error: `Request failed after ${maxAttempts} attempts`, category: 'server' });
      // Its commit deleted the claim: a count never outlives its sample's runs.
      expect(await h.registry(registryKey.sampleClaim(requestId))).toBeUndefined();
    });

    it('a long sample renews its claim while it runs, so no tick plans it again', async () => {
      const requestId = await longSample('sample-renewal');
      const dispatched = await h.dispatch({ only: (row) => row.request_id === requestId });
      const paused = gate((event) => event.kind === 'sample-slice' && event.request_id === requestId);
      const worker = runWorkItem(dispatched!.manifest, {
        backend,
        leaseMs: 60_000,
        renewEveryMs: 50,
        sampleSliceTokens: 1,
        onEvent: paused.onEvent,
      });
      await paused.arrived;
      const stalledAt = Date.now();
      await pause(300);
      const claim = await h.registry<{ claim_token: string; lease_until: number; ttl: number }>(
        registryKey.sampleClaim(requestId),
      );
      expect(claim?.claim_token).toBe(dispatched!.item.samples[0]!.claim_token);
      // Renewed during the stall: the scheduler reads this claim as live (readLiveSampleClaims).
      expect(claim!.lease_until).toBeGreaterThan(stalledAt + 59_000);
      expect(claim!.ttl).toBeGreaterThan(claim!.lease_until / 1000);
      expect(await h.dispatch({ only: (row) => row.request_id === requestId })).toBeUndefined();
      paused.open();
      const outcome = await worker;
      expect(outcome.samples.map((sample) => sample.outcome)).toEqual(['committed']);
      expect((await h.future(requestId))?.status).toBe('completed');
      expect(await h.registry(registryKey.sampleClaim(requestId))).toBeUndefined();
    });

    it('a sample whose claim another work item took stops with lease_lost and writes nothing', async () => {
      const requestId = await longSample('sample-claim-lost');
      const dispatched = await h.dispatch({ only: (row) => row.request_id === requestId });
      const paused = gate((event) => event.kind === 'sample-slice' && event.request_id === requestId);
      const worker = runWorkItem(dispatched!.manifest, {
        backend,
        renewEveryMs: 50,
        sampleSliceTokens: 1,
        onEvent: paused.onEvent,
      });
      await paused.arrived;
      // The claim expired and a later tick claimed the sample for another work item.
      const taken = {
        pk: registryKey.sampleClaim(requestId),
        claim_token: 'wi-later',
        lease_until: Date.now() + 60_000,
      };
      await h.cloud.clients.doc.send(new PutCommand({ TableName: config().table('registry'), Item: taken }));
      await pause(300);
      const before = await h.snapshot();
      paused.open();
      const outcome = await worker;
      expect(outcome.samples.map((sample) => sample.outcome)).toEqual(['lease_lost']);
      expect(await h.snapshot()).toEqual(before);
      expect((await h.future(requestId))?.status).toBe('pending');
      expect(await h.registry(registryKey.sampleClaim(requestId))).toMatchObject({ claim_token: 'wi-later' });
    });
  });

  it('an infrastructure error fails only its model, which is released for re-plan; other models commit', async () => {
    const healthy = await workload(h.tenant('healthy'));
    const flaky = await workload(h.tenant('flaky'), 3);
    let failures = 1;
    const failing = Object.create(backend) as Backend;
    failing.optimStep = async (state: BackendState, params) => {
      // Only the flaky model (rank 3) meets the fault, once.
      if (asReferenceState(state).rank === 3 && failures-- > 0) throw new InfrastructureError('device lost');
      return backend.optimStep(state, params);
    };
    const only = (row: LiveRow) => row.model_id === healthy.model_id || row.model_id === flaky.model_id;
    const dispatched = await h.dispatch({ only });
    expect(dispatched!.item.models).toHaveLength(2);
    const outcome = await runWorkItem(dispatched!.manifest, { backend: failing });
    const byModel = new Map(outcome.models.map((m) => [m.model_id, m]));
    expect(byModel.get(healthy.model_id)?.outcome).toBe('committed');
    expect(byModel.get(flaky.model_id)).toMatchObject({ outcome: 'failed', released: true });
    expect(outcome.retry).toBe(true);
    const released = (await h.modelRow(flaky.model_id)) as ModelRow;
    expect(released).toMatchObject({ attempts: 1, planned_through: 0, applied_through: 0, epoch: 2 });
    expect(released.inflight).toBeUndefined();
    for (const id of flaky.ids) expect((await h.future(id))?.status).toBe('pending');

    await drainModel(flaky.model_id, failing);
    expect(((await h.modelRow(flaky.model_id)) as ModelRow).attempts).toBe(0);
    await expectOracle([...healthy.ids, ...flaky.ids]);
  });

  it('after K failed attempts the next step is a fail step: a server error, no state change, then the model carries on', async () => {
    const t = h.tenant('exhausted');
    const m = await t.createModel(4, 9);
    await drainModel(m.model_id);
    const created = (await h.modelRow(m.model_id)) as ModelRow;
    const doomed = await t.pass('forward_backward', m.model_id, crossEntropy(textDatum('never applied')));
    const optim = await t.optimStep(m.model_id);
    const check = await t.pass('forward', m.model_id, crossEntropy(textDatum('never applied')));
    for (let attempt = 0; attempt < config().tunables.maxAttempts; attempt++) {
      await h.dispatch({ only: onlyModel(m.model_id) });
      await h.replan(m.model_id);
    }
    const failStep = await h.dispatch({ only: onlyModel(m.model_id) });
    expect(failStep!.item.models[0]?.steps).toEqual([
      expect.objectContaining({ request_id: doomed, fail: expect.objectContaining({ category: 'server' }) }),
    ]);
    await runWorkItem(failStep!.manifest, { backend });
    const after = (await h.modelRow(m.model_id)) as ModelRow;
    expect(after).toMatchObject({ attempts: 0, applied_through: 2, state_ref: created.state_ref });
    const answer = (await h.answer('exhausted', doomed)) as { error: string; category: string };
    expect(answer).toEqual({ error: expect.stringMatching(/after 3 attempts/), category: 'server' });
    await drainModel(m.model_id);
    await expectOracle([m.request_id, doomed, optim, check], new Set([doomed]));
  });
});
