import { z } from 'zod';
import { CLONE_SEQ_SPAN, MAX_LOG_POSITION } from '../../domain/session-log.js';
import { MAX_LOSS_FN_CONFIG_ENTRIES, MAX_LOSS_FN_INPUTS } from '../../wire/request-parts.js';
import { LOSS_FNS, MAX_LORA_RANK } from './capabilities.js';
import { describeValue } from './describe.js';

/**
 * Request bodies of the Tinker REST API as the Python SDK (<= 0.24.1) sends them. Shapes only: limits
 * and cross-field rules that answer 413/422 live in `request-checks.ts`. Unknown members (the SDK's
 * `type` and fields of newer versions) are accepted and dropped, so they never reach a stored payload.
 */

/** Ids travel inside `#`-separated registry keys and S3 keys: a conservative alphabet. */
export const idString = z
  .string()
  .regex(/^[A-Za-z0-9_.:-]{1,128}$/, { error: 'must be an id (1-128 letters, digits, _ . : -)' });

/** Client sequence numbers (seq_id, model_seq_id, ...). */
const sequenceNumber = (min: number) => z.int().min(min).max(Number.MAX_SAFE_INTEGER);

export const tokenId = z
  .int()
  .min(0)
  .max(2 ** 31 - 1);

/**
 * A long array of numbers checked in one loop and kept as the same array (no per-element schema,
 * no copy): request bodies carry tens of thousands of token ids and tensor values, and per-element
 * parsing dominated the cost of a submit. The first bad element is reported with its index.
 */
function numberArray(accepts: (value: unknown) => boolean, expected: string) {
  return z
    .custom<number[]>((value) => Array.isArray(value), { error: 'Invalid input: expected array' })
    .superRefine((values, ctx) => {
      const index = values.findIndex((value) => !accepts(value));
      if (index >= 0) {
        ctx.addIssue({
          code: 'custom',
          path: [index],
          message: `${expected}, got ${describeValue(values[index])}`,
        });
      }
    });
}

/** Issues one element may add before validation stops (parseRequest names the first three). */
const ISSUES_PER_ELEMENT = 3;

/**
 * Elements parsed in order until the first that fails, whose first issues are the answer: `z.array`
 * builds issues for every element (`data: [{}] x 400,000` built 800,000 of them, ~860 MB, before
 * the 400). Lengths that limits bound are checked before the schema runs (`checkJsonPassParts`).
 */
function firstFailureArray<T extends z.ZodType>(element: T, bounds: { min: number }) {
  return z
    .custom<z.input<T>[]>((value) => Array.isArray(value), { error: 'Invalid input: expected array' })
    .transform((values, ctx): z.output<T>[] => {
      if (values.length < bounds.min) {
        ctx.addIssue({ code: 'custom', message: `Too small: expected array to have >=${bounds.min} items` });
        return z.NEVER;
      }
      const parsed: z.output<T>[] = [];
      for (const [index, value] of values.entries()) {
        if (!addFirstIssues(element, value, index, ctx, parsed)) return z.NEVER;
      }
      return parsed;
    });
}

/** A string-keyed record checked as `firstFailureArray` checks an array: `max` keys, first failure only. */
function firstFailureRecord<T extends z.ZodType>(value: T, max: number) {
  return z
    .custom<Record<string, z.input<T>>>(
      (input) => typeof input === 'object' && input !== null && !Array.isArray(input),
      { error: 'Invalid input: expected record' },
    )
    .transform((record, ctx): Record<string, z.output<T>> => {
      const entries = Object.entries(record);
      if (entries.length > max) {
        ctx.addIssue({ code: 'custom', message: `${entries.length} entries exceeds the limit of ${max}` });
        return z.NEVER;
      }
      const parsed: z.output<T>[] = [];
      for (const [key, member] of entries) {
        if (!addFirstIssues(value, member, key, ctx, parsed)) return z.NEVER;
      }
      // fromEntries defines own properties, so a key such as "__proto__" stays a plain key.
      return Object.fromEntries(entries.map(([key], index) => [key, parsed[index] as z.output<T>]));
    });
}

