import { z } from 'zod';
import type { TrainingRequestType } from '../domain/records.js';

/**
 * The members of the stored payloads (shared/api/payloads.ts) the worker relies on. Request bodies
 * themselves (`input`, `adam_params`, sampling fields) are checked by the backend, which reports bad
 * values as user errors; what is checked here is what only a server bug could get wrong.
 */

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
  forward: z.object({ request_type: z.literal('forward'), input: z.unknown() }),
  forward_backward: z.object({ request_type: z.literal('forward_backward'), input: z.unknown() }),
  optim_step: z.object({ request_type: z.literal('optim_step'), adam_params: z.unknown() }),
  save_weights: z.object({ request_type: z.literal('save_weights'), checkpoint: checkpointRef }),
  save_weights_for_sampler: z.object({
    request_type: z.literal('save_weights_for_sampler'),
    checkpoint: checkpointRef,
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
  checkpoint: z.object({ model_id: z.string().min(1), content_id: z.string().min(1) }).optional(),
  num_samples: z.number(),
  prompt: z.unknown(),
  sampling_params: z.looseObject({ seed: z.number() }),
  prompt_logprobs: z.boolean().optional(),
  topk_prompt_logprobs: z.number().optional(),
});
export type SampleStepPayload = z.infer<typeof samplePayloadSchema>;

/** A stored payload that does not have the shape its request type needs: a server bug, never retried. */
export class MalformedPayloadError extends Error {
  constructor(requestId: string, detail: string) {
    super(`The stored request ${requestId} is malformed: ${detail}`);
    this.name = 'MalformedPayloadError';
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
