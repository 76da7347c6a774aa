import type { CheckpointKind, LoraConfig } from '../../domain/records.js';
import type { ForwardBackwardInputBody, ModelInputBody, SampleRequestBody } from './schemas.js';

/**
 * What the API stores in S3 for each request (`storageKeys.payload(request_id)`), read by the
 * scheduler and the worker. Every member is derived from the validated request, its idempotency key
 * and immutable records, never from the request id or the clock: a retried request must serialize
 * to the same bytes so the digest identifies it (R7). The worker takes `request_id`, `model_id` and
 * `seq` from the future row, and a checkpoint's content id from `checkpointContentId(request_id)`.
 */

/** A checkpoint name record a step writes (save) or reads (load, sample). */
export interface CheckpointRef {
  /** Registry key of the checkpoint name record (`registryKey.checkpointName`). */
  readonly pk: string;
  readonly model_id: string;
  readonly kind: CheckpointKind;
  readonly name: string;
  readonly path: string;
}

export interface CreateModelPayload {
  readonly request_type: 'create_model';
  readonly session_id: string;
  readonly base_model: string;
  readonly lora_config: LoraConfig & {
    readonly train_unembed: boolean;
    readonly train_mlp: boolean;
    readonly train_attn: boolean;
  };
  readonly user_metadata?: Readonly<Record<string, unknown>>;
}

export interface PassPayload {
  readonly request_type: 'forward' | 'forward_backward';
  readonly seq_id: number;
  readonly input: ForwardBackwardInputBody;
}

export interface OptimStepPayload {
  readonly request_type: 'optim_step';
  readonly seq_id: number;
  readonly adam_params: {
    readonly learning_rate: number;
    readonly beta1: number;
    readonly beta2: number;
    readonly eps: number;
    readonly weight_decay: number;
    readonly grad_clip_norm: number;
  };
}

export interface SaveWeightsPayload {
  readonly request_type: 'save_weights';
  readonly seq_id: number;
  /** Reserved (status pending) at intake; the commit fills it in (E4). */
  readonly checkpoint: CheckpointRef;
  /** The commit sets `expires_at` = its time + this (C5); absent = never expires. */
  readonly ttl_seconds?: number;
  /** Kept on the name record at intake; here so a retry with other metadata is a different request (R7). */
  readonly user_metadata?: Readonly<Record<string, string>>;
}

export interface SaveWeightsForSamplerPayload {
  readonly request_type: 'save_weights_for_sampler';
  readonly seq_id: number;
  readonly checkpoint: CheckpointRef;
  readonly ttl_seconds?: number;
  /** Named saves only; as save_weights'. */
  readonly user_metadata?: Readonly<Record<string, string>>;
  /**
   * Unnamed saves only (`sampling_session_seq_id`): the sampling session the commit creates
   * (`registryKey.samplingSession(id)`, a `SamplingSessionRecord`); its id is the checkpoint's name.
   * The result is then `{path, sampling_session_id}`.
   */
  readonly sampling_session?: {
    readonly sampling_session_id: string;
    readonly session_id: string;
    readonly sampling_session_seq_id: number;
    readonly base_model: string;
  };
}

export interface LoadWeightsPayload {
  readonly request_type: 'load_weights';
  readonly seq_id: number;
  /** May still be pending at intake when an earlier step of the sequence saves it. */
  readonly checkpoint: CheckpointRef & { readonly content_id: string };
  readonly optimizer: boolean;
}

export interface UnloadModelPayload {
  readonly request_type: 'unload_model';
}

export interface SamplePayload {
  readonly request_type: 'sample';
  readonly sampling_session_id: string;
  readonly seq_id: number;
  readonly base_model: string;
  /** The sampler checkpoint (committed); absent when sampling the bare base model. */
  readonly checkpoint?: { readonly model_id: string; readonly content_id: string; readonly path?: string };
  readonly num_samples: number;
  readonly prompt: ModelInputBody;
  /** `seed` is always set: the client's, or one derived from (sampling session, seq_id) (P6). */
  readonly sampling_params: SampleRequestBody['sampling_params'] & { readonly seed: number };
  readonly prompt_logprobs: boolean;
  readonly topk_prompt_logprobs: number;
  /** SDK 0.26+ outputs (W8); absent when not asked, so older payloads read the same. */
  readonly topk_sample_logprobs?: number;
  readonly prompt_alt_tokens_k?: number;
  /** Dense [prompt tokens - 1, K] ids, -1 where nothing is asked (sparse input made dense at intake). */
  readonly target_prompt_logprobs?: { readonly shape: [number, number]; readonly data: number[] };
}

export type StoredPayload =
  | CreateModelPayload
  | PassPayload
  | OptimStepPayload
  | SaveWeightsPayload
  | SaveWeightsForSamplerPayload
  | LoadWeightsPayload
  | UnloadModelPayload
  | SamplePayload;
