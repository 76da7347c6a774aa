import type { z } from 'zod';
import { type ForwardBackwardInput, inputTokenCount } from '../../backend/pass-input.js';
import { denseFromCsr, type Tensor } from '../../backend/tensor.js';
import type { Tunables } from '../../base/config.js';
import { invalidField as invalid, ValidationError } from '../../base/errors.js';
import { appendLogKeys } from '../../base/logger.js';
import {
  MAX_LOSS_INPUT_RANK,
  partLimits,
  rankTooHigh,
  tooManyChunks,
  tooManyDatums,
} from '../../wire/request-parts.js';
import {
  type BaseModelLimits,
  FLOAT_LOSS_INPUTS,
  FLOAT32_ONLY_INPUTS,
  LOSS_FN_INPUTS,
  LOSS_FNS,
  type LossFn,
  resolveLossConfig,
} from './capabilities.js';
import { boundMessage, describeField } from './describe.js';
import { idString, type ModelInputBody, type SampleRequestBody, type TensorDataBody } from './schemas.js';

/**
 * Validation beyond shapes: limits (413), features this deployment does not offer (422) and rules
 * across fields (400). Every rejection names the field and the problem, and all of it runs before
 * anything is written.
 */

type Limits = Pick<Tunables, 'maxBodyBytes' | 'maxDatums' | 'maxTokensPerRequest'>;

/** A body of `bytes` (decompressed, for a compressed one) within `MAX_BODY_BYTES`, else a 413. */
export function checkBodyBytes(bytes: number, limits: Pick<Limits, 'maxBodyBytes'>): void {
  if (bytes > limits.maxBodyBytes) {
    throw invalid('body', `${bytes} bytes exceeds the limit of ${limits.maxBodyBytes} bytes`, 413);
  }
}

/**
 * Decodes and parses a JSON body; an empty body counts as `{}` (GET-like calls send none). A byte
 * order mark is kept, so JSON.parse refuses it, as it did when bodies arrived as text.
 */
export function parseJsonBody(
  raw: string | Uint8Array | undefined,
  limits: Pick<Limits, 'maxBodyBytes'>,
): unknown {
  if (raw === undefined || raw.length === 0) return {};
  checkBodyBytes(typeof raw === 'string' ? Buffer.byteLength(raw) : raw.length, limits);
  try {
    return JSON.parse(
      typeof raw === 'string' ? raw : new TextDecoder('utf-8', { ignoreBOM: true }).decode(raw),
    ) as unknown;
  } catch (error) {
    throw invalid('body', `not valid JSON (${error instanceof Error ? error.message : 'parse error'})`);
  }
}

/** Parses with a zod schema; the first issues become one 400 naming the first field. */
export function parseRequest<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  const parsed = schema.safeParse(body);
  if (parsed.success) {
    appendIdLogKeys(parsed.data);
    return parsed.data;
  }
  const issues = parsed.error.issues.slice(0, 3);
  const first = issues[0];
  const field = first ? describeField(first.path) : 'body';
  const message = issues.map((issue) => `${describeField(issue.path)}: ${issue.message}`).join('; ');
  throw new ValidationError(boundMessage(message), { context: { field } });
}

/** Ids a request names, for the rest of its log lines: only values shaped as ids, never free text. */
const LOGGED_IDS = ['model_id', 'request_id'] as const;

function appendIdLogKeys(data: unknown): void {
  if (typeof data !== 'object' || data === null) return;
  for (const name of LOGGED_IDS) {
    const value = (data as Record<string, unknown>)[name];
    if (idString.safeParse(value).success) appendLogKeys({ [name]: value as string });
  }
}

function memberOf(value: unknown, name: string): unknown {
  return typeof value === 'object' && value !== null && Object.hasOwn(value, name)
    ? (value as Record<string, unknown>)[name]
    : undefined;
}

/**
 * Counts a JSON pass's datums and chunks on the parsed body, before the schema builds anything from
 * them, as `checkRequestParts` (wire/request-parts.ts) counts a protobuf body's: more than
 * MAX_DATUMS datums, or than its chunk limit, is a 413 whatever else the body holds. `member` is
 * `forward_backward_input` or `forward_input`; a body without the arrays is left to the schema.
 */
