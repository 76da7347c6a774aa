import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { passInputFromJson } from '../../shared/backend/pass-input.js';
import { ValidationError } from '../../shared/base/errors.js';
import {
  checkForwardInput,
  checkSample,
  MAX_SAMPLE_OUTPUT_CELLS,
  parseJsonBody,
  parseRequest,
} from '../../shared/services/api/request-checks.js';
import * as schemas from '../../shared/services/api/schemas.js';

const limits = { maxBodyBytes: 10_000, maxDatums: 4, maxTokensPerRequest: 64 };

function datum(tokens: number[], extra: Record<string, unknown> = {}) {
  return {
    model_input: { chunks: [{ type: 'encoded_text', tokens }] },
    loss_fn_inputs: {
      target_tokens: { data: tokens.map((t) => t + 1), dtype: 'int64', shape: [tokens.length] },
      weights: { data: tokens.map(() => 1), dtype: 'float32', shape: [tokens.length] },
      ...extra,
    },
  };
}

/** A forward_backward body exactly as the SDK's JSON protocol sends it (extra `type` members included). */
function sdkForwardBackward(data: unknown[] = [datum([1, 2, 3])]) {
  return {
    forward_backward_input: { data, loss_fn: 'cross_entropy', loss_fn_config: null },
    model_id: 'model-abc',
    seq_id: 1,
    type: 'forward_backward',
  };
}

const sample = (overrides: Record<string, unknown> = {}) => ({
  sampling_session_id: 'samp-1',
  seq_id: 0,
  num_samples: 1,
  prompt: { chunks: [{ type: 'encoded_text', tokens: [1, 2] }] },
  sampling_params: { max_tokens: 8, temperature: 1, top_k: -1, top_p: 1, seed: null, stop: null },
  prompt_logprobs: false,
  topk_prompt_logprobs: 0,
  type: 'sample',
  ...overrides,
});

function fb(body: unknown) {
  const request = parseRequest(schemas.forwardBackwardRequest, body);
  return checkForwardInput(
    passInputFromJson(request.forward_backward_input, 'forward_backward_input'),
    'forward_backward_input',
    limits,
  );
}

function sampled(body: unknown) {
  return checkSample(parseRequest(schemas.sampleRequest, body), limits);
}

function parsed<S extends z.ZodType>(schema: S) {
  return (body: unknown) => parseRequest(schema, body);
}

interface BadCase {
  readonly name: string;
  readonly run: () => unknown;
  readonly status: number;
  readonly field: string;
  readonly message: RegExp;
}

/** A forward_backward body for `loss_fn` with `config`, over datums carrying the policy inputs. */
function rlBody(
  lossFn: string,
  config: Record<string, unknown> | null,
  inputs: Record<string, unknown> = {},
) {
  const policy = {
    logprobs: { data: [-1, -2, -3], dtype: 'float32', shape: [3] },
    advantages: { data: [1, -1, 0.5], dtype: 'float32', shape: [3] },
  };
  const d = datum([1, 2, 3], { ...policy, ...inputs });
  return {
    ...sdkForwardBackward(),
    forward_backward_input: { data: [d], loss_fn: lossFn, loss_fn_config: config },
  };
}

const inputField = 'forward_backward_input.data.0.loss_fn_inputs';

