import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { BASE_MODELS_VAR } from '../../shared/base/config.js';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { runWorkItem } from '../../shared/services/worker/index.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';
import { crossEntropy, textDatum, WorkerHarness } from '../support/worker-harness.js';

/**
 * Regression tests for hardening finding 2: numbers that pass validation but that DynamoDB cannot store
 * as numbers (above 2^53, below 1e-130) used to fail the model's whole commit as "outcome unknown",
 * until K attempts failed it with a server error; a create_model that shared the work item was lost
 * with it ("has no weights"). Results are stored as JSON text now, and a result that is not finite
 * fails only its own step, as a user error.
 */

let h: WorkerHarness;

beforeAll(async () => {
  h = await WorkerHarness.start();
});

afterAll(() => h?.cloud.clients.dynamo.destroy());

async function drain(): Promise<void> {
  const backend = new ReferenceBackend();
  for (let dispatched = await h.dispatch(); dispatched; dispatched = await h.dispatch()) {
    const outcome = await runWorkItem(dispatched.manifest, { backend });
    expect(outcome.retry).toBeFalsy();
    expect(outcome.models.every((model) => model.outcome === 'committed')).toBe(true);
  }
}

const lossSum = (answer: unknown) => (answer as { metrics: Record<string, number> }).metrics['loss:sum'];

describe('results DynamoDB numbers cannot hold', () => {
  it('a loss above 2^53 or below 1e-130 completes, beside the create_model it shares a work item with', async () => {
    const tenant = h.tenant('numbers');
    const model = await tenant.createModel(4, 7);
    const huge = await tenant.pass(
      'forward_backward',
      model.model_id,
      crossEntropy(textDatum('abc', [1e20, 1e20])),
    );
    const tiny = await tenant.pass('forward', model.model_id, crossEntropy(textDatum('abc', [1e-38, 0])));
    const after = await tenant.pass('forward', model.model_id, crossEntropy(textDatum('abc')));
    await drain();
    const answers = await h.answers();
    expect(answers.get(model.request_id)).toMatchObject({ model_id: model.model_id });
    expect(lossSum(answers.get(huge))).toBeGreaterThan(2 ** 53);
    const small = lossSum(answers.get(tiny)) as number;
    expect(small).toBeGreaterThan(0);
    expect(small).toBeLessThan(1e-30);
    expect(lossSum(answers.get(after))).toBeGreaterThan(0);
    // Bit-exact to running the same requests one at a time (R1).
    const oracle = await h.oracle();
    for (const id of [model.request_id, huge, tiny, after]) {
      expect(answers.get(id)).toEqual(oracle.get(id));
    }
  });

  it('a step whose own result is not finite fails as a user error; the model carries on', async () => {
    const tenant = h.tenant('overflow');
    const model = await tenant.createModel(4, 9);
    await tenant.pass('forward_backward', model.model_id, crossEntropy(textDatum('abc')));
    await tenant.optimStep(model.model_id, { learning_rate: 1e300 });
    const poisoned = await tenant.pass('forward', model.model_id, crossEntropy(textDatum('abc')));
    const saved = await tenant.saveWeights(model.model_id, 'after-overflow');
    await drain();
    const answers = await h.answers();
    expect(answers.get(poisoned)).toEqual({ category: 'user' });
    const row = await h.answer('overflow', poisoned);
    expect(row).toMatchObject({
      error: expect.stringMatching(/result is not finite \(result\.loss_fn_outputs\.0\./),
    });
    expect(answers.get(saved)).toMatchObject({ type: 'save_weights' });
  });
});

describe('retrieve_future before the tenant check (hardening finding 6)', () => {
  it('reads only the row head, so another tenant learns nothing from the time a large result takes', async () => {
    const tenant = h.tenant('owner');
    const model = await tenant.createModel(4, 1);
    const big = await tenant.pass(
      'forward_backward',
      model.model_id,
      crossEntropy(textDatum('x'.repeat(2000))),
    );
    await drain();
    // The attributes each read asks for (undefined: the whole row).
    const reads: (string[] | undefined)[] = [];
    const doc = h.cloud.clients.doc;
    doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'GetCommand' || context.commandName === 'GetItemCommand') {
          const input = args.input as {
            ProjectionExpression?: string;
            ExpressionAttributeNames?: Record<string, string>;
          };
          reads.push(
            input.ProjectionExpression === undefined
              ? undefined
              : Object.values(input.ExpressionAttributeNames ?? {}).sort(),
          );
        }
        return next(args);
      },
      { step: 'initialize', name: 'recordGets' },
    );
    const head = ['request_id', 'request_type', 'status', 'tenant'];
    try {
      await expect(h.answer('rival', big)).rejects.toMatchObject({ name: 'NotFoundError' });
      expect(reads).toEqual([head]);
      reads.length = 0;
      expect(await h.answer('owner', big)).toMatchObject({ metrics: expect.any(Object) });
      // The owner's read of the outcome (head, result, result key, error) comes after the head's.
      expect(reads).toEqual([head, [...head, 'error', 'result', 'result_key'].sort()]);
    } finally {
      doc.middlewareStack.remove('recordGets');
    }
  });
});