/** Parses one member; on failure adds its first issues under `key` and says so. */
function addFirstIssues<T extends z.ZodType>(
  schema: T,
  value: unknown,
  key: string | number,
  ctx: z.RefinementCtx,
  parsed: z.output<T>[],
): boolean {
  const result = schema.safeParse(value);
  if (result.success) {
    parsed.push(result.data);
    return true;
  }
  for (const issue of result.error.issues.slice(0, ISSUES_PER_ELEMENT)) {
    ctx.addIssue({ code: 'custom', message: issue.message, path: [key, ...issue.path] });
  }
  return false;
}

const isTokenId = (value: unknown) =>
  Number.isInteger(value) && (value as number) >= 0 && (value as number) < 2 ** 31;
export const tokenIds = numberArray(isTokenId, 'expected a token id (an integer >=0 and <2^31)');
const finiteNumbers = numberArray(Number.isFinite, 'expected a finite number');
// Safe integers, as z.int() takes: one loop, and one issue at most.
const dimensions = numberArray(
  (value) => Number.isSafeInteger(value) && (value as number) >= 0,
  'expected a dimension (an integer >=0)',
);
const integers = numberArray(Number.isSafeInteger, 'expected an integer');

/** Checkpoint names end up in `tinker://` paths and registry keys. */
export const RESERVED_CHECKPOINT_NAME = /^samp-[0-9a-f]{32}$/;
export const checkpointName = z
  .string()
  .regex(/^[A-Za-z0-9_.-]{1,255}$/, { error: 'must be 1-255 letters, digits, _ . -' })
  .refine((name) => name !== '.' && name !== '..', { error: 'must not be . or ..' })
  .refine((name) => !RESERVED_CHECKPOINT_NAME.test(name), {
    error: 'names shaped like a sampling session id are reserved for unnamed sampler checkpoints',
  });

/** A Hub id or, for a model folder on the engine's host, its absolute path (G6; BASE_MODELS lists which). */
export const baseModelName = z.string().regex(/^\/?[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$/, {
  error: 'must be a model name or an absolute path (letters, digits, . _ / -)',
});

/** DynamoDB nests maps and lists at most 32 levels; metadata sits inside a record, so half of that. */
export const METADATA_MAX_DEPTH = 16;

/** Zero, or a magnitude DynamoDB can store (1e-130 up to, not including, 1e126). */
function storableNumber(value: number): boolean {
  const magnitude = Math.abs(value);
  return magnitude === 0 || (magnitude >= 1e-130 && magnitude < 1e126);
}

/**
 * The first part of client metadata that could not be stored as it is (session records keep it in
 * DynamoDB): too deep, a number out of DynamoDB's range, an empty key, the key `constructor`, which
 * the SDK's marshaller takes for a class instance, or `__proto__`, which a parsed record would set as
 * its prototype instead of keeping (accepted and then missing from listings, against W7). Walked with an explicit stack, since a body may nest
 * far deeper than the call stack goes.
 */
function metadataProblem(value: unknown): { path: (string | number)[]; message: string } | undefined {
  const pending: { value: unknown; path: (string | number)[] }[] = [{ value, path: [] }];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const { value: member, path } = next;
    if (path.length > METADATA_MAX_DEPTH) {
      return { path, message: `nests deeper than ${METADATA_MAX_DEPTH} levels` };
    }
    if (typeof member === 'number' && !storableNumber(member)) {
      return {
        path,
        message: `${member} is outside the storable range (0, or 1e-130 to 1e126 in magnitude)`,
      };
    }
    if (Array.isArray(member)) {
      member.forEach((item, index) => {
        pending.push({ value: item, path: [...path, index] });
      });
    } else if (typeof member === 'object' && member !== null) {
      for (const [key, item] of Object.entries(member)) {
        if (key === '' || key === 'constructor' || key === '__proto__') {
          return { path: [...path, key], message: `the key "${key}" is not allowed in metadata` };
        }
        pending.push({ value: item, path: [...path, key] });
      }
    }
  }
  return undefined;
}