/** loss_fn_config keys and the policy-gradient inputs, refused at intake naming the field. */
function lossConfigCases(): BadCase[] {
  return [
    {
      name: 'ppo with an unknown config key',
      run: () => fb(rlBody('ppo', { clip_low: 0.8 })),
      status: 400,
      field: 'forward_backward_input.loss_fn_config.clip_low',
      message: /not a config key of loss_fn ppo \(allowed: clip_low_threshold, clip_high_threshold\)/,
    },
    {
      name: 'cross_entropy with any config key',
      run: () => fb(rlBody('cross_entropy', { clip_low_threshold: 0.8 })),
      status: 400,
      field: 'forward_backward_input.loss_fn_config.clip_low_threshold',
      message: /not a config key of loss_fn cross_entropy \(it takes no config keys\)/,
    },
    {
      name: 'importance_sampling with a config key',
      run: () => fb(rlBody('importance_sampling', { beta: 0.1 })),
      status: 400,
      field: 'forward_backward_input.loss_fn_config.beta',
      message: /it takes no config keys/,
    },
    {
      name: 'dro with a clip key',
      run: () => fb(rlBody('dro', { clip_high_threshold: 1.2 })),
      status: 400,
      field: 'forward_backward_input.loss_fn_config.clip_high_threshold',
      message: /allowed: beta/,
    },
    {
      name: 'ppo clip_high_threshold below 1 (an epsilon passed as a bound)',
      run: () => fb(rlBody('ppo', { clip_low_threshold: 0.8, clip_high_threshold: 0.2 })),
      status: 400,
      field: 'forward_backward_input.loss_fn_config.clip_high_threshold',
      message: /must be a ratio bound >= 1, got 0.2/,
    },
    {
      name: 'cispo clip_low_threshold above 1',
      run: () => fb(rlBody('cispo', { clip_low_threshold: 1.1 })),
      status: 400,
      field: 'forward_backward_input.loss_fn_config.clip_low_threshold',
      message: /must be a ratio bound in \[0, 1\], got 1.1/,
    },
    {
      name: 'dro with a negative beta',
      run: () => fb(rlBody('dro', { beta: -0.5 })),
      status: 400,
      field: 'forward_backward_input.loss_fn_config.beta',
      message: /must be a finite number >= 0, got -0.5/,
    },
    {
      name: 'a config value that is a string',
      run: () => fb(rlBody('ppo', { clip_low_threshold: 'low' })),
      status: 400,
      field: 'forward_backward_input.loss_fn_config.clip_low_threshold',
      message: /must be a number .*got the string "low"/,
    },
    {
      name: 'ppo without advantages',
      run: () => {
        const body = rlBody('ppo', null);
        const d = body.forward_backward_input.data[0] as { loss_fn_inputs: Record<string, unknown> };
        delete d.loss_fn_inputs.advantages;
        return fb(body);
      },
      status: 400,
      field: `${inputField}.advantages`,
      message: /required by loss_fn ppo/,
    },
    {
      name: 'logprobs as int64',
      run: () => fb(rlBody('cispo', null, { logprobs: { data: [-1, -2, -3], dtype: 'int64' } })),
      status: 400,
      field: `${inputField}.logprobs.dtype`,
      message: /must be float32, got int64/,
    },
    {
      name: "advantages of another shape than target_tokens'",
      run: () =>
        fb(rlBody('ppo', null, { advantages: { data: [1, 2, 3], dtype: 'float32', shape: [3, 1] } })),
      status: 400,
      field: `${inputField}.advantages`,
      message: /has shape \[3, 1\]; it must match target_tokens' \[3\]/,
    },
    {
      name: 'logprobs beyond float32',
      run: () => fb(rlBody('dro', null, { logprobs: { data: [-1, -1e39, -3], dtype: 'float32' } })),
      status: 400,
      field: `${inputField}.logprobs.data.1`,
      message: /must be a finite float32, got -Infinity/,
    },
    {
      name: 'a weight beyond float32',
      run: () => fb(sdkForwardBackward([datum([1, 2], { weights: { data: [1, 1e39], dtype: 'float32' } })])),
      status: 400,
      field: `${inputField}.weights.data.1`,
      message: /must be a finite float32, got Infinity/,
    },
  ];
}