export function checkJsonPassParts(body: unknown, member: string, limits: Pick<Limits, 'maxDatums'>): void {
  const data = memberOf(memberOf(body, member), 'data');
  if (!Array.isArray(data)) return;
  const field = `${member}.data`;
  if (data.length > limits.maxDatums) throw tooManyDatums(field, data.length, limits.maxDatums);
  const { maxChunks } = partLimits(limits.maxDatums);
  let chunks = 0;
  for (const datum of data) {
    const list = memberOf(memberOf(datum, 'model_input'), 'chunks');
    if (Array.isArray(list)) chunks += list.length;
  }
  if (chunks > maxChunks) throw tooManyChunks(field, chunks, maxChunks);
}

/** `field.name`, or `name` at the top level (protobuf bodies have no wrapper member). */
function sub(field: string, name: string): string {
  return field === '' ? name : `${field}.${name}`;
}

/** Counts the tokens of a JSON model input; every chunk must be an encoded_text chunk with tokens. */
export function checkModelInput(input: ModelInputBody, field: string): number {
  let tokens = 0;
  input.chunks.forEach((chunk, index) => {
    const chunkField = `${field}.chunks.${index}`;
    if (chunk.type !== undefined && chunk.type !== 'encoded_text') {
      throw invalid(`${chunkField}.type`, `only encoded_text chunks are supported, got "${chunk.type}"`, 422);
    }
    if (chunk.tokens === undefined)
      throw invalid(`${chunkField}.tokens`, 'required for an encoded_text chunk');
    tokens += chunk.tokens.length;
  });
  if (tokens === 0) throw invalid(field, 'has no tokens');
  return tokens;
}

function hasNegative(tensor: Tensor): boolean {
  for (const value of tensor.data) if (value < 0) return true;
  return false;
}

const sameShape = (a: readonly number[], b: readonly number[]) =>
  a.length === b.length && a.every((dimension, i) => dimension === b[i]);

/**
 * The per-target float inputs (weights, logprobs, advantages) a datum gives: each of target_tokens'
 * exact shape ([N] or [N, K]) (finite: every float tensor is checked for that first); logprobs and
 * advantages in float32, as the SDK sends them. Refused here rather than when the step runs, so
 * nothing is stored for them.
 */
function checkFloatInputs(
  inputs: Readonly<Record<string, Tensor>>,
  targetShape: readonly number[],
  field: string,
): void {
  for (const name of FLOAT_LOSS_INPUTS) {
    const tensor = inputs[name];
    if (tensor === undefined) continue;
    const tensorField = `${field}.${name}`;
    if (tensor.dtype !== 'float32' && FLOAT32_ONLY_INPUTS.includes(name)) {
      throw invalid(`${tensorField}.dtype`, `must be float32, got ${tensor.dtype}`);
    }
    if (!sameShape(tensor.shape, targetShape)) {
      throw invalid(
        tensorField,
        `has shape [${tensor.shape.join(', ')}]; it must match target_tokens' [${targetShape.join(', ')}]`,
      );
    }
  }
}

/** The first NaN or infinite value of a float tensor, if any (JSON cannot carry one; protobuf can). */
function firstNonFinite(tensor: Tensor): number | undefined {
  if (tensor.dtype !== 'float32') return undefined;
  const index = tensor.data.findIndex((value) => !Number.isFinite(value));
  return index === -1 ? undefined : index;
}

/**
 * Checks a forward / forward_backward input (typed: both wires decode to it first) against the
 * limits and the loss function's needs; returns its token count (recorded on the row for planning).
 * `field` prefixes every field named (`forward_backward_input` for JSON, '' for protobuf).
 */
