import { describe, expect, it } from 'vitest';
import type { Backend, BackendState, ForwardBackwardInput } from '../../shared/backend/backend.js';
import { type ForwardBackwardInputJson, passInputFromJson } from '../../shared/backend/pass-input.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { InfrastructureError } from '../../shared/base/errors.js';
import { checkpointContentId, storageKeys } from '../../shared/base/storage-keys.js';
import type { WorkItemModel, WorkItemStep } from '../../shared/domain/planning/work-item.js';
import { PassBatcher } from '../../shared/services/worker/pass-batcher.js';
import { passResult } from '../../shared/services/worker/results.js';
import { executeStep, type PartState, type StepEnv } from '../../shared/services/worker/steps.js';

const backend = new ReferenceBackend();
const MODEL = 'model-1';
const BASE = 'reference/byte-lm';

const text = (s: string) => [...Buffer.from(s, 'utf8')];
/** A stored payload's `input` (JSON, as intake stores it). */
function input(s: string): ForwardBackwardInputJson {
  const all = text(s);
  return {
    data: [
      {
        model_input: { chunks: [{ type: 'encoded_text', tokens: all.slice(0, -1) }] },
        loss_fn_inputs: { target_tokens: { data: all.slice(1), dtype: 'int64', shape: [all.length - 1] } },
      },
    ],
    loss_fn: 'cross_entropy',
  };
}
const badInput: ForwardBackwardInputJson = {
  data: [
    {
      model_input: { chunks: [{ type: 'encoded_text', tokens: [1, 999] }] },
      loss_fn_inputs: { target_tokens: { data: [2, 3], dtype: 'int64', shape: [2] } },
    },
  ],
  loss_fn: 'cross_entropy',
};

/** The backend's typed form of a stored input, for direct backend calls. */
const typed = (json: ForwardBackwardInputJson): ForwardBackwardInput => passInputFromJson(json, 'input');

// A sampler ref carries the legacy path, as a payload stored before W5 does: results are issued in the
// SDK's form from the name regardless.
const ref = (kind: 'weights' | 'sampler', name: string) => ({
  pk: `ckpt#${MODEL}#${kind}#${name}`,
  model_id: MODEL,
  kind,
  name,
  path: kind === 'weights' ? `tinker://${MODEL}/weights/${name}` : `tinker://${MODEL}/${name}`,
});

let seq = 0;
const step = (request_type: WorkItemStep['request_type'], payload?: unknown, fail?: WorkItemStep['fail']) => {
  seq += 1;
  const id = `req-${seq}`;
  return {
    request_id: id,
    seq,
    request_type,
    ...(payload === undefined ? {} : { payload }),
    ...(fail ? { fail } : {}),
  };
};

/** Clients that fail the test if a step touches the cloud. */
const noCloud = new Proxy(
  {},
  {
    get: () => {
      throw new Error('this step must not touch the cloud');
    },
  },
) as never;

function setup(b: Backend = backend): { part: PartState; env: StepEnv } {
  const model: WorkItemModel = {
    model_id: MODEL,
    tenant: 'acme',
    epoch: 1,
    inflight: `${MODEL}@1`,
    base_applied_through: 0,
    steps: [{ request_id: 'x', seq: 1, request_type: 'create_model', payload: {} }],
  };
  return {
    part: { state: undefined, stateChanged: false, unloaded: false, saved: new Map() },
    env: {
      backend: b,
      passes: new PassBatcher(b),
      clients: { doc: noCloud, s3: noCloud },
      tables: { futures: 'futures', registry: 'registry' },
      bucket: 'data',
      model,
      run: 'run-1',
      now: () => 1000,
    },
  };
}

const createPayload = { request_type: 'create_model', base_model: BASE, lora_config: { rank: 4, seed: 2 } };
const json = (value: unknown) => JSON.parse(JSON.stringify(value)) as unknown;