const bad: BadCase[] = [
  {
    name: 'body not JSON',
    run: () => parseJsonBody('{"a":', limits),
    status: 400,
    field: 'body',
    message: /not valid JSON/,
  },
  {
    name: 'body too large',
    run: () => parseJsonBody(`"${'x'.repeat(10_001)}"`, limits),
    status: 413,
    field: 'body',
    message: /exceeds the limit of 10000 bytes/,
  },
  {
    name: 'missing model_id',
    run: () => fb({ ...sdkForwardBackward(), model_id: undefined }),
    status: 400,
    field: 'model_id',
    message: /model_id: .*expected string/,
  },
  {
    name: 'model_id with a key separator',
    run: () => fb({ ...sdkForwardBackward(), model_id: 'a#b' }),
    status: 400,
    field: 'model_id',
    message: /must be an id/,
  },
  {
    name: 'seq_id zero',
    run: () => fb({ ...sdkForwardBackward(), seq_id: 0 }),
    status: 400,
    field: 'seq_id',
    message: /seq_id: .*>=1/,
  },
  {
    name: 'seq_id fractional',
    run: () => fb({ ...sdkForwardBackward(), seq_id: 1.5 }),
    status: 400,
    field: 'seq_id',
    message: /seq_id: .*int/,
  },
  {
    name: 'unknown loss_fn',
    run: () =>
      fb({ ...sdkForwardBackward(), forward_backward_input: { data: [datum([1])], loss_fn: 'mse' } }),
    status: 400,
    field: 'forward_backward_input.loss_fn',
    message: /cross_entropy/,
  },
  {
    name: 'no datums',
    run: () => fb(sdkForwardBackward([])),
    status: 400,
    field: 'forward_backward_input.data',
    message: /data: .*>=1/,
  },
  {
    name: 'too many datums',
    run: () => fb(sdkForwardBackward([datum([1]), datum([1]), datum([1]), datum([1]), datum([1])])),
    status: 413,
    field: 'forward_backward_input.data',
    message: /5 datums exceeds the limit of 4/,
  },
  {
    name: 'too many tokens',
    run: () =>
      fb(
        sdkForwardBackward([
          datum(Array.from({ length: 40 }, () => 1)),
          datum(Array.from({ length: 40 }, () => 1)),
        ]),
      ),
    status: 413,
    field: 'forward_backward_input.data',
    message: /80 tokens exceeds the limit of 64/,
  },
  {
    name: 'negative token',
    run: () => fb(sdkForwardBackward([datum([1, -2])])),
    status: 400,
    field: 'forward_backward_input.data.0.model_input.chunks.0.tokens.1',
    message: /expected a token id \(an integer >=0 and <2\^31\), got -2/,
  },
  {
    name: 'string token',
    run: () => fb(sdkForwardBackward([datum([1, '2' as unknown as number])])),
    status: 400,
    field: 'forward_backward_input.data.0.model_input.chunks.0.tokens.1',
    message: /expected a token id .*, got "2"/,
  },
  {
    name: 'token id beyond 31 bits',
    run: () => fb(sdkForwardBackward([datum([1, 2 ** 31])])),
    status: 400,
    field: 'forward_backward_input.data.0.model_input.chunks.0.tokens.1',
    message: /got 2147483648/,
  },
  {
    name: 'tokens not an array',
    run: () => fb(sdkForwardBackward([{ ...datum([1]), model_input: { chunks: [{ tokens: 'abc' }] } }])),
    status: 400,
    field: 'forward_backward_input.data.0.model_input.chunks.0.tokens',
    message: /expected array/,
  },
  {
    name: 'tensor value that is not a number',
    run: () => fb(sdkForwardBackward([datum([1, 2], { weights: { data: [1, null], dtype: 'float32' } })])),
    status: 400,
    field: 'forward_backward_input.data.0.loss_fn_inputs.weights.data.1',
    message: /expected a finite number, got null/,
  },
  {
    name: 'image chunk',
    run: () =>
      fb(
        sdkForwardBackward([
          { ...datum([1]), model_input: { chunks: [{ type: 'image', data: 'x', format: 'png' }] } },
        ]),
      ),
    status: 422,
    field: 'forward_backward_input.data.0.model_input.chunks.0.type',
    message: /only encoded_text chunks/,
  },
  {
    name: 'chunk without tokens',
    run: () =>
      fb(sdkForwardBackward([{ ...datum([1]), model_input: { chunks: [{ type: 'encoded_text' }] } }])),
    status: 400,
    field: 'forward_backward_input.data.0.model_input.chunks.0.tokens',
    message: /required/,
  },
  {
    name: 'target_tokens missing',
    run: () => fb(sdkForwardBackward([{ ...datum([1, 2]), loss_fn_inputs: {} }])),
    status: 400,
    field: 'forward_backward_input.data.0.loss_fn_inputs.target_tokens',
    message: /required by loss_fn cross_entropy/,
  },
  {
    name: 'weights length differs from the input',
    run: () =>
      fb(sdkForwardBackward([datum([1, 2, 3], { weights: { data: [1, 1], dtype: 'float32', shape: [2] } })])),
    status: 400,
    field: 'forward_backward_input.data.0.loss_fn_inputs.weights',
    message: /has 2 positions but the datum's model_input has 3 tokens/,
  },
  {
    name: 'shape disagrees with data',
    run: () =>
      fb(sdkForwardBackward([datum([1, 2], { weights: { data: [1, 1], dtype: 'float32', shape: [3] } })])),
    status: 400,
    field: 'forward_backward_input.data.0.loss_fn_inputs.weights.shape',
    message: /holds 3 values, data has 2/,
  },
  {
    name: 'fractional int64 targets',
    run: () =>
      fb(
        sdkForwardBackward([
          datum([1, 2], { target_tokens: { data: [1, 2.5], dtype: 'int64', shape: [2] } }),
        ]),
      ),
    status: 400,
    field: 'forward_backward_input.data.0.loss_fn_inputs.target_tokens.data',
    message: /integer values/,
  },
  {
    name: 'bad dtype',
    run: () => fb(sdkForwardBackward([datum([1], { weights: { data: [1], dtype: 'float64' } })])),
    status: 400,
    field: 'forward_backward_input.data.0.loss_fn_inputs.weights.dtype',
    message: /int64|float32/,
  },
  {
    name: 'sparse tensor whose row offsets do not fit its shape',
    run: () =>
      fb(
        sdkForwardBackward([
          datum([1], {
            weights: {
              data: [1],
              dtype: 'float32',
              shape: [1, 1],
              sparse_crow_indices: [0, 1, 1],
              sparse_col_indices: [0],
            },
          }),
        ]),
      ),
    status: 400,
    field: 'forward_backward_input.data.0.loss_fn_inputs.weights.sparse_crow_indices',
    message: /1 rows need 2/,
  },
  {
    name: 'importance_sampling without advantages',
    run: () =>
      fb({
        ...sdkForwardBackward(),
        forward_backward_input: { data: [datum([1])], loss_fn: 'importance_sampling' },
      }),
    status: 400,
    field: 'forward_backward_input.data.0.loss_fn_inputs.logprobs',
    message: /required by loss_fn importance_sampling/,
  },
  ...lossConfigCases(),
  {
    name: 'lora rank too high',
    run: () =>
      parsed(schemas.createModelRequest)({
        session_id: 's',
        model_seq_id: 0,
        base_model: 'm',
        lora_config: { rank: 100_000 },
      }),
    status: 400,
    field: 'lora_config.rank',
    message: /<=/,
  },
  {
    name: 'lora_config missing',
    run: () => parsed(schemas.createModelRequest)({ session_id: 's', model_seq_id: 0, base_model: 'm' }),
    status: 400,
    field: 'lora_config',
    message: /expected object/,
  },
  {
    name: 'adam beta1 of 1',
    run: () => parsed(schemas.optimStepRequest)({ model_id: 'm', seq_id: 2, adam_params: { beta1: 1 } }),
    status: 400,
    field: 'adam_params.beta1',
    message: /<1/,
  },
  {
    name: 'save_weights name with a slash',
    run: () => parsed(schemas.saveWeightsRequest)({ model_id: 'm', seq_id: 2, path: 'a/b' }),
    status: 400,
    field: 'path',
    message: /letters, digits/,
  },
  {
    name: 'save name shaped like a sampling session id',
    run: () =>
      parsed(schemas.saveWeightsRequest)({ model_id: 'm', seq_id: 2, path: `samp-${'0'.repeat(32)}` }),
    status: 400,
    field: 'path',
    message: /reserved/,
  },
  {
    name: 'sampler save with both path and sampling_session_seq_id',
    run: () =>
      parsed(schemas.saveWeightsForSamplerRequest)({
        model_id: 'm',
        seq_id: 2,
        path: 'x',
        sampling_session_seq_id: 0,
      }),
    status: 400,
    field: 'path',
    message: /exactly one of path/,
  },
  {
    name: 'sampler save with neither',
    run: () => parsed(schemas.saveWeightsForSamplerRequest)({ model_id: 'm', seq_id: 2, path: null }),
    status: 400,
    field: 'path',
    message: /exactly one of path/,
  },
  {
    name: 'sampling session with neither model_path nor base_model',
    run: () => parsed(schemas.createSamplingSessionRequest)({ session_id: 's', sampling_session_seq_id: 0 }),
    status: 400,
    field: 'model_path',
    message: /give model_path/,
  },
  {
    name: 'sample without max_tokens',
    run: () => sampled(sample({ sampling_params: { temperature: 1 } })),
    status: 400,
    field: 'sampling_params.max_tokens',
    message: /expected int|number/,
  },
  {
    name: 'sample with top_k 0',
    run: () => sampled(sample({ sampling_params: { max_tokens: 4, top_k: 0 } })),
    status: 400,
    field: 'sampling_params.top_k',
    message: /-1 \(no limit\) or a positive integer/,
  },
  {
    name: 'sample over the token budget',
    run: () => sampled(sample({ num_samples: 8, sampling_params: { max_tokens: 8 } })),
    status: 413,
    field: 'sampling_params.max_tokens',
    message: /66 tokens, over the limit of 64/,
  },
  {
    name: 'sample with an empty prompt',
    run: () => sampled(sample({ prompt: { chunks: [{ type: 'encoded_text', tokens: [] }] } })),
    status: 400,
    field: 'prompt',
    message: /has no tokens/,
  },
  {
    name: 'sample without a sampling session',
    run: () => sampled({ ...sample(), sampling_session_id: undefined, base_model: 'x' }),
    status: 400,
    field: 'sampling_session_id',
    message: /expected string/,
  },
  {
    name: 'telemetry that is not an object',
    run: () => parsed(schemas.telemetryRequest)([1, 2]),
    status: 400,
    field: 'body',
    message: /expected record/,
  },
  {
    // Only the protobuf wire can carry one (JSON has no NaN); both are checked on the typed input.
    name: 'a NaN in a float tensor of the typed input',
    run: () =>
      checkForwardInput(
        {
          loss_fn: 'cross_entropy',
          loss_fn_config: {},
          data: [
            {
              model_input: { chunks: [{ type: 'encoded_text', tokens: new Int32Array([1, 2]) }] },
              loss_fn_inputs: {
                target_tokens: { dtype: 'int64', data: new BigInt64Array([2n, 3n]), shape: [2] },
                weights: { dtype: 'float32', data: new Float32Array([1, Number.NaN]), shape: [2] },
              },
            },
          ],
        },
        '',
        limits,
      ),
    status: 400,
    field: 'data.0.loss_fn_inputs.weights.data.1',
    message: /must be a finite float32, got NaN/,
  },
];