/**
 * A metadata record, checked as the client sent it (`metadataProblem`) before zod builds its own copy,
 * which would have taken a `__proto__` key for the prototype.
 */
function metadataRecord<V extends z.ZodType>(values: V) {
  return z
    .unknown()
    .superRefine((value, ctx) => {
      if (typeof value !== 'object' || value === null || Array.isArray(value)) return;
      const problem = metadataProblem(value);
      if (problem) ctx.addIssue({ code: 'custom', path: problem.path, message: problem.message });
    })
    .pipe(z.record(z.string(), values));
}

const metadata = metadataRecord(z.unknown());

/**
 * A checkpoint's `user_metadata` (SDK releases after 0.25.0): the SDK types it `dict[str, str]`, so
 * values must be strings; keys are checked as session metadata's are.
 */
const checkpointMetadata = metadataRecord(z.string());

export const tensorData = z.object({
  data: finiteNumbers,
  dtype: z.enum(['int64', 'float32']),
  shape: dimensions.nullish(),
  sparse_crow_indices: integers.nullish(),
  sparse_col_indices: integers.nullish(),
});

export const modelInputChunk = z.object({
  type: z.string().optional(),
  tokens: tokenIds.optional(),
});

export const modelInput = z.object({ chunks: firstFailureArray(modelInputChunk, { min: 1 }) });

/**
 * A provenance span (SDK 0.26+, W8). The SDK's JSON form of spans is not known; this one mirrors the
 * protobuf `ProvenanceSpan` oneof: `type` names its arm.
 */
export const provenanceSpan = z.object({
  type: z.enum(['prompt_tokens', 'sampled_tokens']),
  sequence_id: z.string().min(1).max(128),
  offset: z.int().min(0).max(Number.MAX_SAFE_INTEGER).default(0),
  length: z.int().min(1).max(Number.MAX_SAFE_INTEGER),
});

export const datum = z.object({
  model_input: modelInput,
  loss_fn_inputs: firstFailureRecord(tensorData, MAX_LOSS_FN_INPUTS),
  model_input_spans: firstFailureArray(provenanceSpan, { min: 0 }).nullish(),
  loss_fn_input_spans: firstFailureArray(provenanceSpan, { min: 0 }).nullish(),
});

/**
 * How many datums and chunks a pass may hold is a tunable (MAX_DATUMS), checked on the parsed JSON
 * before this schema runs (`checkJsonPassParts`); here elements stop at the first that fails.
 */
export const forwardBackwardInput = z.object({
  data: firstFailureArray(datum, { min: 1 }),
  loss_fn: z.enum(LOSS_FNS),
  loss_fn_config: firstFailureRecord(z.union([z.number(), z.string()]), MAX_LOSS_FN_CONFIG_ENTRIES).nullish(),
});

export const loraConfig = z.object({
  rank: z.int().min(1).max(MAX_LORA_RANK),
  seed: z.int().nullish(),
  train_unembed: z.boolean().default(true),
  train_mlp: z.boolean().default(true),
  train_attn: z.boolean().default(true),
});

/** Tinker's AdamParams with its defaults filled in, so the stored payload is complete. */
export const adamParams = z.object({
  learning_rate: z.number().min(0).default(1e-4),
  beta1: z.number().min(0).lt(1).default(0.9),
  beta2: z.number().min(0).lt(1).default(0.95),
  eps: z.number().gt(0).default(1e-12),
  weight_decay: z.number().min(0).default(0),
  grad_clip_norm: z.number().min(0).default(0),
});

const isTokenIdList = (value: unknown) => Array.isArray(value) && value.every(isTokenId);

/**
 * `stop`: a string, strings, token ids, or lists of token ids. One check that stops at the first bad
 * element, and one issue: a union of array schemas built one issue per element per branch.
 */
const stopSequences = z.custom<string | string[] | number[] | number[][]>(
  (value) =>
    typeof value === 'string' ||
    (Array.isArray(value) &&
      (value.every((member) => typeof member === 'string') ||
        value.every(isTokenId) ||
        value.every(isTokenIdList))),
  { error: 'must be a string, a list of strings, a list of token ids, or a list of token id lists' },
);