describe('executeStep: each request type against the backend, with Tinker result shapes', () => {
  it('a whole sequence gives what direct backend calls give', async () => {
    const { part, env } = setup();
    const run = (s: WorkItemStep) => executeStep(s, part, env);

    let direct: BackendState = await backend.createModel({
      base_model: BASE,
      lora_config: { rank: 4, seed: 2 },
    });
    expect((await run(step('create_model', createPayload))).outcome).toEqual({
      status: 'completed',
      result: { model_id: MODEL, type: 'create_model' },
    });

    const fb = await backend.forwardBackward(direct, typed(input('hello world')));
    direct = fb.state;
    const fbStep = await run(
      step('forward_backward', { request_type: 'forward_backward', seq_id: 1, input: input('hello world') }),
    );
    expect(json(fbStep.outcome)).toEqual({ status: 'completed', result: json(passResult(fb.result)) });
    expect(
      Object.keys(fbStep.outcome.status === 'completed' ? (fbStep.outcome.result as object) : {}).sort(),
    ).toEqual(['loss_fn_output_type', 'loss_fn_outputs', 'metrics']);

    const adam = {
      learning_rate: 0.1,
      beta1: 0.9,
      beta2: 0.95,
      eps: 1e-12,
      weight_decay: 0,
      grad_clip_norm: 0,
    };
    const optim = await backend.optimStep(direct, adam);
    direct = optim.state;
    expect(
      (await run(step('optim_step', { request_type: 'optim_step', seq_id: 2, adam_params: adam }))).outcome,
    ).toEqual({
      status: 'completed',
      result: { metrics: optim.result.metrics },
    });

    const save = step('save_weights', {
      request_type: 'save_weights',
      seq_id: 3,
      checkpoint: ref('weights', 'w1'),
    });
    const saved = await run(save);
    // Under the run's own keys (E3).
    const saveKey = storageKeys.checkpoint(MODEL, checkpointContentId(save.request_id), 'run-1');
    expect(saved).toMatchObject({
      outcome: {
        status: 'completed',
        result: { path: `tinker://${MODEL}/weights/w1`, type: 'save_weights' },
      },
      checkpoint: {
        action: 'commit',
        pk: ref('weights', 'w1').pk,
        blob_key: saveKey,
        archive_key: storageKeys.archive(MODEL, checkpointContentId(save.request_id), 'run-1'),
        listing: { tenant: 'acme', model_id: MODEL, kind: 'weights', name: 'w1' },
      },
    });
    expect(part.saved.get(checkpointContentId(save.request_id))?.blob).toEqual({
      bytes: await backend.exportWeights(direct, 'training'),
    });

    const named = await run(
      step('save_weights_for_sampler', {
        request_type: 'save_weights_for_sampler',
        seq_id: 4,
        checkpoint: ref('sampler', 's1'),
      }),
    );
    expect(named.outcome).toEqual({
      status: 'completed',
      result: { path: `tinker://${MODEL}/sampler_weights/s1`, type: 'save_weights_for_sampler' },
    });
    expect(named.sampling_session).toBeUndefined();
    expect(named.checkpoint).toMatchObject({ listing: { kind: 'sampler', name: 's1' } });

    const unnamedStep = step('save_weights_for_sampler', {
      request_type: 'save_weights_for_sampler',
      seq_id: 5,
      checkpoint: ref('sampler', 'samp-1'),
      sampling_session: {
        sampling_session_id: 'samp-1',
        session_id: 'sess-1',
        sampling_session_seq_id: 0,
        base_model: BASE,
      },
    });
    const unnamed = await run(unnamedStep);
    expect(unnamed.outcome).toEqual({
      status: 'completed',
      result: { sampling_session_id: 'samp-1', type: 'save_weights_for_sampler' },
    });
    expect(unnamed.sampling_session).toEqual({
      pk: 'ss#samp-1',
      sampling_session_id: 'samp-1',
      tenant: 'acme',
      session_id: 'sess-1',
      model_id: MODEL,
      base_model: BASE,
      checkpoint_id: checkpointContentId(unnamedStep.request_id),
      model_path: `tinker://${MODEL}/sampler_weights/samp-1`,
      created_at: 1000,
      // One of its session's samplers (GET sessions/{id}, C1).
      parent_key: 'session#sess-1',
      list_sort: '0000000001000#samp-1',
    });
    expect(unnamed.checkpoint).not.toHaveProperty('listing');

    // Train on, then load the checkpoint saved earlier in this part (from memory, no cloud).
    direct = (await backend.forwardBackward(direct, typed(input('more')))).state;
    await run(
      step('forward_backward', { request_type: 'forward_backward', seq_id: 6, input: input('more') }),
    );
    direct = await backend.importWeights(direct, await backend.exportWeights(optim.state, 'training'), {
      optimizer: true,
    });
    const load = await run(
      step('load_weights', {
        request_type: 'load_weights',
        seq_id: 7,
        checkpoint: { ...ref('weights', 'w1'), content_id: checkpointContentId(save.request_id) },
        optimizer: true,
      }),
    );
    expect(load.outcome).toEqual({
      status: 'completed',
      result: { path: `tinker://${MODEL}/weights/w1`, type: 'load_weights' },
    });

    const forward = await backend.forward(direct, typed(input('hello world')));
    expect(
      json(
        (await run(step('forward', { request_type: 'forward', seq_id: 8, input: input('hello world') })))
          .outcome,
      ),
    ).toEqual({
      status: 'completed',
      result: json(passResult(forward)),
    });
    expect(await backend.serializeState(part.state as BackendState)).toEqual(
      await backend.serializeState(direct),
    );

    expect((await run(step('unload_model', { request_type: 'unload_model' }))).outcome).toEqual({
      status: 'completed',
      result: { model_id: MODEL, type: 'unload_model' },
    });
    expect(part.unloaded).toBe(true);
    const late = await run(step('forward', { request_type: 'forward', seq_id: 9, input: input('x y') }));
    expect(late.outcome).toEqual({
      status: 'failed',
      error: { message: `Model ${MODEL} is unloaded`, category: 'user' },
    });
  });
});