describe('bad inputs are refused with a status and a message naming the field', () => {
  it.each(bad)('$name', ({ run, status, field, message }) => {
    let caught: unknown;
    try {
      run();
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ValidationError);
    const error = caught as ValidationError;
    expect(error.status).toBe(status);
    expect(error.context.field).toBe(field);
    expect(error.message).toMatch(message);
    expect(error.message.startsWith(`${field}:`)).toBe(true);
  });
});

describe('the optional sample outputs, bounded by the (token, logprob) pairs they add to the answer', () => {
  // The default token budget (MAX_TOKENS_PER_REQUEST), where k alone no longer bounds the answer.
  const budget = { ...limits, maxTokensPerRequest: 1_048_576 };
  const check = (body: unknown) => checkSample(parseRequest(schemas.sampleRequest, body), budget);
  const longPrompt = { chunks: [{ tokens: Array.from({ length: 8192 }, (_, i) => i % 256) }] };
  const refusal = (body: unknown) => {
    try {
      check(body);
    } catch (error) {
      return error as ValidationError;
    }
    throw new Error('accepted');
  };

  it('refuses 2^23 top-k rows of generated tokens (8 samples x 1024 tokens x k 1024) with a 413 naming the field', () => {
    const sampling_params = { max_tokens: 1024 };
    const error = refusal(sample({ num_samples: 8, topk_sample_logprobs: 1024, sampling_params }));
    expect(error).toBeInstanceOf(ValidationError);
    expect(error.status).toBe(413);
    expect(error.context.field).toBe('topk_sample_logprobs');
    expect(error.message).toBe(
      `topk_sample_logprobs: asks for 8388608 (token, logprob) pairs in the answer, over the limit of ${MAX_SAMPLE_OUTPUT_CELLS}`,
    );
    // The same request with half the k is within the bound.
    expect(check(sample({ num_samples: 8, topk_sample_logprobs: 512, sampling_params }))).toBe(2 + 8 * 1024);
  });

  it.each(['topk_prompt_logprobs', 'prompt_alt_tokens_k'])(
    'refuses %s 1024 over a prompt of 8,192 tokens',
    (field) => {
      const error = refusal(sample({ prompt: longPrompt, [field]: 1024 }));
      expect(error.status).toBe(413);
      expect(error.context.field).toBe(field);
      expect(check(sample({ prompt: longPrompt, [field]: 256 }))).toBe(8192 + 8);
    },
  );
});

