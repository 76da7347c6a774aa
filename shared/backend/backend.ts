/**
 * The model-execution interface the worker runtime calls, and the request/answer shapes it shares with the
 * Tinker API (docs/api.md#routes). The backend holds no model state between calls: it takes a state,
 * returns a new one, and never mutates its arguments, so the worker can store every state under a fenced
 * key (E3) and a failed step leaves nothing behind (E6).
 *
 * How a GPU engine implements it: `BackendState` is a handle to the adapter's tensors (LoRA weights, Adam
 * moments, gradient accumulator) resident on the device, keyed by model and fenced key; `serializeState`
 * copies them to host memory (safetensors or this project's binary layout) and `deserializeState` loads
 * them back, both only at work-item boundaries. `runPasses` is where fusion pays: the passes of several
 * models run as one multi-LoRA batch over the shared base model (one forward and backward, per-row
 * adapter indices). `sample` calls are issued concurrently and batched by the engine (continuous batching
 * with one adapter slot per sampler checkpoint); randomness must still be keyed by (seed, sample index,
 * position) so a resumed call continues exactly (P6). Results match the reference within a stated
 * tolerance, not bit-exactly (R1).
 *
 * Inputs arrive typed (W4): token ids in Int32Array, loss inputs as dense Float32Array / BigInt64Array
 * tensors with their shape, whichever wire the client spoke (shared/backend/pass-input.ts), so an engine
 * copies them to the device as they are; outputs are typed tensors the worker turns into JSON once.
 */

import type { ForwardBackwardInput, ModelInput } from './pass-input.js';
import type { Tensor } from './tensor.js';

export type { Datum, EncodedTextChunk, ForwardBackwardInput, ModelInput } from './pass-input.js';
export type { Float32Tensor, Int64Tensor, Tensor } from './tensor.js';

/** Per datum, the loss function's outputs by name (`logprobs`, `elementwise_loss`), dense and typed. */
export type LossFnOutput = Record<string, Tensor>;

/** Metric keys read `name:reduction` (the SDK splits on ':' to merge chunked results). */
export type Metrics = Record<string, number>;

export interface ForwardBackwardResult {
  readonly loss_fn_output_type: string;
  readonly loss_fn_outputs: LossFnOutput[];
  readonly metrics: Metrics;
}

/** Tinker's AdamParams; absent fields take Tinker's defaults (1e-4, 0.9, 0.95, 1e-12, 0, 0). */
export interface AdamParams {
  readonly learning_rate?: number;
  readonly beta1?: number;
  readonly beta2?: number;
  readonly eps?: number;
  readonly weight_decay?: number;
  /** 0 means no clipping. */
  readonly grad_clip_norm?: number;
}

export interface OptimStepResult {
  readonly metrics: Metrics;
}

export interface LoraConfigInput {
  readonly rank: number;
  readonly seed?: number | null;
  readonly train_unembed?: boolean;
  readonly train_mlp?: boolean;
  readonly train_attn?: boolean;
}

export interface CreateModelInput {
  readonly base_model: string;
  readonly lora_config: LoraConfigInput;
}

export interface SamplingParams {
  readonly max_tokens?: number | null;
  readonly temperature?: number;
  readonly top_k?: number;
  readonly top_p?: number;
  readonly seed?: number | null;
  /** Token ids (each a one-token stop), token sequences, or strings (backend-specific encoding). */
  readonly stop?: string | readonly string[] | readonly number[] | readonly (readonly number[])[] | null;
}

/**
 * Token ids to score at prompt positions (SDK 0.26+ `target_prompt_logprobs`), dense and row-major:
 * `shape` is [prompt length - 1, K]; cell [i, j] is scored at prompt position i + 1; -1 asks nothing.
 */
export interface TargetPromptIds {
  readonly shape: readonly [number, number];
  readonly data: readonly number[];
}

export interface SampleRequest {
  readonly num_samples?: number;
  readonly prompt: ModelInput;
  readonly sampling_params: SamplingParams;
  readonly prompt_logprobs?: boolean;
  readonly topk_prompt_logprobs?: number;
  /** Top-k (token, logprob) pairs at every generated position (0: none). */
  readonly topk_sample_logprobs?: number;
  /** k independent draws at every prompt position after the first, at the request's temperature. */
  readonly prompt_alt_tokens_k?: number;
  readonly target_prompt_logprobs?: TargetPromptIds;
}

export type StopReason = 'stop' | 'length';

/** Per position, up to k (token, logprob) pairs, most likely first. */
export type TopkRows = [number, number][][];