describe('executeStep: failures (E6)', () => {
  it('a fail step records its error, reads no payload and leaves the state alone', async () => {
    const { part, env } = setup();
    await executeStep(step('create_model', createPayload), part, env);
    const before = part.state;
    part.stateChanged = false;
    const error = { message: 'Request failed after 3 attempts', category: 'server' as const };
    const failed = await executeStep(step('optim_step', undefined, error), part, env);
    expect(failed).toEqual({ request_id: expect.any(String), outcome: { status: 'failed', error } });
    expect(part.state).toBe(before);
    expect(part.stateChanged).toBe(false);
  });

  it('a user error fails only its step: no partial effect, and the next step runs on the unchanged state', async () => {
    const { part, env } = setup();
    await executeStep(step('create_model', createPayload), part, env);
    const before = part.state as BackendState;
    const bad = await executeStep(
      step('forward_backward', { request_type: 'forward_backward', input: badInput }),
      part,
      env,
    );
    expect(bad.outcome).toMatchObject({ status: 'failed', error: { category: 'user' } });
    expect(bad.outcome.status === 'failed' && bad.outcome.error.message).toMatch(/tokens\[1\]: token id 999/);
    expect(part.state).toBe(before);
    const good = await executeStep(
      step('forward_backward', { request_type: 'forward_backward', input: input('ok now') }),
      part,
      env,
    );
    expect(json(good.outcome)).toEqual({
      status: 'completed',
      result: json(passResult((await backend.forwardBackward(before, typed(input('ok now')))).result)),
    });
  });

  it('steps before a successful create_model fail as user errors', async () => {
    const { part, env } = setup();
    const failed = await executeStep(
      step('optim_step', { request_type: 'optim_step', adam_params: {} }),
      part,
      env,
    );
    expect(failed.outcome).toMatchObject({
      status: 'failed',
      error: { category: 'user', message: expect.stringMatching(/no weights/) },
    });
  });

  it('a failed save releases the name it reserved', async () => {
    const { part, env } = setup();
    const save = await executeStep(
      step('save_weights', { request_type: 'save_weights', checkpoint: ref('weights', 'w9') }),
      part,
      env,
    );
    expect(save).toMatchObject({
      outcome: { status: 'failed', error: { category: 'user' } },
      checkpoint: { action: 'release', pk: ref('weights', 'w9').pk },
    });
  });

  it('a malformed stored payload fails its step as a server error', async () => {
    const { part, env } = setup();
    const failed = await executeStep(
      step('create_model', { request_type: 'create_model', base_model: 7 }),
      part,
      env,
    );
    expect(failed.outcome).toMatchObject({
      status: 'failed',
      error: { category: 'server', message: expect.stringMatching(/malformed/) },
    });
  });

  it('a stored pass input the converter rejects fails as a server error, before the backend runs', async () => {
    const { part, env } = setup();
    await executeStep(step('create_model', createPayload), part, env);
    const before = part.state;
    const good = input('abc');
    const datum = good.data[0] as ForwardBackwardInputJson['data'][number];
    const malformed: unknown[] = [
      { ...good, data: [{ ...datum, model_input: { chunks: [{ type: 'image', tokens: [] }] } }] },
      { ...good, data: 'not an array' },
      {
        ...good,
        data: [{ ...datum, loss_fn_inputs: { target_tokens: { data: [1, 2], dtype: 'int64', shape: [3] } } }],
      },
    ];
    for (const bad of malformed) {
      const failed = await executeStep(
        step('forward_backward', { request_type: 'forward_backward', input: bad }),
        part,
        env,
      );
      expect(failed.outcome).toMatchObject({
        status: 'failed',
        error: { category: 'server', message: expect.stringMatching(/malformed/) },
      });
    }
    expect(part.state).toBe(before);
  });

  it('2-D target tokens answer [N, K] logprobs as JSON numbers', async () => {
    const { part, env } = setup();
    await executeStep(step('create_model', createPayload), part, env);
    const twoD: ForwardBackwardInputJson = {
      loss_fn: 'cross_entropy',
      data: [
        {
          model_input: { chunks: [{ tokens: [104, 105] }] },
          loss_fn_inputs: {
            target_tokens: { data: [105, 33, 33, 10], dtype: 'int64', shape: [2, 2] },
            weights: { data: [0.75, 0.25, 1, 0], dtype: 'float32', shape: [2, 2] },
          },
        },
      ],
    };
    const done = await executeStep(step('forward', { request_type: 'forward', input: twoD }), part, env);
    const result =
      done.outcome.status === 'completed' ? (done.outcome.result as ReturnType<typeof passResult>) : null;
    const outputs = result?.loss_fn_outputs[0];
    expect(outputs?.logprobs).toMatchObject({ dtype: 'float32', shape: [2, 2] });
    expect(Array.isArray(outputs?.logprobs?.data)).toBe(true);
    expect(outputs?.logprobs?.data).toHaveLength(4);
    expect(outputs?.elementwise_loss?.shape).toEqual([2]);
    expect(json(result)).toEqual(result);
  });

  it('an infrastructure error from the backend is thrown, not recorded', async () => {
    const broken = Object.create(backend) as Backend;
    broken.optimStep = async () => {
      throw new InfrastructureError('device lost');
    };
    const { part, env } = setup(broken);
    await executeStep(step('create_model', createPayload), part, env);
    await expect(
      executeStep(step('optim_step', { request_type: 'optim_step', adam_params: {} }), part, env),
    ).rejects.toThrow('device lost');
  });
});
