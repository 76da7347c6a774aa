/**
 * Checks of request bodies at execution time. Every failure is a `StepUserError` whose message starts with
 * the offending field's path, so the client sees what to fix (E6).
 */

import { StepUserError } from '../../errors.js';
import type {
  AdamParams,
  CreateModelInput,
  ForwardBackwardInput,
  ModelInput,
  SampleRequest,
  TensorData,
} from '../backend.js';
import { MAX_CONTEXT, MAX_RANK, VOCAB } from './model.js';

export const SUPPORTED_LOSS_FNS = ['cross_entropy'] as const;
export const MAX_SAMPLES = 256;

function fail(field: string, problem: string): never {
  throw new StepUserError(`${field}: ${problem}`, { context: { field } });
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function checkToken(value: unknown, field: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value))
    fail(field, `token ids must be integers, got ${value}`);
  if (value < 0 || value >= VOCAB) fail(field, `token id ${value} is outside the vocabulary [0, ${VOCAB})`);
  return value;
}

function checkNumber(value: unknown, field: string, ok: (x: number) => boolean, rule: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || !ok(value))
    fail(field, `must be ${rule}, got ${value}`);
  return value;
}

function optionalNumber(value: unknown, fallback: number): unknown {
  return value === undefined || value === null ? fallback : value;
}

/** Concatenated token ids of `encoded_text` chunks. */
export function inputTokens(input: ModelInput, field: string): number[] {
  if (!isRecord(input) || !Array.isArray(input.chunks)) fail(`${field}.chunks`, 'must be an array of chunks');
  const tokens: number[] = [];
  input.chunks.forEach((chunk: unknown, c) => {
    const chunkField = `${field}.chunks[${c}]`;
    if (!isRecord(chunk)) fail(chunkField, 'must be an object');
    if (chunk.type !== undefined && chunk.type !== 'encoded_text') {
      fail(`${chunkField}.type`, `chunk type ${String(chunk.type)} is not supported (only encoded_text)`);
    }
    if (!Array.isArray(chunk.tokens)) fail(`${chunkField}.tokens`, 'must be an array of token ids');
    chunk.tokens.forEach((token: unknown, t) => {
      tokens.push(checkToken(token, `${chunkField}.tokens[${t}]`));
    });
  });
  if (tokens.length === 0) fail(field, 'holds no tokens');
  if (tokens.length > MAX_CONTEXT) fail(field, `holds ${tokens.length} tokens, more than ${MAX_CONTEXT}`);
  return tokens;
}

function tensorValues(tensor: unknown, field: string, length: number): readonly unknown[] {
  if (!isRecord(tensor) || !Array.isArray(tensor.data)) fail(field, 'must be a tensor {data, dtype, shape}');
  const t = tensor as unknown as TensorData;
  if (t.sparse_crow_indices != null || t.sparse_col_indices != null)
    fail(field, 'sparse tensors are not supported');
  if (t.shape != null && (t.shape.length !== 1 || t.shape[0] !== t.data.length)) {
    fail(`${field}.shape`, `must be [${t.data.length}], got [${t.shape.join(', ')}]`);
  }
  if (t.data.length !== length) fail(field, `has ${t.data.length} values for ${length} input tokens`);
  return t.data;
}

export interface PassDatum {
  readonly tokens: readonly number[];
  readonly targets: readonly number[];
  /** Per-token weights; all ones when the datum gives none. */
  readonly weights: Float64Array;
}

export function parsePassInput(input: ForwardBackwardInput): PassDatum[] {
  if (!isRecord(input)) fail('input', 'must be an object');
  if (!(SUPPORTED_LOSS_FNS as readonly unknown[]).includes(input.loss_fn)) {
    fail(
      'loss_fn',
      `unknown loss function ${JSON.stringify(input.loss_fn)}; supported: ${SUPPORTED_LOSS_FNS.join(', ')}`,
    );
  }
  if (!Array.isArray(input.data) || input.data.length === 0) fail('data', 'must hold at least one datum');
  return input.data.map((datum: unknown, d) => {
    const field = `data[${d}]`;
    if (!isRecord(datum)) fail(field, 'must be an object');
    const tokens = inputTokens(datum.model_input as ModelInput, `${field}.model_input`);
    const lossInputs = datum.loss_fn_inputs;
    if (!isRecord(lossInputs)) fail(`${field}.loss_fn_inputs`, 'must be an object');
    const targetField = `${field}.loss_fn_inputs.target_tokens`;
    if (lossInputs.target_tokens === undefined) fail(targetField, 'is required by cross_entropy');
    const targets = tensorValues(lossInputs.target_tokens, targetField, tokens.length).map((value, i) =>
      checkToken(value, `${targetField}.data[${i}]`),
    );
    const weights = new Float64Array(tokens.length).fill(1);
    if (lossInputs.weights !== undefined && lossInputs.weights !== null) {
      const weightField = `${field}.loss_fn_inputs.weights`;
      tensorValues(lossInputs.weights, weightField, tokens.length).forEach((value, i) => {
        weights[i] = checkNumber(value, `${weightField}.data[${i}]`, () => true, 'a finite number');
      });
    }
    return { tokens, targets, weights };
  });
}

export interface ReferenceAdamParams {
  readonly learningRate: number;
  readonly beta1: number;
  readonly beta2: number;
  readonly eps: number;
  readonly weightDecay: number;
  /** 0: no clipping. */
  readonly gradClipNorm: number;
}