export interface SampledSequence {
  readonly stop_reason: StopReason;
  readonly tokens: number[];
  readonly logprobs: number[];
  /** With `topk_sample_logprobs` > 0: one row per generated token. */
  readonly topk_logprobs?: TopkRows;
}

/** `prompt_alt_tokens`: both [prompt length - 1][k]; logprobs under the model's own distribution. */
export interface PromptAltTokens {
  readonly tokens: number[][];
  readonly logprobs: number[][];
}

/** Sampling outputs a request may add beyond the sequences (SDK 0.26+), the same in run and result. */
export interface SampleExtras {
  readonly prompt_alt_tokens?: PromptAltTokens;
  /** [prompt length - 1][K], the logprob of each asked id; null where the id was -1. */
  readonly target_prompt_logprobs?: (number | null)[][];
}

/** The Tinker SampleResponse. */
export interface SampleResult extends SampleExtras {
  readonly type: 'sample';
  readonly sequences: SampledSequence[];
  readonly prompt_logprobs?: (number | null)[];
  readonly topk_prompt_logprobs?: ([number, number][] | null)[];
}

/** Tokens generated so far for one sequence; what the prefix store saves at a cut and restores (P5, P6). */
export interface SequencePrefix {
  readonly tokens: readonly number[];
  readonly logprobs: readonly number[];
}

/** A sequence that may still be unfinished (`stop_reason: null`) because the call was cut. */
export interface GeneratedSequence {
  readonly stop_reason: StopReason | null;
  readonly tokens: number[];
  readonly logprobs: number[];
  /** Recomputed for restored tokens too, so a resumed run answers what an uncut one does (P6). */
  readonly topk_logprobs?: TopkRows;
}

export interface SampleRun extends SampleExtras {
  /** True when every sequence has a stop reason; then `toSampleResult` gives the client's answer. */
  readonly finished: boolean;
  readonly sequences: GeneratedSequence[];
  readonly prompt_logprobs?: (number | null)[];
  readonly topk_prompt_logprobs?: ([number, number][] | null)[];
  /**
   * An unfinished run whose backend kept its live generation state: the key to pass as the next
   * slice's `SampleOptions.continuation` (docs/engine-protocol.md, "Live sample continuation").
   */
  readonly continuation?: string;
}

export interface SampleOptions {
  /** Restored prefixes by sample index; an absent entry starts that sequence from the beginning. */
  readonly resume?: readonly (SequencePrefix | null | undefined)[];
  /**
   * Generate at most this many new tokens per sequence in this call (a cut); unfinished sequences come
   * back with `stop_reason: null` and are resumed later from their tokens. Absent: run to completion.
   */
  readonly maxNewTokens?: number;
  /**
   * The previous slice's `SampleRun.continuation`, with `resume` being that run's sequences: the
   * backend may continue its kept state instead of replaying them; the answer is the same either way.
   */
  readonly continuation?: string;
  /**
   * Ends the call early (a cut or a cancel) where the backend `batchesSamples`: it answers at its next
   * decode step with the sequences so far (`finished` false), resumable like a slice's end.
   */
  readonly stop?: AbortSignal;
}

/** What every backend's state exposes; the rest is backend-private. */
export interface BackendState {
  /** Which backend (and layout) produced the state. */
  readonly kind: string;
  readonly base_model: string;
  /** Optimizer steps applied to this model so far (reported as `weights_version:max`). */
  readonly weights_version: number;
}

/** A loaded sampler checkpoint (or the bare base model). Opaque outside its backend. */
export interface SamplerModel {
  readonly kind: string;
  readonly base_model: string;
}

export type PassType = 'forward' | 'forward_backward';

export interface PassItem {
  readonly type: PassType;
  readonly state: BackendState;
  readonly input: ForwardBackwardInput;
}

/** One pass's outcome in a fused batch: a user error fails only its own item (E6). */
export type PassOutcome =
  | { readonly ok: true; readonly state: BackendState; readonly result: ForwardBackwardResult }
  | { readonly ok: false; readonly error: Error };

export interface StepOutcome<R> {
  readonly state: BackendState;
  readonly result: R;
}

/** `training` holds weights and optimizer state (save_weights); `sampler` holds weights only. */
export type WeightsKind = 'training' | 'sampler';

/**
 * Errors: bad input found at execution throws `StepUserError` (shared/base/errors.ts) naming the field, with
 * no effect; bytes that are not a valid blob of this backend throw `InfrastructureError`.
 */