export function checkForwardInput(input: ForwardBackwardInput, field: string, limits: Limits): number {
  if (!Object.hasOwn(LOSS_FN_INPUTS, input.loss_fn)) {
    throw invalid(
      sub(field, 'loss_fn'),
      `unknown loss function ${JSON.stringify(input.loss_fn.slice(0, 64))}; one of ${LOSS_FNS.join(', ')}`,
    );
  }
  if (input.data.length === 0) throw invalid(sub(field, 'data'), 'must hold at least one datum');
  if (input.data.length > limits.maxDatums) {
    throw tooManyDatums(sub(field, 'data'), input.data.length, limits.maxDatums);
  }
  const lossFn = input.loss_fn as LossFn;
  const config = resolveLossConfig(lossFn, input.loss_fn_config);
  if (!config.ok) {
    // A key can be as long as the body: name a bounded prefix of it.
    throw invalid(sub(field, `loss_fn_config.${config.key.slice(0, 64)}`), config.problem);
  }
  const required = LOSS_FN_INPUTS[lossFn];
  let total = 0;
  input.data.forEach((datum, index) => {
    const datumField = sub(field, `data.${index}`);
    if (datum.model_input.chunks.length === 0) {
      throw invalid(`${datumField}.model_input.chunks`, 'must hold at least one chunk');
    }
    const positions = inputTokenCount(datum.model_input);
    if (positions === 0) throw invalid(`${datumField}.model_input`, 'has no tokens');
    total += positions;
    for (const name of required) {
      if (datum.loss_fn_inputs[name] === undefined) {
        throw invalid(`${datumField}.loss_fn_inputs.${name}`, `required by loss_fn ${input.loss_fn}`);
      }
    }
    const targets = datum.loss_fn_inputs.target_tokens;
    if (targets && targets.dtype !== 'int64') {
      throw invalid(`${datumField}.loss_fn_inputs.target_tokens.dtype`, 'must be int64 (token ids)');
    }
    if (targets && hasNegative(targets)) {
      throw invalid(`${datumField}.loss_fn_inputs.target_tokens.data`, 'token ids must not be negative');
    }
    for (const [name, tensor] of Object.entries(datum.loss_fn_inputs)) {
      // What the losses can use (the worker would refuse it only when the step runs).
      if (tensor.shape.length > MAX_LOSS_INPUT_RANK) {
        throw rankTooHigh(`${datumField}.loss_fn_inputs.${name}.shape`, tensor.shape.length);
      }
      const nonFinite = firstNonFinite(tensor);
      if (nonFinite !== undefined) {
        throw invalid(
          `${datumField}.loss_fn_inputs.${name}.data.${nonFinite}`,
          `must be a finite float32, got ${tensor.data[nonFinite]}`,
        );
      }
      const leading = tensor.shape[0] ?? tensor.data.length;
      if (tensor.shape.length === 0 || leading !== positions) {
        throw invalid(
          `${datumField}.loss_fn_inputs.${name}`,
          `has ${leading} positions but the datum's model_input has ${positions} tokens`,
        );
      }
    }
    if (targets) checkFloatInputs(datum.loss_fn_inputs, targets.shape, `${datumField}.loss_fn_inputs`);
  });
  if (total > limits.maxTokensPerRequest) {
    throw invalid(
      sub(field, 'data'),
      `${total} tokens exceeds the limit of ${limits.maxTokensPerRequest}`,
      413,
    );
  }
  return total;
}

/** Checks a sample's prompt and token budget; returns prompt tokens plus the tokens it may generate. */
export function checkSample(request: SampleRequestBody, limits: Limits): number {
  const promptTokens = checkModelInput(request.prompt, 'prompt');
  const budget = promptTokens + request.num_samples * request.sampling_params.max_tokens;
  if (budget > limits.maxTokensPerRequest) {
    throw invalid(
      'sampling_params.max_tokens',
      `prompt (${promptTokens}) plus num_samples x max_tokens comes to ${budget} tokens, over the limit of ${limits.maxTokensPerRequest}`,
      413,
    );
  }
  const outputs: [field: string, cells: number][] = [
    [
      'topk_sample_logprobs',
      request.num_samples * request.sampling_params.max_tokens * request.topk_sample_logprobs,
    ],
    ['topk_prompt_logprobs', promptTokens * request.topk_prompt_logprobs],
    ['prompt_alt_tokens_k', Math.max(0, promptTokens - 1) * request.prompt_alt_tokens_k],
  ];
  for (const [field, cells] of outputs) {
    if (cells > MAX_SAMPLE_OUTPUT_CELLS) {
      throw invalid(
        field,
        `asks for ${cells} (token, logprob) pairs in the answer, over the limit of ${MAX_SAMPLE_OUTPUT_CELLS}`,
        413,
      );
    }
  }
  return budget;
}

