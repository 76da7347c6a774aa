/**
 * Checks of request bodies at execution time. Every failure is a `StepUserError` whose message starts with
 * the offending field's path, so the client sees what to fix (E6). Pass inputs arrive typed and already
 * shape-checked by their wire's converter (shared/backend/pass-input.ts); what is checked here is what
 * only this model knows: its vocabulary, its context length, the loss functions it implements and the
 * inputs they need.
 */

import { StepUserError } from '../../base/errors.js';
import type {
  AdamParams,
  CreateModelInput,
  ForwardBackwardInput,
  ModelInput,
  SampleRequest,
  Tensor,
} from '../backend.js';
import { concatTokens } from '../pass-input.js';
import { shapeSize } from '../tensor.js';
import { MAX_CONTEXT, MAX_RANK, VOCAB } from './model.js';

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

const shapeText = (shape: readonly number[]) => `[${shape.join(', ')}]`;

/** Concatenated token ids of the chunks, each within the vocabulary, 1 to MAX_CONTEXT of them. */
export function inputTokens(input: ModelInput, field: string): Int32Array {
  let count = 0;
  input.chunks.forEach((chunk, c) => {
    const { tokens } = chunk;
    for (let t = 0; t < tokens.length; t++) {
      const token = tokens[t] as number;
      if (token < 0 || token >= VOCAB) {
        fail(
          `${field}.chunks[${c}].tokens[${t}]`,
          `token id ${token} is outside the vocabulary [0, ${VOCAB})`,
        );
      }
    }
    count += tokens.length;
  });
  if (count === 0) fail(field, 'holds no tokens');
  if (count > MAX_CONTEXT) fail(field, `holds ${count} tokens, more than ${MAX_CONTEXT}`);
  return concatTokens(input);
}

/** A datum as the loss functions read it. */
export interface PassDatum {
  /** `data[d]`, the prefix of every message about this datum. */
  readonly field: string;
  readonly tokens: Int32Array;
  /**
   * `target_tokens` row-major: shape [N] (one target per position) or [N, K] (K targets per position,
   * as top-k distillation sends), with N the input tokens. Element i is position floor(i / K).
   */
  readonly targets: Int32Array;
  readonly targetShape: readonly number[];
  /** K: targets per position (1 for a 1-D `target_tokens`). */
  readonly perPosition: number;
  readonly lossFnInputs: Readonly<Record<string, Tensor>>;
}

function checkSize(tensor: Tensor, field: string): void {
  // The converters guarantee it; a backend reading past its data would silently produce NaN.
  if (tensor.data.length !== shapeSize(tensor.shape)) {
    fail(`${field}.shape`, `${shapeText(tensor.shape)} does not match its ${tensor.data.length} values`);
  }
}

function targetTokens(
  inputs: Readonly<Record<string, Tensor>>,
  datumField: string,
  positions: number,
  lossFn: string,
): Pick<PassDatum, 'targets' | 'targetShape' | 'perPosition'> {
  const field = `${datumField}.loss_fn_inputs.target_tokens`;
  const tensor = inputs.target_tokens;
  if (tensor === undefined) fail(field, `is required by ${lossFn}`);
  if (tensor.dtype !== 'int64') fail(`${field}.dtype`, 'must be int64 (token ids)');
  checkSize(tensor, field);
  const { shape } = tensor;
  if (shape.length !== 1 && shape.length !== 2) {
    fail(`${field}.shape`, `must be [N] or [N, K], got ${shapeText(shape)}`);
  }
  if (shape[0] !== positions) fail(field, `has ${shape[0]} positions for ${positions} input tokens`);
  const targets = new Int32Array(tensor.data.length);
  const vocab = BigInt(VOCAB);
  for (let i = 0; i < targets.length; i++) {
    const id = tensor.data[i] as bigint;
    if (id < 0n || id >= vocab) {
      fail(`${field}.data[${i}]`, `token id ${id} is outside the vocabulary [0, ${VOCAB})`);
    }
    targets[i] = Number(id);
  }
  return { targets, targetShape: shape, perPosition: shape.length === 2 ? (shape[1] as number) : 1 };
}