export function parseAdamParams(params: AdamParams): ReferenceAdamParams {
  if (!isRecord(params)) fail('adam_params', 'must be an object');
  const unit = (x: number) => x >= 0 && x < 1;
  return {
    learningRate: checkNumber(
      optionalNumber(params.learning_rate, 1e-4),
      'adam_params.learning_rate',
      (x) => x >= 0,
      '>= 0',
    ),
    beta1: checkNumber(optionalNumber(params.beta1, 0.9), 'adam_params.beta1', unit, 'in [0, 1)'),
    beta2: checkNumber(optionalNumber(params.beta2, 0.95), 'adam_params.beta2', unit, 'in [0, 1)'),
    eps: checkNumber(optionalNumber(params.eps, 1e-12), 'adam_params.eps', (x) => x > 0, '> 0'),
    weightDecay: checkNumber(
      optionalNumber(params.weight_decay, 0),
      'adam_params.weight_decay',
      (x) => x >= 0,
      '>= 0',
    ),
    gradClipNorm: checkNumber(
      optionalNumber(params.grad_clip_norm, 0),
      'adam_params.grad_clip_norm',
      (x) => x >= 0,
      '>= 0',
    ),
  };
}

export interface ReferenceModelConfig {
  readonly baseModel: string;
  readonly rank: number;
  readonly seed: number;
}

export function parseCreateModel(input: CreateModelInput): ReferenceModelConfig {
  if (!isRecord(input)) fail('input', 'must be an object');
  if (typeof input.base_model !== 'string' || input.base_model.length === 0)
    fail('base_model', 'must be a name');
  if (new TextEncoder().encode(input.base_model).length > 1024)
    fail('base_model', 'is longer than 1024 bytes');
  const lora = input.lora_config;
  if (!isRecord(lora)) fail('lora_config', 'must be an object');
  const rank = checkNumber(
    lora.rank,
    'lora_config.rank',
    (x) => Number.isInteger(x) && x >= 1 && x <= MAX_RANK,
    `an integer in [1, ${MAX_RANK}]`,
  );
  const seed = checkNumber(optionalNumber(lora.seed, 0), 'lora_config.seed', Number.isInteger, 'an integer');
  return { baseModel: input.base_model, rank, seed };
}

export interface ReferenceSampleRequest {
  readonly prompt: readonly number[];
  readonly numSamples: number;
  readonly maxTokens: number;
  readonly temperature: number;
  /** 0: no top-k filter. */
  readonly topK: number;
  readonly topP: number;
  readonly seed: number;
  /** Each stop is a token sequence; a single token id is a sequence of one. */
  readonly stops: readonly (readonly number[])[];
  readonly promptLogprobs: boolean;
  readonly topkPromptLogprobs: number;
}

/** Stop strings are encoded as UTF-8 bytes: the reference vocabulary is byte-level. */
function parseStops(stop: unknown): number[][] {
  const field = 'sampling_params.stop';
  if (stop === undefined || stop === null) return [];
  const items: readonly unknown[] = Array.isArray(stop) ? stop : [stop];
  return items.map((item, i) => {
    if (typeof item === 'string') {
      if (item.length === 0) fail(`${field}[${i}]`, 'stop strings must not be empty');
      return [...new TextEncoder().encode(item)];
    }
    if (typeof item === 'number') return [checkToken(item, `${field}[${i}]`)];
    if (Array.isArray(item) && item.length > 0)
      return item.map((t, j) => checkToken(t, `${field}[${i}][${j}]`));
    return fail(`${field}[${i}]`, 'must be a token id, a non-empty token sequence or a string');
  });
}

export function parseSampleRequest(request: SampleRequest): ReferenceSampleRequest {
  if (!isRecord(request)) fail('request', 'must be an object');
  const prompt = inputTokens(request.prompt, 'prompt');
  const params = request.sampling_params;
  if (!isRecord(params)) fail('sampling_params', 'must be an object');
  const room = MAX_CONTEXT - prompt.length;
  const maxTokens = checkNumber(
    optionalNumber(params.max_tokens, room),
    'sampling_params.max_tokens',
    (x) => Number.isInteger(x) && x >= 1 && x <= room,
    `an integer in [1, ${room}] (the prompt has ${prompt.length} of ${MAX_CONTEXT} context tokens)`,
  );
  const topK = checkNumber(
    optionalNumber(params.top_k, -1),
    'sampling_params.top_k',
    (x) => Number.isInteger(x) && x >= -1,
    '-1 (no limit) or a positive integer',
  );
  return {
    prompt,
    numSamples: checkNumber(
      optionalNumber(request.num_samples, 1),
      'num_samples',
      (x) => Number.isInteger(x) && x >= 1 && x <= MAX_SAMPLES,
      `an integer in [1, ${MAX_SAMPLES}]`,
    ),
    maxTokens,
    temperature: checkNumber(
      optionalNumber(params.temperature, 1),
      'sampling_params.temperature',
      (x) => x >= 0,
      '>= 0',
    ),
    topK: Math.max(topK, 0),
    topP: checkNumber(
      optionalNumber(params.top_p, 1),
      'sampling_params.top_p',
      (x) => x > 0 && x <= 1,
      'in (0, 1]',
    ),
    seed: checkNumber(optionalNumber(params.seed, 0), 'sampling_params.seed', Number.isInteger, 'an integer'),
    stops: parseStops(params.stop),
    promptLogprobs: request.prompt_logprobs === true,
    topkPromptLogprobs: checkNumber(
      optionalNumber(request.topk_prompt_logprobs, 0),
      'topk_prompt_logprobs',
      (x) => Number.isInteger(x) && x >= 0 && x <= VOCAB,
      `an integer in [0, ${VOCAB}]`,
    ),
  };
}