/**
 * (token, logprob) pairs each of a sample's optional outputs may add to its answer: a few bytes of
 * request must not ask for an answer of gigabytes (a top-k row per generated or prompt token, k
 * alternatives per prompt position). 2^22 is four times the largest plain answer's logprobs.
 */
export const MAX_SAMPLE_OUTPUT_CELLS = 1 << 22;

/** Cells a `target_prompt_logprobs` may have (its answer holds one float per cell). */
export const MAX_TARGET_PROMPT_CELLS = 1 << 20;

/**
 * `target_prompt_logprobs` (SDK 0.26+) as the backend takes it: int64 ids of shape
 * [prompt tokens - 1, K], each -1 (nothing asked) or a token id; sparse CSR made dense with -1 in the
 * cells it does not list.
 */
export function checkTargetPromptIds(
  tensor: TensorDataBody,
  promptTokens: number,
): { shape: [number, number]; data: number[] } {
  const field = 'target_prompt_logprobs';
  if (tensor.dtype !== 'int64') throw invalid(`${field}.dtype`, 'must be int64 (token ids)');
  const shape = tensor.shape ?? [tensor.data.length];
  const rows = promptTokens - 1;
  if (shape.length !== 2 || shape[0] !== rows) {
    throw invalid(
      `${field}.shape`,
      `must be [${rows}, K] for a prompt of ${promptTokens} tokens, got [${shape.join(', ')}]`,
    );
  }
  const cells = rows * (shape[1] as number);
  if (cells > MAX_TARGET_PROMPT_CELLS) {
    throw invalid(`${field}.shape`, `${cells} cells exceeds the limit of ${MAX_TARGET_PROMPT_CELLS}`, 413);
  }
  const bad = tensor.data.findIndex((id) => !Number.isInteger(id) || id < -1 || id >= 2 ** 31);
  if (bad >= 0) throw invalid(`${field}.data.${bad}`, `must be a token id or -1, got ${tensor.data[bad]}`);
  if (tensor.sparse_crow_indices == null && tensor.sparse_col_indices == null) {
    if (tensor.data.length !== cells) {
      throw invalid(
        `${field}.shape`,
        `[${shape.join(', ')}] holds ${cells} values, data has ${tensor.data.length}`,
      );
    }
    return { shape: [rows, shape[1] as number], data: [...tensor.data] };
  }
  if (tensor.sparse_crow_indices == null || tensor.sparse_col_indices == null) {
    throw invalid(field, 'a sparse tensor needs both sparse_crow_indices and sparse_col_indices');
  }
  // Shifted by one so the cells CSR leaves out (zero) come back as -1.
  const shifted = denseFromCsr(
    BigInt64Array.from(tensor.data, (id) => BigInt(id + 1)),
    tensor.sparse_crow_indices,
    tensor.sparse_col_indices,
    shape,
    field,
  );
  return { shape: [rows, shape[1] as number], data: Array.from(shifted, (value) => Number(value) - 1) };
}

/** A LoRA that trains nothing would fail every step of its run: refused at create_model (B2). */
export function checkLoraConfig(lora: {
  readonly train_attn: boolean;
  readonly train_mlp: boolean;
  readonly train_unembed: boolean;
}): void {
  if (!lora.train_attn && !lora.train_mlp && !lora.train_unembed) {
    throw invalid(
      'lora_config',
      'trains nothing: at least one of train_attn, train_mlp and train_unembed must be true',
    );
  }
}

/** The index of the first token id of `ids` at or past `vocab`; -1 when all are inside. */
function firstOutsideVocab(ids: readonly number[], vocab: number): number {
  for (let i = 0; i < ids.length; i++) if ((ids[i] as number) >= vocab) return i;
  return -1;
}