/**
 * Hardening round 4, findings 7 and 8: what intake accepted and then dropped or failed later. Limits
 * a base model decides are refused at submit with a 400 naming the field (B2), from the limits it
 * publishes (here the reference model, configured with a context of 64 and 4 samples a request);
 * unknown optimizer parameters and a `__proto__` metadata key are refused, not dropped (W7).
 */
describe('what intake used to accept and drop or fail later (hardening round 4)', () => {
  const BASE = 'reference/byte-lm';
  let api: ApiHarness;
  let client: TinkerClient;
  const ids = { session: '', model: '', sampler: '' };

  beforeAll(async () => {
    api = await startApiHarness({
      [BASE_MODELS_VAR]: JSON.stringify([{ name: BASE, max_context_length: 64, max_num_samples: 4 }]),
    });
    ({ client } = await api.tenant('limits'));
    ids.session = (await client.createSession()).session_id;
    ids.model = (
      await client.createModel({
        session_id: ids.session,
        model_seq_id: 0,
        base_model: BASE,
        lora_config: { rank: 4 },
      })
    ).model_id;
    ids.sampler = (
      await client.createSamplingSession({
        session_id: ids.session,
        sampling_session_seq_id: 0,
        base_model: BASE,
      })
    ).sampling_session_id;
  });

  afterAll(async () => {
    await api?.stop();
  });

  it('capabilities and get_info publish the limits', async () => {
    expect((await client.capabilities()).supported_models).toEqual([
      { model_name: BASE, max_context_length: 64, vocab_size: 256, max_num_samples: 4 },
    ]);
    expect((await client.getInfo(ids.model)).model_data).toMatchObject({
      max_context_length: 64,
      vocab_size: 256,
      max_num_samples: 4,
    });
  });

  const tokens = (count: number) => Array.from({ length: count }, (_, i) => 32 + (i % 64));
  const sample = (extra: Record<string, unknown>, params: Record<string, unknown> = {}) => ({
    sampling_session_id: ids.sampler,
    seq_id: 1,
    num_samples: 1,
    prompt: { chunks: [{ type: 'encoded_text', tokens: tokens(3) }] },
    sampling_params: { max_tokens: 4, ...params },
    ...extra,
  });
  const targetIds = (data: number[]) => ({ target_prompt_logprobs: { data, dtype: 'int64', shape: [2, 1] } });

  it.each([
    [
      'a prompt as long as the context',
      () => sample({ prompt: { chunks: [{ tokens: tokens(64) }] } }),
      'prompt',
    ],
    ['max_tokens past the context', () => sample({}, { max_tokens: 62 }), 'sampling_params.max_tokens'],
    ['num_samples over the bound', () => sample({ num_samples: 5 }), 'num_samples'],
    [
      'topk_sample_logprobs over the vocabulary',
      () => sample({ topk_sample_logprobs: 257 }),
      'topk_sample_logprobs',
    ],
    [
      'topk_prompt_logprobs over the vocabulary',
      () => sample({ topk_prompt_logprobs: 300 }),
      'topk_prompt_logprobs',
    ],
    [
      'a prompt token outside the vocabulary',
      () => sample({ prompt: { chunks: [{ tokens: [1] }, { tokens: [2, 256] }] } }),
      'prompt.chunks.1.tokens.1',
    ],
    [
      'a target id outside the vocabulary',
      () => sample(targetIds([3, 256])),
      'target_prompt_logprobs.data.1',
    ],
    ['a stop token outside the vocabulary', () => sample({}, { stop: [[1, 999]] }), 'sampling_params.stop'],
  ])(
    'asample: %s is a 400 naming its field, storing nothing (B2)',
    async (_name, body: () => unknown, field) => {
      const before = await api.counts();
      const answer = await client.raw('POST', '/api/v1/asample', body());
      expect(answer).toMatchObject({ status: 400, body: { field } });
      expect(await api.counts()).toEqual(before);
    },
  );

  const pass = (tokens: number[], targets: number[]) => ({
    model_id: ids.model,
    seq_id: 1,
    forward_backward_input: {
      loss_fn: 'cross_entropy',
      data: [
        {
          model_input: { chunks: [{ type: 'encoded_text', tokens }] },
          loss_fn_inputs: { target_tokens: { data: targets, dtype: 'int64', shape: [targets.length] } },
        },
      ],
    },
  });

  it.each([
    [
      'a datum longer than the context',
      () => pass(tokens(65), tokens(65)),
      'forward_backward_input.data.0.model_input',
    ],
    [
      'an input token outside the vocabulary',
      () => pass([1, 300, 2], [1, 2, 3]),
      'forward_backward_input.data.0.model_input.chunks.0.tokens.1',
    ],
    [
      'a target token outside the vocabulary',
      () => pass([1, 2, 3], [1, 2, 256]),
      'forward_backward_input.data.0.loss_fn_inputs.target_tokens.data.2',
    ],
  ])(
    'forward_backward: %s is a 400 naming its field, storing nothing (B2)',
    async (_name, body: () => unknown, field) => {
      const before = await api.counts();
      const answer = await client.raw('POST', '/api/v1/forward_backward', body());
      expect(answer).toMatchObject({ status: 400, body: { field } });
      expect(await api.counts()).toEqual(before);
    },
  );

  it('the same sample within the limits is taken', async () => {
    const answer = await client.raw(
      'POST',
      '/api/v1/asample',
      sample({ num_samples: 4 }, { max_tokens: 61 }),
    );
    expect(answer.status).toBe(200);
  });

  it.each([
    [
      'create_model of a LoRA with every train flag false',
      'create_model',
      {
        session_id: 'S',
        model_seq_id: 1,
        base_model: BASE,
        lora_config: { rank: 4, train_attn: false, train_mlp: false, train_unembed: false },
      },
      'lora_config',
    ],
    [
      'optim_step with a parameter AdamW does not take',
      'optim_step',
      { model_id: 'M', seq_id: 1, optimizer_params: { type: 'adamw', learning_rate: 0.1, momentum: 0.9 } },
      'optimizer_params.momentum',
    ],
    [
      'create_session with a __proto__ metadata key',
      'create_session',
      '{"user_metadata": {"__proto__": {"x": "1"}, "kept": "y"}}',
      'user_metadata.__proto__',
    ],
    [
      'create_model with a __proto__ metadata key',
      'create_model',
      '{"session_id": "S", "model_seq_id": 1, "base_model": "reference/byte-lm", "lora_config": {"rank": 4}, "user_metadata": {"a": {"__proto__": 1}}}',
      'user_metadata.a.__proto__',
    ],
  ])('%s is a 400 naming the field, storing nothing (W7, B2)', async (_name, path, body, field) => {
    const filled =
      typeof body === 'string'
        ? body.replace('"S"', JSON.stringify(ids.session))
        : JSON.parse(
            JSON.stringify(body)
              .replace('"S"', JSON.stringify(ids.session))
              .replace('"M"', JSON.stringify(ids.model)),
          );
    const before = await api.counts();
    const answer = await client.raw('POST', `/api/v1/${path}`, filled);
    expect(answer).toMatchObject({ status: 400, body: { field } });
    expect(await api.counts()).toEqual(before);
  });
});
