import { MAX_CONTEXT, MAX_RANK } from '../../backend/reference/model.js';
import { type BaseModelConfig, config, DEFAULT_BASE_MODEL, type Tunables } from '../../base/config.js';
import { invalidField } from '../../base/errors.js';
import type { SdkConfigFlags } from './sdk-versions.js';

export { DEFAULT_BASE_MODEL };

export interface SupportedModel {
  readonly model_name: string;
  readonly max_context_length: number;
}

/**
 * What this deployment serves, as `get_server_capabilities` advertises it: the pool's base models from
 * configuration (BASE_MODELS, shared/base/config.ts; G6). Unset, the reference model alone, the name the
 * demo and the docs use.
 */
export function supportedModels(models: readonly BaseModelConfig[] = config().baseModels): SupportedModel[] {
  return models.map((model) => ({
    model_name: model.name,
    max_context_length: model.max_context_length ?? MAX_CONTEXT,
  }));
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