export interface Backend {
  readonly name: string;
  createModel(input: CreateModelInput): Promise<BackendState>;
  /** Loss and logprobs without touching the gradient accumulator. */
  forward(state: BackendState, input: ForwardBackwardInput): Promise<ForwardBackwardResult>;
  /** Loss and logprobs; adds this call's gradient to the accumulator. */
  forwardBackward(
    state: BackendState,
    input: ForwardBackwardInput,
  ): Promise<StepOutcome<ForwardBackwardResult>>;
  /** Passes of several models in one call (at most one pass per model; chain same-model passes yourself). */
  runPasses(items: readonly PassItem[]): Promise<PassOutcome[]>;
  /** Applies the accumulated gradient, bumps `weights_version`, zeroes the accumulator. */
  optimStep(state: BackendState, params: AdamParams): Promise<StepOutcome<OptimStepResult>>;
  exportWeights(state: BackendState, kind: WeightsKind): Promise<Uint8Array>;
  /** load_weights: adapter weights, plus Adam moments and step when `optimizer` (else they reset). */
  importWeights(
    state: BackendState,
    bytes: Uint8Array,
    options: { optimizer: boolean },
  ): Promise<BackendState>;
  /** `weights` from `exportWeights(..., 'sampler')`, or null to sample the base model. */
  loadSampler(baseModel: string, weights: Uint8Array | null): Promise<SamplerModel>;
  sample(sampler: SamplerModel, request: SampleRequest, options?: SampleOptions): Promise<SampleRun>;
  /**
   * True when concurrent `sample` calls share the backend's decode steps (B1) and honour
   * `SampleOptions.stop`: the worker then issues each call whole instead of in slices. Absent: false.
   */
  batchesSamples?(): Promise<boolean>;
  serializeState(state: BackendState): Promise<Uint8Array>;
  deserializeState(bytes: Uint8Array): Promise<BackendState>;
  /**
   * Whether a state this backend issued can still be used (an engine restarted or released it: no).
   * Absent: always, as for a backend whose states are plain values.
   */
  holds?(state: BackendState): boolean;
  /** Frees a state the worker keeps no longer (a resident model let go, S1). Absent: nothing to free. */
  release?(state: BackendState): void;
  /**
   * Blobs through files on this host instead of bytes in this process (S3: a state or checkpoint of
   * any size is written and read streamed, shared/services/worker/state-blobs.ts). Answers undefined
   * when this backend (or its engine, docs/engine-protocol.md#blobs-as-files) has none; then the worker
   * uses the bytes methods above. Absent: none.
   */
  fileBlobs?(): Promise<FileBlobs | undefined>;
}

/** A blob a backend wrote to a file: its length and SHA-256 (hex), the digest `sha256Hex` of its bytes. */
export interface BlobFile {
  readonly size: number;
  readonly sha256: string;
}

/**
 * The file forms of the blob methods of `Backend`: the same blobs, byte for byte, written to or read
 * from `path` (absolute, on this host). Errors as the bytes forms'.
 */
export interface FileBlobs {
  serializeStateTo(state: BackendState, path: string): Promise<BlobFile>;
  /** `file`: the file's size and digest as written (a resident state may be taken by its digest). */
  deserializeStateFrom(path: string, file: BlobFile): Promise<BackendState>;
  exportWeightsTo(state: BackendState, kind: WeightsKind, path: string): Promise<BlobFile>;
  importWeightsFrom(
    state: BackendState,
    path: string,
    options: { optimizer: boolean },
  ): Promise<BackendState>;
  loadSamplerFrom(baseModel: string, path: string, file: BlobFile): Promise<SamplerModel>;
}

/** The client's answer for a finished run. Throws if any sequence is still unfinished. */
export function toSampleResult(run: SampleRun): SampleResult {
  const sequences = run.sequences.map((sequence, index) => {
    if (sequence.stop_reason === null) throw new Error(`sequence ${index} is unfinished`);
    return {
      stop_reason: sequence.stop_reason,
      tokens: sequence.tokens,
      logprobs: sequence.logprobs,
      ...(sequence.topk_logprobs ? { topk_logprobs: sequence.topk_logprobs } : {}),
    };
  });
  return {
    type: 'sample',
    sequences,
    ...(run.prompt_logprobs ? { prompt_logprobs: run.prompt_logprobs } : {}),
    ...(run.topk_prompt_logprobs ? { topk_prompt_logprobs: run.topk_prompt_logprobs } : {}),
    ...(run.prompt_alt_tokens ? { prompt_alt_tokens: run.prompt_alt_tokens } : {}),
    ...(run.target_prompt_logprobs ? { target_prompt_logprobs: run.target_prompt_logprobs } : {}),
  };
}
