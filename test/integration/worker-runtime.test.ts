import { GetObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Backend, PassItem } from '../../shared/backend/backend.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { BASE_MODELS_VAR, config, resetConfig } from '../../shared/base/config.js';
import { checkpointContentId, storageKeys } from '../../shared/base/storage-keys.js';
import type { CheckpointNameRecord, ModelRow, SamplingSessionRecord } from '../../shared/domain/records.js';
import { registryKey } from '../../shared/domain/records.js';
import { runWorkItem, type WorkerOptions } from '../../shared/services/worker/index.js';
import { BASE_MODEL, crossEntropy, textDatum, WorkerHarness } from '../support/worker-harness.js';

let h: WorkerHarness;

beforeAll(async () => {
  h = await WorkerHarness.start();
});

afterAll(() => h?.cloud.clients.dynamo.destroy());

/** A reference backend that counts fused pass batches. */
function countingBackend(): Backend & { batches: number[] } {
  const inner = new ReferenceBackend();
  const counting = Object.create(inner) as Backend & { batches: number[] };
  counting.batches = [];
  counting.runPasses = async (items: readonly PassItem[]) => {
    counting.batches.push(items.length);
    return inner.runPasses(items);
  };
  return counting;
}

/** Dispatches and runs work items until the planner finds nothing. */
async function drain(backend: Backend, options: Partial<WorkerOptions> = {}) {
  const outcomes = [];
  for (let dispatched = await h.dispatch(); dispatched; dispatched = await h.dispatch()) {
    outcomes.push(await runWorkItem(dispatched.manifest, { backend, ...options }));
  }
  return outcomes;
}

