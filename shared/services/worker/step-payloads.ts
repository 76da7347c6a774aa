import { z } from 'zod';
import type { ForwardBackwardInput, SampleRequest, SamplingParams } from '../../backend/backend.js';
import {
  type ForwardBackwardInputJson,
  type ModelInputJson,
  modelInputFromJson,
  passInputFromJson,
} from '../../backend/pass-input.js';
import { config } from '../../base/config.js';
import { TinkerError, ValidationError } from '../../base/errors.js';
import { PayloadBytes } from '../../base/payload-bytes.js';
import type { TrainingRequestType } from '../../domain/records.js';
import { decodeForwardBackwardRequest } from '../../wire/forward-backward-request.js';
import { decompressZstdBounded } from '../../wire/zstd.js';

/**
 * The members of the stored payloads (shared/services/api/payloads.ts) the worker relies on. Request bodies
 * themselves (`input`, `adam_params`, sampling fields) are checked by the backend, which reports bad
 * values as user errors; what is checked here is what only a server bug could get wrong. Pass inputs
 * and prompts are checked to the array level only: intake checked every element, and re-walking tens of
 * thousands of numbers per step would cost what intake already paid.
 */

/** An array of numbers, elements unchecked (see above). */
const numbers = z.custom<number[]>((value) => Array.isArray(value), {
  error: 'Invalid input: expected array',
});

const modelInputJson = z.object({
  chunks: z.array(z.object({ type: z.string().optional(), tokens: numbers.optional() })),
}) satisfies z.ZodType<ModelInputJson>;

const passInputJson = z.object({
  data: z.array(
    z.object({
      model_input: modelInputJson,
      loss_fn_inputs: z.record(
        z.string(),
        z.object({
          data: numbers,
          dtype: z.enum(['int64', 'float32']),
          shape: numbers.nullish(),
          sparse_crow_indices: numbers.nullish(),
          sparse_col_indices: numbers.nullish(),
        }),
      ),
    }),
  ),
  loss_fn: z.string(),
  loss_fn_config: z.record(z.string(), z.union([z.number(), z.string()])).nullish(),
}) satisfies z.ZodType<ForwardBackwardInputJson>;

const checkpointRef = z.object({
  pk: z.string().min(1),
  model_id: z.string().min(1),
  kind: z.enum(['weights', 'sampler']),
  name: z.string().min(1),
  path: z.string().min(1),
});

export const stepPayloadSchemas = {
  create_model: z.object({
    request_type: z.literal('create_model'),
    base_model: z.string().min(1),
    lora_config: z.looseObject({ rank: z.number() }),
  }),
  forward: z.object({ request_type: z.literal('forward'), input: passInputJson }),
  forward_backward: z.object({ request_type: z.literal('forward_backward'), input: passInputJson }),
  optim_step: z.object({ request_type: z.literal('optim_step'), adam_params: z.unknown() }),
  save_weights: z.object({
    request_type: z.literal('save_weights'),
    checkpoint: checkpointRef,
    ttl_seconds: z.int().positive().optional(),
  }),
  save_weights_for_sampler: z.object({
    request_type: z.literal('save_weights_for_sampler'),
    checkpoint: checkpointRef,
    ttl_seconds: z.int().positive().optional(),
    sampling_session: z
      .object({
        sampling_session_id: z.string().min(1),
        session_id: z.string().min(1),
        base_model: z.string().min(1),
      })
      .optional(),
  }),
  load_weights: z.object({
    request_type: z.literal('load_weights'),
    checkpoint: checkpointRef.extend({ content_id: z.string().min(1) }),
    optimizer: z.boolean(),
  }),
  unload_model: z.object({ request_type: z.literal('unload_model') }),
} as const satisfies Record<TrainingRequestType, z.ZodType>;

export type StepPayload<T extends TrainingRequestType> = z.infer<(typeof stepPayloadSchemas)[T]>;
export type CheckpointRefPayload = z.infer<typeof checkpointRef>;

