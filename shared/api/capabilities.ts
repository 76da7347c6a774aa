import { MAX_CONTEXT, MAX_RANK } from '../backend/reference/model.js';

/**
 * What this deployment serves, as `get_server_capabilities` advertises it. The reference backend
 * derives a base model from its name, so any well-formed name works; the one listed is the name the
 * demo and the docs use.
 */
export const DEFAULT_BASE_MODEL = 'reference/byte-lm';

export const SUPPORTED_MODELS: readonly {
  readonly model_name: string;
  readonly max_context_length: number;
}[] = [{ model_name: DEFAULT_BASE_MODEL, max_context_length: MAX_CONTEXT }];

/** Highest LoRA rank the backend trains. */
export const MAX_LORA_RANK = MAX_RANK;

/** Loss functions the Tinker SDK names (LossFnType), with the loss_fn_inputs each one needs. */
export const LOSS_FN_INPUTS = {
  cross_entropy: ['target_tokens'],
  importance_sampling: ['target_tokens', 'logprobs', 'advantages'],
  ppo: ['target_tokens', 'logprobs', 'advantages'],
  cispo: ['target_tokens', 'logprobs', 'advantages'],
  dro: ['target_tokens', 'logprobs', 'advantages'],
} as const satisfies Record<string, readonly string[]>;

export type LossFn = keyof typeof LOSS_FN_INPUTS;
export const LOSS_FNS = Object.keys(LOSS_FN_INPUTS) as [LossFn, ...LossFn[]];

/** The flags `client/config` answers: the SDK's pyqwest transport and parallel chunk submits stay off. */
export const CLIENT_CONFIG = { use_pyqwest_transport: false, parallel_fwdbwd_chunks: false } as const;

/** `client/dynamic_config`: cancellation of sampling futures is not offered. */
export const CLIENT_DYNAMIC_CONFIG = { refresh_interval_sec: 300, sample_cancel_enabled: false } as const;