describe('the worker runtime on the local cloud', () => {
  it('runs work items of two tenants, commits each model, and every answer equals the sequential oracle (R1)', async () => {
    const acme = h.tenant('acme');
    const beta = h.tenant('beta');
    const a = await acme.createModel(4, 11);
    const b = await beta.createModel(2, 5);
    await acme.pass(
      'forward_backward',
      a.model_id,
      crossEntropy(textDatum('hello world'), textDatum('lora adapters')),
    );
    await beta.pass('forward_backward', b.model_id, crossEntropy(textDatum('another tenant')));
    await acme.pass('forward_backward', a.model_id, crossEntropy(textDatum('one more batch')));
    await acme.optimStep(a.model_id, { learning_rate: 0.05, weight_decay: 0.01 });
    await beta.optimStep(b.model_id, { learning_rate: 0.1 });
    await acme.pass('forward', a.model_id, crossEntropy(textDatum('hello world')));
    await beta.pass('forward_backward', b.model_id, crossEntropy(textDatum('another tenant')));
    await acme.saveWeights(a.model_id, 'step-1');
    await acme.saveForSampler(a.model_id, 'sampler-1');
    await beta.saveForSampler(b.model_id);
    await beta.unload(b.model_id);
    await acme.pass('forward_backward', a.model_id, crossEntropy(textDatum('after the save')));
    await acme.optimStep(a.model_id);
    await acme.loadWeights(a.model_id, `tinker://${a.model_id}/weights/step-1`, true);
    await acme.pass('forward', a.model_id, crossEntropy(textDatum('hello world')));
    const base = await acme.samplingSession({ base_model: BASE_MODEL });
    await acme.sample(base, {
      num_samples: 2,
      prompt: { chunks: [{ type: 'encoded_text', tokens: [72, 105] }] },
      sampling_params: { max_tokens: 6, temperature: 0.8, seed: 42 },
      prompt_logprobs: true,
    });

    const backend = countingBackend();
    // A window, so both models' passes meet in the batcher although each first reads its own row and
    // state over the network (with the default, a loaded machine can split them).
    const outcomes = await drain(backend, { passWindowMs: 250 });
    expect(outcomes.every((outcome) => !outcome.retry)).toBe(true);
    expect(outcomes.flatMap((o) => o.models).every((m) => m.outcome === 'committed')).toBe(true);
    // The first work item holds both models' passes, fused into one backend batch.
    expect(backend.batches).toContain(2);

    // Samples from the two sampler checkpoints, now committed.
    const named = await acme.samplingSession({
      model_path: `tinker://${a.model_id}/sampler_weights/sampler-1`,
    });
    const unnamedId = (await h.registry<SamplingSessionRecord>(
      registryKey.samplingSession(
        (
          h.submissions.find((s) => s.kind === 'save_weights_for_sampler' && s.model_id === b.model_id) as {
            sampling_session_id: string;
          }
        ).sampling_session_id,
      ),
    )) as SamplingSessionRecord;
    await acme.sample(named, {
      num_samples: 1,
      prompt: { chunks: [{ type: 'encoded_text', tokens: [104, 101] }] },
      sampling_params: { max_tokens: 8, temperature: 1, top_k: 20, seed: 7 },
    });
    await beta.sample(unnamedId.sampling_session_id, {
      num_samples: 3,
      prompt: { chunks: [{ type: 'encoded_text', tokens: [97] }] },
      sampling_params: { max_tokens: 5, temperature: 0.7 },
    });
    const sampleOutcomes = await drain(backend);
    expect(sampleOutcomes.flatMap((o) => o.samples).map((s) => s.outcome)).toEqual([
      'committed',
      'committed',
    ]);

    const expected = await h.oracle();
    const actual = await h.answers();
    expect(actual).toEqual(expected);
    for (const answer of actual.values()) expect(answer).not.toHaveProperty('category');

    // Model rows: applied through their last seq, idle, attempts reset, state under an epoch's and a
    // run's key (E3), the run recorded beside it.
    const rowA = (await h.modelRow(a.model_id)) as ModelRow;
    expect(rowA).toMatchObject({ applied_through: 11, planned_through: 11, attempts: 0 });
    expect(rowA.inflight).toBeUndefined();
    expect(rowA.lease_until).toBeUndefined();
    // The last work item held only a forward, so the state is the one the work item before it wrote.
    expect(rowA.epoch).toBe(3);
    expect(rowA.state_ref).toMatch(new RegExp(`^state/${a.model_id}/2/[0-9a-f]{12}\\.bin$`));
    expect(rowA.last_run).toMatch(/^[0-9a-f]{12}$/);

    // Checkpoint names committed with their blob; the unnamed save created its sampling session.
    const saveId = h.submissions.find((s) => s.kind === 'save_weights')?.request_id as string;
    const name = (await h.registry<CheckpointNameRecord>(
      registryKey.checkpointName(a.model_id, 'weights', 'step-1'),
    )) as CheckpointNameRecord;
    expect(name).toMatchObject({
      status: 'committed',
      request_id: saveId,
      blob_key: expect.stringMatching(
        new RegExp(`^checkpoints/${a.model_id}/${checkpointContentId(saveId)}/[0-9a-f]{12}\\.bin$`),
      ),
    });
    const blob = await h.cloud.clients.s3.send(
      new GetObjectCommand({ Bucket: config().bucket, Key: name.blob_key as string }),
    );
    expect((await blob.Body?.transformToByteArray())?.length).toBeGreaterThan(100);
    expect(unnamedId).toMatchObject({ tenant: 'beta', model_id: b.model_id, base_model: BASE_MODEL });
    // unload_model committed the status; its sampler checkpoint still serves samples (above).
    expect(await h.modelRow(b.model_id)).toMatchObject({ status: 'unloaded', applied_through: 6 });
    expect(unnamedId.checkpoint_id).toMatch(/^c-/);
  });

  it('puts results over the inline limit in S3 and answers them the same', async () => {
    const t = h.tenant('big');
    const m = await t.createModel(3, 1);
    const fb = await t.pass(
      'forward_backward',
      m.model_id,
      crossEntropy(textDatum('a result bigger than the limit')),
    );
    const only = (row: { model_id: string }) => row.model_id === m.model_id;
    const dispatched = await h.dispatch({ only });
    await runWorkItem(dispatched!.manifest, {
      backend: new ReferenceBackend(),
      inlineResultMaxBytes: 200,
      runId: 'big-run',
    });
    const row = await h.future(fb);
    expect(row?.result).toBeUndefined();
    expect(row?.result_key).toBe(storageKeys.result(fb, 'big-run'));
    expect(row?.run).toBe('big-run');
    const create = await h.future(m.request_id);
    // Inline results are the JSON text (DynamoDB numbers cannot hold every float64).
    expect(JSON.parse(create?.result as string)).toEqual({ model_id: m.model_id, type: 'create_model' });
    expect(await h.answer('big', fb)).toEqual((await h.oracle()).get(fb));
  });

  it('a user error fails only its own step; later steps still run, as the oracle would (E6)', async () => {
    const t = h.tenant('careless');
    const m = await t.createModel(4, 2);
    const good = await t.pass('forward_backward', m.model_id, crossEntropy(textDatum('good data')));
    // Token 300 is outside the reference vocabulary. Intake refuses it (B2) from the limits BASE_MODELS
    // publishes, so it is submitted under a configuration that claims a larger vocabulary (as a payload
    // accepted under another configuration would be): the backend's check makes it a user error at
    // execution.
    const bad = await withBaseModels([{ name: 'reference/byte-lm', vocab_size: 1000 }], () =>
      t.pass('forward_backward', m.model_id, {
        data: [
          {
            model_input: { chunks: [{ type: 'encoded_text', tokens: [1, 300] }] },
            loss_fn_inputs: { target_tokens: { data: [2, 3], dtype: 'int64', shape: [2] } },
          },
        ],
        loss_fn: 'cross_entropy',
      }),
    );
    const optim = await t.optimStep(m.model_id);
    const after = await t.pass('forward', m.model_id, crossEntropy(textDatum('good data')));
    const only = (row: { model_id: string }) => row.model_id === m.model_id;
    for (let d = await h.dispatch({ only }); d; d = await h.dispatch({ only })) {
      await runWorkItem(d.manifest, { backend: new ReferenceBackend() });
    }
    const failed = (await h.answer('careless', bad)) as { error: string; category: string };
    expect(failed.category).toBe('user');
    expect(failed.error).toMatch(/tokens\[1\].*vocabulary/);
    const [expected, actual] = [await h.oracle(), await h.answers()];
    for (const id of [good, bad, optim, after]) expect(actual.get(id)).toEqual(expected.get(id));
    const forward = (await h.answer('careless', after)) as { metrics: Record<string, number> };
    expect(forward.metrics['weights_version:max']).toBe(1);
  });
});

/** Runs `body` with BASE_MODELS set to `models`, then restores what was there. */
async function withBaseModels<T>(models: readonly object[], body: () => Promise<T>): Promise<T> {
  const before = process.env[BASE_MODELS_VAR];
  process.env[BASE_MODELS_VAR] = JSON.stringify(models);
  resetConfig();
  try {
    return await body();
  } finally {
    if (before === undefined) delete process.env[BASE_MODELS_VAR];
    else process.env[BASE_MODELS_VAR] = before;
    resetConfig();
  }
}