describe('good inputs', () => {
  it('accept a sparse CSR tensor (2-D) and make it dense', () => {
    const input = passInputFromJson(
      {
        loss_fn: 'cross_entropy',
        data: [
          {
            model_input: { chunks: [{ tokens: [1, 2] }] },
            loss_fn_inputs: {
              target_tokens: {
                data: [7, 9],
                dtype: 'int64',
                shape: [2, 3],
                sparse_crow_indices: [0, 1, 2],
                sparse_col_indices: [2, 0],
              },
            },
          },
        ],
      },
      'forward_backward_input',
    );
    const targets = input.data[0]?.loss_fn_inputs.target_tokens;
    expect(targets?.shape).toEqual([2, 3]);
    expect([...(targets?.data ?? [])]).toEqual([0n, 0n, 7n, 9n, 0n, 0n]);
    expect(checkForwardInput(input, 'forward_backward_input', limits)).toBe(2);
  });

  it('accept the SDK forward_backward body, drop unknown members and count tokens', () => {
    const body = sdkForwardBackward([datum([1, 2, 3]), datum([4, 5])]);
    const request = parseRequest(schemas.forwardBackwardRequest, body);
    expect(request).not.toHaveProperty('type');
    expect(
      checkForwardInput(
        passInputFromJson(request.forward_backward_input, 'forward_backward_input'),
        'forward_backward_input',
        limits,
      ),
    ).toBe(5);
  });

  it('accept every policy-gradient loss with its inputs and config keys (negative weights too)', () => {
    expect(fb(rlBody('importance_sampling', null))).toBe(3);
    expect(fb(rlBody('ppo', { clip_low_threshold: 0.9, clip_high_threshold: 1.1 }))).toBe(3);
    expect(fb(rlBody('cispo', { clip_low_threshold: 0, clip_high_threshold: 5 }))).toBe(3);
    expect(fb(rlBody('dro', { beta: 0 }))).toBe(3);
    const signed = { weights: { data: [-2, 0, 3.5], dtype: 'float32', shape: [3] } };
    expect(fb(sdkForwardBackward([datum([1, 2, 3], signed)]))).toBe(3);
  });

  it('name config keys without a prefix on the protobuf wire (typed input, field "")', () => {
    const request = parseRequest(schemas.forwardBackwardRequest, rlBody('ppo', { eps: 0.2 }));
    const input = passInputFromJson(request.forward_backward_input, 'x');
    let caught: unknown;
    try {
      checkForwardInput(input, '', limits);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ValidationError);
    expect((caught as ValidationError).context.field).toBe('loss_fn_config.eps');
  });

  it('accept chunks without a type and tensors without a shape', () => {
    const body = sdkForwardBackward([
      {
        model_input: { chunks: [{ tokens: [1, 2] }, { tokens: [3] }] },
        loss_fn_inputs: { target_tokens: { data: [2, 3, 4], dtype: 'int64' } },
      },
    ]);
    expect(fb(body)).toBe(3);
  });

  it('fill in Tinker defaults so stored payloads are complete', () => {
    const optim = parseRequest(schemas.optimStepRequest, {
      model_id: 'm',
      seq_id: 3,
      adam_params: { learning_rate: 0.01 },
      type: 'optim_step',
    });
    expect(optim.adam_params).toEqual({
      learning_rate: 0.01,
      beta1: 0.9,
      beta2: 0.95,
      eps: 1e-12,
      weight_decay: 0,
      grad_clip_norm: 0,
    });
    const model = parseRequest(schemas.createModelRequest, {
      session_id: 's',
      model_seq_id: 0,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 8 },
      type: 'create_model',
    });
    expect(model.lora_config).toEqual({ rank: 8, train_unembed: true, train_mlp: true, train_attn: true });
  });

  it('accept the SDK sample body and count its token budget', () => {
    expect(sampled(sample({ num_samples: 2 }))).toBe(2 + 2 * 8);
    expect(sampled(sample({ sampling_params: { max_tokens: 4, stop: [[10, 11], [12]] } }))).toBe(6);
    expect(sampled(sample({ sampling_params: { max_tokens: 4, stop: ['\n'] } }))).toBe(6);
  });

  it('treat an empty body as an empty object', () => {
    expect(parseJsonBody(undefined, limits)).toEqual({});
    expect(parseJsonBody('', limits)).toEqual({});
  });
});
