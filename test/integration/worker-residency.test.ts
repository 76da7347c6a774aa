import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Backend } from '../../shared/backend/backend.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { config } from '../../shared/base/config.js';
import type { LiveRow, ModelRow } from '../../shared/domain/records.js';
import { runWorkItem, type WorkerOptions } from '../../shared/services/worker/index.js';
import { Residency, type ResidencyPolicy } from '../../shared/services/worker/residency.js';
import { StateCache } from '../../shared/services/worker/state-cache.js';
import { crossEntropy, textDatum, WorkerHarness } from '../support/worker-harness.js';

/**
 * Resident state (S1, S3, S4 of docs/design.md#s1) through the worker runtime on the local cloud: a
 * holder's commits write no state, only results and the replay log; a snapshot is written when due and
 * when the holder lets go; a worker that does not hold the state rebuilds it from the snapshot and the
 * log; a zombie holder changes nothing. Every answer equals the sequential oracle (R1), bit for bit on
 * the reference backend.
 */

let h: WorkerHarness;

beforeAll(async () => {
  h = await WorkerHarness.start();
});

afterAll(() => h?.cloud.clients.dynamo.destroy());

const POLICY: ResidencyPolicy = {
  maxModels: 8,
  snapshotEverySteps: 1000,
  snapshotEveryMs: 3_600_000,
  idleMs: 3_600_000,
  holdMs: 60_000,
};

function residency(backend: Backend, policy: Partial<ResidencyPolicy> = {}): Residency {
  const { doc, s3 } = h.cloud.clients;
  return new Residency(
    backend,
    { doc, s3, modelsTable: config().table('models'), bucket: config().bucket },
    { ...POLICY, ...policy },
  );
}

/** A worker process: its own backend, state cache and (optionally) residency. */
function worker(resident: boolean, policy: Partial<ResidencyPolicy> = {}) {
  const backend = new ReferenceBackend();
  const held = resident ? residency(backend, policy) : undefined;
  const options: WorkerOptions = {
    backend,
    states: new StateCache(),
    ...(held === undefined ? {} : { residency: held }),
  };
  return { backend, residency: held, options };
}

/** Dispatches one work item of `modelId`'s requests and runs it on `on`. */
async function step(modelId: string, on: { options: WorkerOptions }) {
  const dispatched = await h.dispatch({ only: (row: LiveRow) => row.model_id === modelId });
  if (dispatched === undefined) throw new Error(`nothing to dispatch for ${modelId}`);
  const outcome = await runWorkItem(dispatched.manifest, on.options);
  return { outcome, item: dispatched.item };
}

/** Runs `modelId`'s work items on `on` until nothing is left to dispatch. */
async function drain(modelId: string, on: { options: WorkerOptions }): Promise<void> {
  for (;;) {
    const dispatched = await h.dispatch({ only: (live: LiveRow) => live.model_id === modelId });
    if (dispatched === undefined) return;
    await runWorkItem(dispatched.manifest, on.options);
  }
}

async function stateObjects(modelId: string): Promise<string[]> {
  const page = await h.cloud.clients.s3.send(
    new ListObjectsV2Command({ Bucket: config().bucket, Prefix: `state/${modelId}/` }),
  );
  return (page.Contents ?? []).map((object) => object.Key ?? '');
}

async function row(modelId: string): Promise<ModelRow> {
  return (await h.modelRow(modelId)) as ModelRow;
}

async function expectOracle(): Promise<void> {
  const [answers, oracle] = await Promise.all([h.answers(), h.oracle()]);
  for (const [requestId, expected] of oracle) expect(answers.get(requestId), requestId).toEqual(expected);
}