/** The typed pass input's datums checked against the model (the loss function is chosen apart). */
export function parsePassInput(input: ForwardBackwardInput): PassDatum[] {
  if (input.data.length === 0) fail('data', 'must hold at least one datum');
  return input.data.map((datum, d) => {
    const field = `data[${d}]`;
    const tokens = inputTokens(datum.model_input, `${field}.model_input`);
    const lossFnInputs = datum.loss_fn_inputs;
    return {
      field,
      tokens,
      ...targetTokens(lossFnInputs, field, tokens.length, input.loss_fn),
      lossFnInputs,
    };
  });
}

/**
 * An optional float loss input (weights, advantages, ...) of `target_tokens`' shape, as float32 values;
 * null when the datum gives none. Int64 values are converted (the JSON wire lets a client send them).
 */
export function floatLossInput(datum: PassDatum, name: string): Float32Array | null {
  const field = `${datum.field}.loss_fn_inputs.${name}`;
  const tensor = datum.lossFnInputs[name];
  if (tensor === undefined) return null;
  checkSize(tensor, field);
  const same =
    tensor.shape.length === datum.targetShape.length &&
    tensor.shape.every((dimension, i) => dimension === datum.targetShape[i]);
  if (!same) {
    fail(
      field,
      `has shape ${shapeText(tensor.shape)}; it must match target_tokens' ${shapeText(datum.targetShape)}`,
    );
  }
  const values =
    tensor.dtype === 'float32' ? tensor.data : Float32Array.from(tensor.data, (value) => Number(value));
  // The edge checks JSON numbers are finite in float64; one beyond float32's range becomes infinite here.
  const bad = values.findIndex((value) => !Number.isFinite(value));
  if (bad >= 0) fail(`${field}.data[${bad}]`, `must be a finite float32, got ${values[bad]}`);
  return values;
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
  readonly prompt: Int32Array;
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
  readonly topkSampleLogprobs: number;
  readonly promptAltTokensK: number;
  /** Dense [prompt length - 1, K] ids (-1: none asked), or null when not asked. */
  readonly targetPromptIds: { readonly columns: number; readonly ids: Int32Array } | null;
}

function parseTargetPromptIds(
  target: SampleRequest['target_prompt_logprobs'],
  promptLength: number,
): ReferenceSampleRequest['targetPromptIds'] {
  const field = 'target_prompt_logprobs';
  if (target === undefined || target === null) return null;
  if (!isRecord(target) || !Array.isArray(target.shape) || !Array.isArray(target.data))
    fail(field, 'must be {shape, data}');
  const [rows, columns] = target.shape;
  if (target.shape.length !== 2 || rows !== promptLength - 1 || !Number.isInteger(columns) || columns < 0)
    fail(`${field}.shape`, `must be [${promptLength - 1}, K] for a prompt of ${promptLength} tokens`);
  if (target.data.length !== rows * columns)
    fail(`${field}.data`, `holds ${target.data.length} ids for shape [${rows}, ${columns}]`);
  const ids = new Int32Array(target.data.length);
  target.data.forEach((id, i) => {
    if (id !== -1) checkToken(id, `${field}.data[${i}]`);
    ids[i] = id;
  });
  return { columns, ids };
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
    topkSampleLogprobs: checkNumber(
      optionalNumber(request.topk_sample_logprobs, 0),
      'topk_sample_logprobs',
      (x) => Number.isInteger(x) && x >= 0 && x <= VOCAB,
      `an integer in [0, ${VOCAB}]`,
    ),
    promptAltTokensK: checkNumber(
      optionalNumber(request.prompt_alt_tokens_k, 0),
      'prompt_alt_tokens_k',
      (x) => Number.isInteger(x) && x >= 0,
      'an integer >= 0',
    ),
    targetPromptIds: parseTargetPromptIds(request.target_prompt_logprobs, prompt.length),
  };
}