export const samplePayloadSchema = z.object({
  request_type: z.literal('sample'),
  base_model: z.string().min(1),
  // `path` (sessions made since W5 carry it) lets the worker check the checkpoint is still live (C3-C5).
  checkpoint: z
    .object({
      model_id: z.string().min(1),
      content_id: z.string().min(1),
      path: z.string().min(1).optional(),
    })
    .optional(),
  num_samples: z.number(),
  prompt: modelInputJson,
  sampling_params: z.looseObject({ seed: z.number() }),
  prompt_logprobs: z.boolean().optional(),
  topk_prompt_logprobs: z.number().optional(),
  topk_sample_logprobs: z.number().optional(),
  prompt_alt_tokens_k: z.number().optional(),
  target_prompt_logprobs: z
    .object({ shape: z.tuple([z.number(), z.number()]), data: z.array(z.number()) })
    .optional(),
});
export type SampleStepPayload = z.infer<typeof samplePayloadSchema>;

/** A stored payload that does not have the shape its request type needs: a server bug, never retried. */
export class MalformedPayloadError extends TinkerError {
  override readonly name = 'MalformedPayloadError';
  readonly status = 500;
  constructor(requestId: string, detail: string) {
    super(`The stored request ${requestId} is malformed: ${detail}`, { context: { request_id: requestId } });
  }
}

export function parseStepPayload<T extends TrainingRequestType>(
  type: T,
  requestId: string,
  payload: unknown,
): StepPayload<T> {
  const parsed = stepPayloadSchemas[type].safeParse(payload);
  if (!parsed.success)
    throw new MalformedPayloadError(requestId, parsed.error.issues[0]?.message ?? 'invalid');
  return parsed.data as StepPayload<T>;
}

export function parseSamplePayload(requestId: string, payload: unknown): SampleStepPayload {
  const parsed = samplePayloadSchema.safeParse(payload);
  if (!parsed.success)
    throw new MalformedPayloadError(requestId, parsed.error.issues[0]?.message ?? 'invalid');
  return parsed.data;
}

/**
 * A stored value's typed form for the backend. The converters' `ValidationError`s are what intake
 * rejects with a 400, so one here means the stored payload is not what intake accepted.
 */
function typed<T>(requestId: string, convert: () => T): T {
  try {
    return convert();
  } catch (error) {
    if (error instanceof ValidationError) throw new MalformedPayloadError(requestId, error.message);
    throw error;
  }
}

/**
 * The typed input of a forward / forward_backward step (W4), the one place a stored pass input becomes
 * what the backend takes: protobuf bytes (both wires are stored so since the SDK 0.25 wire; a zstd
 * body as the client sent it) are decoded straight into typed arrays; a JSON payload stored before
 * that is converted.
 */
export function passInputOf(
  requestId: string,
  type: 'forward' | 'forward_backward',
  payload: unknown,
): ForwardBackwardInput {
  if (payload instanceof PayloadBytes && payload.format === 'tinker-pb') {
    const message = typed(requestId, () =>
      decodeForwardBackwardRequest(
        payload.compression === 'zstd'
          ? decompressZstdBounded(payload.bytes, config().tunables.maxBodyBytes)
          : payload.bytes,
      ),
    );
    if (message.forward_only !== (type === 'forward')) {
      throw new MalformedPayloadError(requestId, `forward_only is ${message.forward_only} on a ${type} step`);
    }
    return message.input;
  }
  const parsed = parseStepPayload(type, requestId, payload);
  return typed(requestId, () => passInputFromJson(parsed.input, 'input'));
}

/** The backend's request for a stored sample: the prompt typed; sampling fields the backend checks. */
export function sampleRequestOf(requestId: string, payload: SampleStepPayload): SampleRequest {
  return {
    num_samples: payload.num_samples,
    prompt: typed(requestId, () => modelInputFromJson(payload.prompt, 'prompt')),
    sampling_params: payload.sampling_params as SamplingParams,
    prompt_logprobs: payload.prompt_logprobs ?? false,
    topk_prompt_logprobs: payload.topk_prompt_logprobs ?? 0,
    ...(payload.topk_sample_logprobs ? { topk_sample_logprobs: payload.topk_sample_logprobs } : {}),
    ...(payload.prompt_alt_tokens_k ? { prompt_alt_tokens_k: payload.prompt_alt_tokens_k } : {}),
    ...(payload.target_prompt_logprobs ? { target_prompt_logprobs: payload.target_prompt_logprobs } : {}),
  };
}