/**
 * What the sampled base model's limits decide, refused at submit with a 400 naming the field (B2):
 * the prompt and `max_tokens` within its context, `num_samples` within its bound, and, when its
 * vocabulary is known, the token ids it is given and the top-k rows it is asked for. `limits`
 * undefined: a base model no longer served, left to the backend.
 */
export function checkSampleLimits(
  request: SampleRequestBody,
  promptTokens: number,
  targetIds: { readonly data: readonly number[] } | undefined,
  limits: BaseModelLimits | undefined,
): void {
  if (limits === undefined) return;
  const context = limits.max_context_length;
  if (promptTokens >= context) {
    throw invalid('prompt', `holds ${promptTokens} tokens, leaving no room in ${context} context tokens`);
  }
  const maxTokens = request.sampling_params.max_tokens;
  if (promptTokens + maxTokens > context) {
    throw invalid(
      'sampling_params.max_tokens',
      `${maxTokens} is past the context: the prompt has ${promptTokens} of ${context} tokens, leaving ${context - promptTokens}`,
    );
  }
  if (request.num_samples > limits.max_num_samples) {
    throw invalid(
      'num_samples',
      `${request.num_samples} is over this base model's ${limits.max_num_samples}`,
    );
  }
  const vocab = limits.vocab_size;
  if (vocab === undefined) return;
  for (const field of ['topk_prompt_logprobs', 'topk_sample_logprobs'] as const) {
    if (request[field] > vocab) {
      throw invalid(field, `${request[field]} is over the vocabulary of ${vocab} tokens`);
    }
  }
  request.prompt.chunks.forEach((chunk, index) => {
    const at = firstOutsideVocab(chunk.tokens ?? [], vocab);
    if (at >= 0) {
      throw invalid(
        `prompt.chunks.${index}.tokens.${at}`,
        `token id ${chunk.tokens?.[at]} is outside the vocabulary [0, ${vocab})`,
      );
    }
  });
  const stop = request.sampling_params.stop;
  if (Array.isArray(stop)) {
    const ids = stop.flat().filter((member): member is number => typeof member === 'number');
    if (firstOutsideVocab(ids, vocab) >= 0) {
      throw invalid('sampling_params.stop', `holds a token id outside the vocabulary [0, ${vocab})`);
    }
  }
  if (targetIds !== undefined) {
    const at = firstOutsideVocab(targetIds.data, vocab);
    if (at >= 0) {
      throw invalid(
        `target_prompt_logprobs.data.${at}`,
        `token id ${targetIds.data[at]} is outside the vocabulary [0, ${vocab}) (-1: none)`,
      );
    }
  }
}

/**
 * What the trained base model's limits decide of a pass, refused at submit naming the field (B2): each
 * datum within its context and, when its vocabulary is known, its input and target token ids inside
 * it. `limits` undefined: a base model no longer served, left to the backend.
 */
export function checkPassLimits(
  input: ForwardBackwardInput,
  field: string,
  limits: BaseModelLimits | undefined,
): void {
  if (limits === undefined) return;
  const context = limits.max_context_length;
  const vocab = limits.vocab_size;
  input.data.forEach((datum, index) => {
    const datumField = sub(field, `data.${index}`);
    const positions = inputTokenCount(datum.model_input);
    if (positions > context) {
      throw invalid(
        `${datumField}.model_input`,
        `holds ${positions} tokens, more than the context of ${context}`,
      );
    }
    if (vocab === undefined) return;
    datum.model_input.chunks.forEach((chunk, chunkIndex) => {
      const at = chunk.tokens.findIndex((token) => token >= vocab);
      if (at >= 0) {
        throw invalid(
          `${datumField}.model_input.chunks.${chunkIndex}.tokens.${at}`,
          `token id ${chunk.tokens[at]} is outside the vocabulary [0, ${vocab})`,
        );
      }
    });
    const targets = datum.loss_fn_inputs.target_tokens;
    if (targets === undefined) return;
    for (let i = 0; i < targets.data.length; i++) {
      if (Number(targets.data[i]) >= vocab) {
        throw invalid(
          `${datumField}.loss_fn_inputs.target_tokens.data.${i}`,
          `token id ${targets.data[i]} is outside the vocabulary [0, ${vocab})`,
        );
      }
    }
  });
}
