import { MAX_SAMPLES } from '../../backend/reference/inputs.js';
import { MAX_CONTEXT, MAX_RANK, VOCAB } from '../../backend/reference/model.js';
import { type BaseModelConfig, config, DEFAULT_BASE_MODEL, type Tunables } from '../../base/config.js';
import { invalidField } from '../../base/errors.js';
import type { SdkConfigFlags } from './sdk-versions.js';

export { DEFAULT_BASE_MODEL };

/**
 * What a base model's limits decide, refused at submit with a 400 naming the field (B2): tokens a
 * sequence may hold, its vocabulary (absent: not configured, so checked at execution only) and the
 * samples one request may ask for.
 */
export interface BaseModelLimits {
  readonly max_context_length: number;
  readonly vocab_size?: number;
  readonly max_num_samples: number;
}

/**
 * A base model's limits: what BASE_MODELS says, else the reference model's (it publishes its own:
 * shared/backend/reference/model.ts), else for an engine's model only what the engines share (256
 * samples, the bound of both backends).
 */
export function baseModelLimits(model: BaseModelConfig): BaseModelLimits {
  const vocab = model.vocab_size ?? (model.name === DEFAULT_BASE_MODEL ? VOCAB : undefined);
  return {
    max_context_length: model.max_context_length ?? MAX_CONTEXT,
    ...(vocab === undefined ? {} : { vocab_size: vocab }),
    max_num_samples: model.max_num_samples ?? MAX_SAMPLES,
  };
}

/** The limits of a configured base model; undefined for one no longer served (checked at execution). */
export function servedLimits(
  name: string,
  models: readonly BaseModelConfig[] = config().baseModels,
): BaseModelLimits | undefined {
  const model = models.find((candidate) => candidate.name === name);
  return model === undefined ? undefined : baseModelLimits(model);
}

/** `get_server_capabilities`' entry: the SDK reads `model_name`; its models ignore extra fields. */
export interface SupportedModel extends BaseModelLimits {
  readonly model_name: string;
}

/**
 * What this deployment serves, as `get_server_capabilities` advertises it: the pool's base models from
 * configuration (BASE_MODELS, shared/base/config.ts; G6), each with its limits (B2). Unset, the
 * reference model alone, the name the demo and the docs use.
 */
export function supportedModels(models: readonly BaseModelConfig[] = config().baseModels): SupportedModel[] {
  return models.map((model) => ({ model_name: model.name, ...baseModelLimits(model) }));
}

/**
 * The configured base model a request names, or a 400 on `field` naming the supported ones: a model the
 * pool's workers do not load would otherwise fail every step of it later.
 */
export function servedBaseModel(
  name: string,
  field: string,
  models: readonly BaseModelConfig[] = config().baseModels,
): BaseModelConfig {
  const model = models.find((candidate) => candidate.name === name);
  if (model !== undefined) return model;
  const names = models.map((candidate) => JSON.stringify(candidate.name)).join(', ');
  throw invalidField(
    field,
    `${JSON.stringify(name)} is not served here; the supported base models are ${names}`,
  );
}

/** Highest LoRA rank the backend trains. */
export const MAX_LORA_RANK = MAX_RANK;

/**
 * Loss functions the Tinker SDK names (LossFnType): the loss_fn_inputs each needs and the loss_fn_config
 * keys each takes (cross_entropy and importance_sampling none; ppo and cispo the clip ratio bounds; dro
 * beta). Defined beside the backends (shared/backend/loss-config.ts) so intake and execution share them.
 */
export {
  FLOAT_LOSS_INPUTS,
  FLOAT32_ONLY_INPUTS,
  LOSS_FN_CONFIG,
  LOSS_FN_INPUTS,
  LOSS_FNS,
  type LossFn,
  resolveLossConfig,
} from '../../backend/loss-config.js';

/** `get_info`'s `model_data.arch`: every base model the reference backend serves has this shape. */
export const REFERENCE_ARCH = 'reference-byte-lm';

/** `get_info`'s `model_data.arch` for any other configured base model (a Hugging Face causal LM on an engine). */
export const ENGINE_ARCH = 'causal-lm';

/**
 * Lambda's synchronous invocation payload limit (6 MB), which binds before API Gateway's (10 MB). A
 * binary body reaches Lambda base64-encoded, 4/3 of its size, inside an event that also carries the
 * headers, the request context and the JSON envelope: 256 KiB is left for those and for the SDK's
 * size being an estimate. So the largest binary body is (6 MiB - 256 KiB) * 3/4 = 4,521,984 bytes.
 */
const LAMBDA_REQUEST_BYTES = 6 * 1024 * 1024;
const EVENT_HEADROOM_BYTES = 256 * 1024;
export const LAMBDA_MAX_BINARY_BODY_BYTES = Math.floor(
  ((LAMBDA_REQUEST_BYTES - EVENT_HEADROOM_BYTES) * 3) / 4,
);

/**
 * `client/config`: the SDK's pyqwest transport and parallel chunk submits stay off. The SDK splits a
 * forward_backward into chunks of at most `fwdbwd_max_chunk_len` datums and about
 * `fwdbwd_max_chunk_bytes_count` serialized protobuf bytes before zstd; that size must pass
 * MAX_BODY_BYTES (which counts decompressed bytes) and, sent uncompressed, still fit Lambda's limit.
 * `proto_compress_fwdbwd`: the SDK sends those bodies zstd-compressed (`Content-Encoding: zstd`).
 * The per-release flags come from `sdkConfigFlags` (services/api/sdk-versions.ts).
 */
export function clientConfig(
  tunables: Pick<Tunables, 'maxDatums' | 'maxBodyBytes'>,
  flags: SdkConfigFlags['clientConfig'],
) {
  return {
    use_pyqwest_transport: false,
    parallel_fwdbwd_chunks: false,
    proto_compress_fwdbwd: true,
    fwdbwd_max_chunk_len: tunables.maxDatums,
    fwdbwd_max_chunk_bytes_count: Math.min(tunables.maxBodyBytes, LAMBDA_MAX_BINARY_BODY_BYTES),
    ...flags,
  };
}

/** `client/dynamic_config`: the refresh interval, and the per-release flags of `sdkConfigFlags`. */
export function clientDynamicConfig(flags: SdkConfigFlags['dynamicConfig']) {
  return { refresh_interval_sec: 300, ...flags };
}