export const samplingParams = z.object({
  max_tokens: z.int().min(1),
  temperature: z.number().min(0).default(1),
  top_k: z
    .int()
    .min(-1)
    .refine((k) => k !== 0, { error: 'must be -1 (no limit) or a positive integer' })
    .default(-1),
  top_p: z.number().gt(0).max(1).default(1),
  seed: z.int().nullish(),
  stop: stopSequences.nullish(),
});

/**
 * The optimizers this server trains with: `adamw` is the SDK's default and the Adam path every release
 * uses (`adam_params`). Any other a newer SDK names (`dimuon`) is refused with a 400 that lists these,
 * never trained as AdamW.
 */
export const SUPPORTED_OPTIMIZERS = ['adamw'] as const;

function checkOptimizerType(type: string, ctx: z.RefinementCtx): void {
  if ((SUPPORTED_OPTIMIZERS as readonly string[]).includes(type)) return;
  ctx.addIssue({
    code: 'custom',
    path: ['type'],
    message: `${describeValue(type)} is not offered by this server; supported: ${SUPPORTED_OPTIMIZERS.join(', ')}`,
  });
}

/** `create_model`'s `optimizer_config` (newer SDKs always send it; `{type: adamw}` by default). */
export const optimizerConfig = z
  .object({ type: z.string().max(64), version: z.int().nullish() })
  .superRefine((config, ctx) => checkOptimizerType(config.type, ctx));

/** `optim_step`'s `optimizer_params` (newer SDKs): the AdamW form is AdamParams with its `type`. */
export const optimizerParams = z
  .object({ type: z.string().max(64) })
  .passthrough()
  .superRefine((params, ctx) => checkOptimizerType(params.type, ctx));

export const clientConfigRequest = z.object({ sdk_version: z.string().max(64).optional() });

export const createSessionRequest = z.object({
  tags: z.array(z.string().max(256)).max(64).default([]),
  user_metadata: metadata.nullish(),
  sdk_version: z.string().max(64).optional(),
});

export const sessionHeartbeatRequest = z.object({ session_id: idString });

/** Telemetry is accepted and dropped; only its shape (a JSON object) is checked. */
export const telemetryRequest = z.record(z.string(), z.unknown());

export const createModelRequest = z.object({
  session_id: idString,
  model_seq_id: sequenceNumber(0),
  base_model: baseModelName,
  lora_config: loraConfig,
  user_metadata: metadata.nullish(),
  optimizer_config: optimizerConfig.nullish(),
});

const modelRequest = { model_id: idString, seq_id: sequenceNumber(1) };

export const forwardBackwardRequest = z.object({
  ...modelRequest,
  forward_backward_input: forwardBackwardInput,
});
/** The ids of a protobuf `ForwardBackwardRequest`, checked as the JSON members are. */
export const protobufPassIds = z.object(modelRequest);
export const forwardRequest = z.object({ ...modelRequest, forward_input: forwardBackwardInput });
/** Exactly one of `adam_params` (every release) and `optimizer_params` (newer ones); both become AdamParams. */
export const optimStepRequest = z
  .object({ ...modelRequest, adam_params: adamParams.nullish(), optimizer_params: optimizerParams.nullish() })
  .superRefine((request, ctx) => {
    const adam = request.adam_params != null;
    const generic = request.optimizer_params != null;
    if (adam === generic) {
      ctx.addIssue({
        code: 'custom',
        path: [adam ? 'optimizer_params' : 'adam_params'],
        message: 'give exactly one of adam_params and optimizer_params',
      });
    }
  })
  .transform((request, ctx) => {
    const { optimizer_params: generic, adam_params: adam, ...ids } = request;
    if (adam != null) return { ...ids, adam_params: adam };
    const { type: _type, ...fields } = generic ?? {};
    // Strict: a parameter AdamW does not take (`momentum`) is refused, never dropped (W7).
    const parsed = adamParams.strict().safeParse(fields);
    if (parsed.success) return { ...ids, adam_params: parsed.data };
    for (const issue of parsed.error.issues) {
      if (issue.code === 'unrecognized_keys') {
        const key = issue.keys[0] as string;
        ctx.addIssue({
          code: 'custom',
          path: ['optimizer_params', ...issue.path, key],
          message: `${describeValue(key)} is not a parameter of adamw; it takes ${Object.keys(adamParams.shape).join(', ')}`,
        });
        continue;
      }
      ctx.addIssue({ code: 'custom', path: ['optimizer_params', ...issue.path], message: issue.message });
    }
    return z.NEVER;
  });