describe('resident state (S1, S3, S4)', () => {
  it('a holder keeps the state: its commits write no state bytes and append to the replay log', async () => {
    const acme = h.tenant('hold-acme');
    const w = worker(true);
    const { model_id: modelId } = await acme.createModel(4, 7);
    await step(modelId, w);
    for (let i = 0; i < 3; i++) {
      await acme.pass('forward_backward', modelId, crossEntropy(textDatum(`resident step ${i}`)));
      await step(modelId, w);
      await acme.optimStep(modelId, { learning_rate: 0.05 });
      await step(modelId, w);
    }
    await acme.pass('forward', modelId, crossEntropy(textDatum('resident step 0')));
    await step(modelId, w);

    expect(await stateObjects(modelId)).toEqual([]);
    const held = await row(modelId);
    expect(held.state_ref).toBeUndefined();
    expect(held.holder?.worker).toBe(w.residency?.holder.worker);
    expect(held.holder_until).toBeGreaterThan(Date.now());
    // create_model and six training steps changed the state; the forward did not.
    expect(held.replay?.map((entry) => entry.request_type)).toEqual([
      'create_model',
      ...Array.from({ length: 3 }, () => ['forward_backward', 'optim_step']).flat(),
    ]);
    expect(held.applied_through).toBe(8);
    expect(w.residency?.counters).toMatchObject({ hits: 7, misses: 1 });
    await expectOracle();
  });

  it('a snapshot is written when the log reaches its count, and empties the log', async () => {
    const acme = h.tenant('snap-acme');
    const w = worker(true, { snapshotEverySteps: 3 });
    const { model_id: modelId } = await acme.createModel(4, 9);
    await step(modelId, w);
    await acme.pass('forward_backward', modelId, crossEntropy(textDatum('count one')));
    await step(modelId, w);
    expect(await stateObjects(modelId)).toEqual([]);
    await acme.optimStep(modelId);
    await step(modelId, w);
    const snapped = await row(modelId);
    expect(snapped.state_ref).toMatch(new RegExp(`^state/${modelId}/`));
    expect(snapped.snapshot_through).toBe(3);
    expect(snapped.replay).toBeUndefined();
    expect(await stateObjects(modelId)).toEqual([snapped.state_ref]);
    // A save of the training state forces one (S3: snapshots at checkpoints).
    await acme.pass('forward_backward', modelId, crossEntropy(textDatum('count two')));
    await acme.saveWeights(modelId, 'snap-ckpt');
    await step(modelId, w);
    const saved = await row(modelId);
    expect(saved.snapshot_through).toBe(5);
    expect(saved.replay).toBeUndefined();
    await expectOracle();
  });

  it('a worker that does not hold the state rebuilds it by replay; the old holder rebuilds too (S4)', async () => {
    const acme = h.tenant('replay-acme');
    const holder = worker(true);
    const other = worker(false);
    const { model_id: modelId } = await acme.createModel(4, 13);
    await step(modelId, holder);
    await acme.pass('forward_backward', modelId, crossEntropy(textDatum('before the move')));
    await acme.optimStep(modelId, { learning_rate: 0.1 });
    await step(modelId, holder);
    expect((await row(modelId)).replay).toHaveLength(3);

    // The other worker has no state: snapshot (none yet) + 3 replayed steps, then its own steps. It
    // holds nothing, so it writes the state and clears the hold.
    await acme.pass('forward_backward', modelId, crossEntropy(textDatum('on another worker')));
    await acme.optimStep(modelId, { learning_rate: 0.1 });
    await step(modelId, other);
    const moved = await row(modelId);
    expect(moved.holder).toBeUndefined();
    expect(moved.replay).toBeUndefined();
    expect(moved.snapshot_through).toBe(5);

    // The first holder's entry is stale (applied 3, the row 5): it rebuilds from the snapshot.
    await acme.pass('forward', modelId, crossEntropy(textDatum('back on the holder')));
    await step(modelId, holder);
    expect(holder.residency?.counters.misses).toBe(2);
    await expectOracle();
  });

  it('letting go writes a snapshot and clears the hold; a zombie holder changes nothing', async () => {
    const acme = h.tenant('letgo-acme');
    const first = worker(true);
    const { model_id: modelId } = await acme.createModel(4, 17);
    await step(modelId, first);
    await acme.pass('forward_backward', modelId, crossEntropy(textDatum('let go')));
    await step(modelId, first);
    await first.residency?.letGoAll();
    const released = await row(modelId);
    expect(released.holder).toBeUndefined();
    expect(released.replay).toBeUndefined();
    expect(released.snapshot_through).toBe(2);
    expect(await stateObjects(modelId)).toEqual([released.state_ref]);
    expect(first.residency?.counters).toMatchObject({ let_go: 1, let_go_snapshots: 1 });

    // A second holder takes the model from the snapshot (nothing to replay) and holds it.
    const second = worker(true);
    await acme.optimStep(modelId);
    await step(modelId, second);
    // A zombie: the second holder's work item is re-planned while it "sleeps"; a third worker commits.
    await acme.pass('forward_backward', modelId, crossEntropy(textDatum('zombie')));
    const stale = await h.dispatch({ only: (live: LiveRow) => live.model_id === modelId });
    await h.replan(modelId);
    await step(modelId, worker(false));
    const before = await h.snapshot();
    const late = await runWorkItem(stale?.manifest ?? { work_item_id: '', key: '' }, second.options);
    expect(late.models[0]?.outcome).toBe('not_inflight');
    // Its let-go is refused too: the row is no longer its.
    await second.residency?.letGoAll();
    expect(second.residency?.counters.lost).toBe(1);
    expect(await h.snapshot()).toEqual(before);
    await expectOracle();
  });

  it('a holder killed at every step boundary loses nothing: the next worker replays and equals the oracle', async () => {
    const acme = h.tenant('kill-acme');
    const { model_id: modelId } = await acme.createModel(4, 19);
    await step(modelId, worker(true));
    // Each work item holds a forward_backward and its optim_step (R2): boundaries 0, 1 and 2.
    for (let boundary = 0; boundary < 3; boundary++) {
      await acme.pass('forward_backward', modelId, crossEntropy(textDatum(`kill ${boundary}`)));
      await acme.optimStep(modelId, { learning_rate: 0.05 });
      const controller = new AbortController();
      let done = 0;
      const killed = await step(modelId, {
        options: {
          ...worker(true).options,
          signal: controller.signal,
          onEvent: (event) => {
            if (event.kind === 'model-started' && boundary === 0) controller.abort();
            if (event.kind === 'step-done' && ++done >= boundary) controller.abort();
          },
        },
      });
      expect(killed.outcome.models[0]?.outcome).toBe('abandoned');
      await h.replan(modelId);
      // The next holder rebuilds from the row and runs the whole work item again.
      await drain(modelId, worker(true));
    }
    const last = await row(modelId);
    expect(last.applied_through).toBe(7);
    expect(last.replay).toHaveLength(7);
    await expectOracle();
  });
});