/**
 * A checkpoint's TTL (C5): whole seconds > 0, or null/absent for never. Capped at 100 years so an
 * expiry in milliseconds stays a safe integer.
 */
export const ttlSeconds = z
  .int()
  .min(1, { error: 'must be a whole number of seconds > 0, or null for no expiry' })
  .max(100 * 365 * 24 * 3600);

export const saveWeightsRequest = z.object({
  ...modelRequest,
  path: checkpointName,
  ttl_seconds: ttlSeconds.nullish(),
  /** Replace a committed checkpoint of this name (its old content is collected, C3). */
  overwrite: z.boolean().nullish(),
  /** Stored with the name record: an overwrite replaces it as a whole, or clears it when absent. */
  user_metadata: checkpointMetadata.nullish(),
});

/**
 * copy_weights (newer SDKs' `ServiceClient.copy_weights`): a checkpoint the tenant may read, copied
 * under a new run of the session named by `model_seq_id`.
 */
export const copyWeightsRequest = z.object({
  session_id: idString,
  model_seq_id: sequenceNumber(0),
  source_path: z.string().max(512),
  ttl_seconds: ttlSeconds.nullish(),
  weights_access_token: z.string().max(4096).nullish(),
});

/** `PUT .../ttl`: a TTL from now, or null to clear it. The member is required (the SDK always sends it). */
export const setTtlRequest = z.object({ ttl_seconds: ttlSeconds.nullable() });

/** `training_runs/{run_id}/checkpoints/{kind}/{name}[/...]` route parameters. */
export const checkpointRouteParams = z.object({
  run_id: idString,
  kind: z.enum(['weights', 'sampler_weights'], { error: 'must be weights or sampler_weights' }),
  // Any name a checkpoint can have, the sampling session ids of unnamed sampler saves included.
  name: z
    .string()
    .regex(/^[A-Za-z0-9_.-]{1,255}$/, { error: 'must be 1-255 letters, digits, _ . -' })
    .refine((name) => name !== '.' && name !== '..', { error: 'must not be . or ..' }),
});

export const saveWeightsForSamplerRequest = z
  .object({
    ...modelRequest,
    path: checkpointName.nullish(),
    sampling_session_seq_id: sequenceNumber(0).nullish(),
    ttl_seconds: ttlSeconds.nullish(),
    user_metadata: checkpointMetadata.nullish(),
  })
  .superRefine((request, ctx) => {
    const named = request.path !== undefined && request.path !== null;
    const unnamed = request.sampling_session_seq_id !== undefined && request.sampling_session_seq_id !== null;
    if (named === unnamed) {
      ctx.addIssue({
        code: 'custom',
        path: ['path'],
        message: 'give exactly one of path (a named checkpoint) or sampling_session_seq_id (an unnamed one)',
      });
    }
  });

export const loadWeightsRequest = z.object({
  ...modelRequest,
  path: z.string().max(512),
  optimizer: z.boolean().default(false),
  /** Create-via-load (newer SDKs): the new model's optimizer, checked as create_model's is. */
  optimizer_config: optimizerConfig.nullish(),
});

export const unloadModelRequest = z.object({ model_id: idString });

export const createSamplingSessionRequest = z
  .object({
    session_id: idString,
    sampling_session_seq_id: sequenceNumber(0),
    base_model: baseModelName.nullish(),
    model_path: z.string().max(512).nullish(),
  })
  .superRefine((request, ctx) => {
    if (!request.model_path && !request.base_model) {
      ctx.addIssue({
        code: 'custom',
        path: ['model_path'],
        message: 'give model_path (tinker://...) or base_model',
      });
    }
  });

export const sampleRequest = z.object({
  sampling_session_id: idString,
  seq_id: sequenceNumber(0),
  num_samples: z.int().min(1).max(1024).default(1),
  prompt: modelInput,
  sampling_params: samplingParams,
  prompt_logprobs: z.boolean().nullish(),
  topk_prompt_logprobs: z.int().min(0).max(1024).default(0),
  // SDK 0.26+ (W8): the newer outputs; `record_stability_info` is accepted and has no effect here.
  topk_sample_logprobs: z.int().min(0).max(1024).default(0),
  prompt_alt_tokens_k: z.int().min(0).max(1024).default(0),
  target_prompt_logprobs: tensorData.nullish(),
  record_stability_info: z.boolean().nullish(),
});

/** `GET sample_sequences/{sequence_id}` (W8). */
export const getSampleSequenceParams = z.object({ sequence_id: z.string().min(1).max(128) });

export const getInfoRequest = z.object({ model_id: idString });

export const weightsInfoRequest = z.object({ tinker_path: z.string().max(512) });

/** `GET samplers/{sampler_id}`: the path parameter, checked like a body field. */
export const getSamplerParams = z.object({ sampler_id: idString });

export const retrieveFutureRequest = z.object({
  request_id: z.string().min(1).max(128),
  allow_metadata_only: z.boolean().optional(),
});

/**
 * Session futures (W9): one long poll per (sampling session, clone). `cloned_sampler_id` is the clone
 * part of the clone's seq_ids (`seq_id = 10^9 * clone + n`), so it never exceeds a seq_id's.
 */
export const retrieveFuturesRequest = z.object({
  target: z.object({
    type: z.literal('sampling_session', { error: 'must be sampling_session' }).optional(),
    sampling_session_id: idString,
    cloned_sampler_id: z
      .int()
      .min(0)
      .max(Math.floor(Number.MAX_SAFE_INTEGER / CLONE_SEQ_SPAN))
      .default(0),
  }),
  prev_cursor: z.int().min(0).max(MAX_LOG_POSITION).default(0),
  /** The SDK leaves it out; the server's own long-poll bound applies either way. */
  timeout: z.number().min(0).nullish(),
});

export const joinSamplingSessionRequest = z.object({ sampling_session_id: idString });

export const cancelFutureRequest = z.object({ request_id: z.string().min(1).max(128) });

/** `POST sessions/{session_id}/finish`, as the SDK's `ServiceClient.close` sends it; the first reason wins. */
export const finishSessionRequest = z.object({
  reason: z.object({
    type: z.enum(['success', 'errored', 'interrupted'], {
      error: 'must be success, errored or interrupted',
    }),
  }),
  detail: z.string().max(4096).nullish(),
});

/** `sessions/{session_id}/...` route parameters. */
export const sessionRouteParams = z.object({ session_id: idString });

export type CreateSessionRequest = z.infer<typeof createSessionRequest>;
export type CreateModelRequest = z.infer<typeof createModelRequest>;
export type ForwardBackwardRequest = z.infer<typeof forwardBackwardRequest>;
export type ForwardRequest = z.infer<typeof forwardRequest>;
export type ForwardBackwardInputBody = z.infer<typeof forwardBackwardInput>;
export type OptimStepRequest = z.infer<typeof optimStepRequest>;
export type SaveWeightsRequest = z.infer<typeof saveWeightsRequest>;
export type SaveWeightsForSamplerRequest = z.infer<typeof saveWeightsForSamplerRequest>;
export type LoadWeightsRequest = z.infer<typeof loadWeightsRequest>;
export type UnloadModelRequest = z.infer<typeof unloadModelRequest>;
export type CreateSamplingSessionRequest = z.infer<typeof createSamplingSessionRequest>;
export type SampleRequestBody = z.infer<typeof sampleRequest>;
export type ModelInputBody = z.infer<typeof modelInput>;
export type TensorDataBody = z.infer<typeof tensorData>;
