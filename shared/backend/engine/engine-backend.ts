import { InfrastructureError } from '../../base/errors.js';
import { sha256Hex } from '../../base/ids.js';
import { logger } from '../../base/logger.js';
import type {
  AdamParams,
  Backend,
  BackendState,
  BlobFile,
  CreateModelInput,
  FileBlobs,
  ForwardBackwardInput,
  ForwardBackwardResult,
  GeneratedSequence,
  OptimStepResult,
  PassItem,
  PassOutcome,
  PromptAltTokens,
  SampleOptions,
  SampleRequest,
  SampleRun,
  SamplerModel,
  StepOutcome,
  TopkRows,
  WeightsKind,
} from '../backend.js';
import type { Tensor } from '../tensor.js';
import { type EngineHello, type EngineProcess, engineError } from './engine-process.js';
import { EngineProtocolError, type FrameBuilder, type WireTensor } from './frame.js';

/**
 * The `Backend` interface over an engine process (docs/engine-protocol.md, G1): states and samplers
 * are handles the engine issued, tensors cross as buffers (G2), and every fault of the process is an
 * `InfrastructureError` of the call (the work item is re-planned, E6).
 *
 * Handles: a state handle is consumed by the operations that change the state, so the old one is
 * forgotten when its answer names the new one; handles the worker drops without consuming (the last
 * state of a failed work item) are released once more than `maxLiveStates` are held, least recently
 * used first.
 *
 * Resident reuse between work items (G3): `serializeState` remembers, by the SHA-256 of the bytes it
 * returned, the handle they were serialized from. `deserializeState` of exactly those bytes takes that
 * handle instead of loading them into the engine again. The worker hands it the bytes its fenced
 * `base_state_ref` names (from its StateCache when this process committed them, shared/services/worker/state-cache.ts,
 * else from S3), so a handle is reused only when the state the row commits to is byte for byte the one
 * the handle holds; any other bytes (another run's, another process's) are loaded as they are. A hit
 * removes the entry: one work item owns a handle, and a duplicate delivery of it loads its own copy.
 *
 * Samplers are kept by base model and weights digest (up to `maxSamplers`, least recently used out), so
 * a sampler checkpoint stays loaded across work items.
 *
 * Blobs as files (`fileBlobs`): when the engine's `hello` lists `blob_files`, states and weights go
 * through files the worker names instead of the pipe; the engine answers each written file's size and
 * SHA-256, which keys the resident states and samplers as the bytes' digest does.
 */

export const ENGINE_STATE_KIND = 'engine';
/** `hello`'s feature naming the `path` forms of the blob ops (docs/engine-protocol.md#blobs-as-files). */
export const BLOB_FILES_FEATURE = 'blob_files';
export const ENGINE_SAMPLER_KIND = 'engine-sampler';

export interface EngineState extends BackendState {
  readonly kind: typeof ENGINE_STATE_KIND;
  readonly handle: string;
  /** The engine process run that issued the handle (EngineProcess.run). */
  readonly run: number;
}

export interface EngineSampler extends SamplerModel {
  readonly kind: typeof ENGINE_SAMPLER_KIND;
  readonly handle: string;
  readonly run: number;
}

export interface EngineBackendOptions {
  /** State handles kept before the least recently used is released (default 64). */
  readonly maxLiveStates?: number;
  /** Resident states remembered for reuse (default 16). */
  readonly maxResidentStates?: number;
  /** Samplers kept loaded (default 8). */
  readonly maxSamplers?: number;
}

interface SamplerEntry {
  readonly sampler: Promise<EngineSampler>;
  /** Set once loaded; an entry still loading is never evicted. */
  handle?: string;
}

export class EngineBackend implements Backend {
  readonly name: string;
  readonly #engine: EngineProcess;
  readonly #maxLiveStates: number;
  readonly #maxResidentStates: number;
  readonly #maxSamplers: number;
  /** The run the maps below belong to; all are emptied when the engine restarts. */
  #run = 0;
  /** Live state handles, least recently used first. */
  readonly #live = new Map<string, EngineState>();
  /** Serialized states by the digest of their bytes (see the header). */
  readonly #resident = new Map<string, EngineState>();
  readonly #samplers = new Map<string, SamplerEntry>();
  /** Samples running per sampler handle: a sampler in use is not evicted. */
  readonly #samplerUsers = new Map<string, number>();
  /** How often a deserialized state was a resident handle, and how often it was loaded. */
  readonly reuse = { resident: 0, loaded: 0 };

  constructor(engine: EngineProcess, options: EngineBackendOptions & { readonly name?: string } = {}) {
    this.#engine = engine;
    this.name = options.name ?? 'engine';
    this.#maxLiveStates = options.maxLiveStates ?? 64;
    this.#maxResidentStates = options.maxResidentStates ?? 16;
    this.#maxSamplers = options.maxSamplers ?? 8;
  }

  /** Starts the engine (hello); the worker calls it before polling so a bad engine fails at start. */
  start(): Promise<EngineHello> {
    return this.#engine.start();
  }

  ping(): Promise<void> {
    return this.#engine.ping();
  }

  stop(): Promise<void> {
    return this.#engine.stop();
  }

  async createModel(input: CreateModelInput): Promise<BackendState> {
    const lora = input.lora_config;
    const { result, run } = await this.#engine.call('create_model', () => ({
      base_model: input.base_model,
      lora_config: {
        rank: lora.rank,
        seed: lora.seed ?? null,
        train_attn: lora.train_attn ?? true,
        train_mlp: lora.train_mlp ?? true,
        train_unembed: lora.train_unembed ?? true,
      },
    }));
    return this.#issued(result.state, run);
  }

  async forward(state: BackendState, input: ForwardBackwardInput): Promise<ForwardBackwardResult> {
    const held = this.#use(state);
    const { result } = await this.#engine.call(
      'forward',
      (frame) => ({ state: held.handle, input: encodeInput(frame, input) }),
      { run: held.run },
    );
    return passResult(result.result);
  }

  async forwardBackward(
    state: BackendState,
    input: ForwardBackwardInput,
  ): Promise<StepOutcome<ForwardBackwardResult>> {
    const held = this.#use(state);
    const { result, run } = await this.#engine.call(
      'forward_backward',
      (frame) => ({ state: held.handle, input: encodeInput(frame, input) }),
      { run: held.run },
    );
    this.#consumed(held);
    return { state: this.#issued(result.state, run), result: passResult(result.result) };
  }

  async runPasses(items: readonly PassItem[]): Promise<PassOutcome[]> {
    if (items.length === 0) return [];
    const held = items.map((item) => this.#use(item.state));
    const run = (held[0] as EngineState).run;
    if (held.some((state) => state.run !== run)) {
      throw new InfrastructureError('states of one pass batch come from different engine runs');
    }
    const answer = await this.#engine.call(
      'run_passes',
      (frame) => ({
        items: items.map((item, index) => ({
          type: item.type,
          state: (held[index] as EngineState).handle,
          input: encodeInput(frame, item.input),
        })),
      }),
      { run },
    );
    const outcomes = answer.result.outcomes;
    if (!Array.isArray(outcomes) || outcomes.length !== items.length) {
      throw new EngineProtocolError(`run_passes answered ${describe(outcomes)} for ${items.length} items`);
    }
    return outcomes.map((raw, index): PassOutcome => {
      const outcome = raw as { ok?: unknown; state?: unknown; result?: unknown; error?: unknown };
      if (outcome.ok !== true) return { ok: false, error: engineError('run_passes', outcome.error) };
      const before = held[index] as EngineState;
      const after = this.#issued(outcome.state, answer.run);
      if (after.handle !== before.handle) this.#consumed(before);
      return { ok: true, state: after, result: passResult(outcome.result) };
    });
  }

  async optimStep(state: BackendState, params: AdamParams): Promise<StepOutcome<OptimStepResult>> {
    const held = this.#use(state);
    const { result, run } = await this.#engine.call(
      'optim_step',
      () => ({ state: held.handle, params: { ...params } }),
      { run: held.run },
    );
    this.#consumed(held);
    const metrics = (result.result as { metrics?: unknown } | undefined)?.metrics;
    return { state: this.#issued(result.state, run), result: { metrics: numbers(metrics, 'metrics') } };
  }

  async exportWeights(state: BackendState, kind: WeightsKind): Promise<Uint8Array> {
    const held = this.#use(state);
    const { result } = await this.#engine.call('export_weights', () => ({ state: held.handle, kind }), {
      run: held.run,
    });
    return bytesOf(result.weights, 'weights');
  }

  importWeights(
    state: BackendState,
    bytes: Uint8Array,
    options: { optimizer: boolean },
  ): Promise<BackendState> {
    return this.#import(state, (frame) => ({ weights: frame.bytes(bytes), optimizer: options.optimizer }));
  }

  async #import(
    state: BackendState,
    args: (frame: FrameBuilder) => Record<string, unknown>,
  ): Promise<BackendState> {
    const held = this.#use(state);
    const { result, run } = await this.#engine.call(
      'import_weights',
      (frame) => ({ state: held.handle, ...args(frame) }),
      { run: held.run },
    );
    this.#consumed(held);
    return this.#issued(result.state, run);
  }

  loadSampler(baseModel: string, weights: Uint8Array | null): Promise<SamplerModel> {
    return this.#loadSampler(baseModel, weights === null ? 'base' : sha256Hex(weights), (frame) => ({
      base_model: baseModel,
      weights: weights === null ? null : frame.bytes(weights),
    }));
  }

  /** Loads a sampler once per base model and weights digest (`digest`; 'base' for none). */
  async #loadSampler(
    baseModel: string,
    digest: string,
    args: (frame: FrameBuilder) => Record<string, unknown>,
  ): Promise<SamplerModel> {
    const key = `${baseModel}\u0000${digest}`;
    const kept = this.#samplers.get(key);
    if (kept !== undefined) {
      const sampler = await kept.sampler.catch(() => undefined);
      if (sampler !== undefined && sampler.run === this.#engine.run) {
        this.#samplers.delete(key);
        this.#samplers.set(key, kept);
        return sampler;
      }
      if (this.#samplers.get(key) === kept) this.#samplers.delete(key);
    }
    const loading = this.#engine.call('load_sampler', args).then(({ result, run }): EngineSampler => {
      this.#noteRun(run);
      const handle = handleOf(result.sampler);
      entry.handle = handle;
      return { kind: ENGINE_SAMPLER_KIND, base_model: baseModel, handle, run };
    });
    const entry: SamplerEntry = { sampler: loading };
    this.#samplers.set(key, entry);
    loading.catch(() => {
      if (this.#samplers.get(key) === entry) this.#samplers.delete(key);
    });
    this.#evictSamplers();
    return loading;
  }

  async sample(
    sampler: SamplerModel,
    request: SampleRequest,
    options: SampleOptions = {},
  ): Promise<SampleRun> {
    const held = asEngineSampler(sampler);
    this.#samplerUsers.set(held.handle, (this.#samplerUsers.get(held.handle) ?? 0) + 1);
    try {
      const { result } = await this.#engine.stoppableCall(
        'sample',
        (frame) => ({
          sampler: held.handle,
          request: {
            ...request,
            prompt: {
              chunks: request.prompt.chunks.map((chunk) => ({
                type: chunk.type,
                tokens: frame.tokens(chunk.tokens),
              })),
            },
            // Ids, one per cell of [prompt - 1, K]: a tensor like every other (G2).
            ...(request.target_prompt_logprobs === undefined
              ? {}
              : {
                  target_prompt_logprobs: frame.tensor({
                    dtype: 'int32',
                    data: Int32Array.from(request.target_prompt_logprobs.data),
                    shape: [...request.target_prompt_logprobs.shape],
                  }),
                }),
          },
          resume: (options.resume ?? []).map((prefix) =>
            prefix == null
              ? null
              : {
                  tokens: frame.tokens(Int32Array.from(prefix.tokens)),
                  logprobs: frame.tensor({
                    dtype: 'float32',
                    data: Float32Array.from(prefix.logprobs),
                    shape: [prefix.logprobs.length],
                  }),
                },
          ),
          max_new_tokens: options.maxNewTokens ?? null,
          ...(options.continuation === undefined ? {} : { continuation: options.continuation }),
        }),
        { run: held.run, ...(options.stop === undefined ? {} : { stop: options.stop }) },
      );
      return sampleRun(result);
    } finally {
      const users = (this.#samplerUsers.get(held.handle) ?? 1) - 1;
      if (users === 0) this.#samplerUsers.delete(held.handle);
      else this.#samplerUsers.set(held.handle, users);
    }
  }

  /** A version 2 engine decodes concurrent calls together and stops them on request (B1). */
  async batchesSamples(): Promise<boolean> {
    const hello = await this.#engine.start();
    return hello.protocol_version >= 2;
  }

  async serializeState(state: BackendState): Promise<Uint8Array> {
    const held = this.#use(state);
    const { result } = await this.#engine.call('serialize_state', () => ({ state: held.handle }), {
      run: held.run,
    });
    const bytes = bytesOf(result.bytes, 'bytes');
    this.#remember(held, sha256Hex(bytes));
    return bytes;
  }

  deserializeState(bytes: Uint8Array): Promise<BackendState> {
    return this.#deserialize(sha256Hex(bytes), (frame) => ({ bytes: frame.bytes(bytes) }));
  }

  /** The `path` forms, when the engine speaks them (its `hello` lists BLOB_FILES_FEATURE). */
  async fileBlobs(): Promise<FileBlobs | undefined> {
    // A started engine's answer is known: asking again would queue behind the request in flight.
    const hello = this.#engine.lastHello ?? (await this.#engine.start());
    return hello.features?.includes(BLOB_FILES_FEATURE) === true ? this.#files : undefined;
  }

  readonly #files: FileBlobs = {
    serializeStateTo: async (state, path) => {
      const held = this.#use(state);
      const { result } = await this.#engine.call('serialize_state', () => ({ state: held.handle, path }), {
        run: held.run,
      });
      const file = blobFileOf(result);
      this.#remember(held, file.sha256);
      return file;
    },
    deserializeStateFrom: (path, file) => this.#deserialize(file.sha256, () => ({ path })),
    exportWeightsTo: async (state, kind, path) => {
      const held = this.#use(state);
      const { result } = await this.#engine.call(
        'export_weights',
        () => ({ state: held.handle, kind, path }),
        { run: held.run },
      );
      return blobFileOf(result);
    },
    importWeightsFrom: (state, path, options) =>
      this.#import(state, () => ({ path, optimizer: options.optimizer })),
    loadSamplerFrom: (baseModel, path, file) =>
      this.#loadSampler(baseModel, file.sha256, () => ({ base_model: baseModel, weights: null, path })),
  };

  /** A serialized state's handle, kept for reuse by the digest of what it was serialized to. */
  #remember(held: EngineState, digest: string): void {
    if (!this.#live.has(held.handle)) return;
    this.#resident.set(digest, held);
    for (const [oldest] of this.#resident) {
      if (this.#resident.size <= this.#maxResidentStates) break;
      this.#resident.delete(oldest);
    }
  }

  async #deserialize(
    digest: string,
    args: (frame: FrameBuilder) => Record<string, unknown>,
  ): Promise<BackendState> {
    const resident = this.#resident.get(digest);
    if (resident !== undefined) {
      this.#resident.delete(digest);
      if (resident.run === this.#engine.run && this.#live.has(resident.handle)) {
        this.reuse.resident += 1;
        this.#touch(resident);
        return resident;
      }
    }
    this.reuse.loaded += 1;
    const { result, run } = await this.#engine.call('deserialize_state', args);
    return this.#issued(result.state, run);
  }

  holds(state: BackendState): boolean {
    if (state.kind !== ENGINE_STATE_KIND) return false;
    const held = state as EngineState;
    return held.run === this.#engine.run && this.#live.has(held.handle);
  }

  release(state: BackendState): void {
    if (!this.holds(state)) return;
    const held = state as EngineState;
    this.#consumed(held);
    this.#release([held.handle], held.run);
  }

  /** Live state handles held (for tests and logs). */
  get liveStates(): number {
    return this.#live.size;
  }

  #evictSamplers(): void {
    if (this.#samplers.size <= this.#maxSamplers) return;
    for (const [key, entry] of this.#samplers) {
      if (this.#samplers.size <= this.#maxSamplers) break;
      if (entry.handle === undefined || this.#samplerUsers.has(entry.handle)) continue;
      this.#samplers.delete(key);
      void entry.sampler.then(
        (sampler) => this.#release([sampler.handle], sampler.run),
        () => undefined,
      );
    }
  }

  /** A state the worker passes in: ours, and from the engine's current run (else it is gone). */
  #use(state: BackendState): EngineState {
    const held = asEngineState(state);
    if (held.run !== this.#engine.run) {
      throw new InfrastructureError(
        `engine state ${held.handle} is from engine run ${held.run}; the engine restarted (run ${this.#engine.run})`,
      );
    }
    this.#touch(held);
    return held;
  }

  #touch(state: EngineState): void {
    if (!this.#live.delete(state.handle)) return;
    this.#live.set(state.handle, state);
  }

  #consumed(state: EngineState): void {
    this.#live.delete(state.handle);
    for (const [digest, resident] of this.#resident) {
      if (resident.handle === state.handle) this.#resident.delete(digest);
    }
  }

  /** A state a result names: remembered as live; the oldest live handles past the bound are released. */
  #issued(raw: unknown, run: number): EngineState {
    this.#noteRun(run);
    const state = stateOf(raw, run);
    this.#live.set(state.handle, state);
    if (this.#live.size > this.#maxLiveStates) {
      const dropped: string[] = [];
      for (const [handle, old] of this.#live) {
        if (this.#live.size <= this.#maxLiveStates) break;
        this.#live.delete(handle);
        this.#consumed(old);
        dropped.push(handle);
      }
      this.#release(dropped, run);
    }
    return state;
  }

  /** An answer from a new engine run: what the maps held belonged to the old process. */
  #noteRun(run: number): void {
    if (run === this.#run) return;
    this.#run = run;
    this.#live.clear();
    this.#resident.clear();
    for (const [key, entry] of this.#samplers) {
      void entry.sampler.then(
        (sampler) => {
          if (sampler.run !== run && this.#samplers.get(key) === entry) this.#samplers.delete(key);
        },
        () => undefined,
      );
    }
  }

  #release(handles: readonly string[], run: number): void {
    if (handles.length === 0) return;
    this.#engine
      .call('release', () => ({ handles }), { run })
      .catch((error: unknown) =>
        logger.warn('engine release failed', {
          error: error instanceof Error ? error.message : String(error),
        }),
      );
  }
}

function asEngineState(state: BackendState): EngineState {
  if (state.kind !== ENGINE_STATE_KIND) {
    throw new InfrastructureError(`engine backend got a state of kind ${state.kind}`);
  }
  return state as EngineState;
}

function asEngineSampler(sampler: SamplerModel): EngineSampler {
  if (sampler.kind !== ENGINE_SAMPLER_KIND) {
    throw new InfrastructureError(`engine backend got a sampler of kind ${sampler.kind}`);
  }
  return sampler as EngineSampler;
}

function describe(value: unknown): string {
  return Array.isArray(value) ? `${value.length} outcomes` : typeof value;
}

function handleOf(raw: unknown): string {
  if (typeof raw !== 'string' || raw === '')
    throw new EngineProtocolError('engine answered without a handle');
  return raw;
}

function stateOf(raw: unknown, run: number): EngineState {
  const state = raw as { handle?: unknown; base_model?: unknown; weights_version?: unknown } | undefined;
  if (typeof state?.base_model !== 'string' || !Number.isSafeInteger(state.weights_version)) {
    throw new EngineProtocolError('engine answered a state without base_model and weights_version');
  }
  return {
    kind: ENGINE_STATE_KIND,
    handle: handleOf(state.handle),
    base_model: state.base_model,
    weights_version: state.weights_version as number,
    run,
  };
}

function blobFileOf(raw: Record<string, unknown>): BlobFile {
  const { size, sha256 } = raw;
  if (!Number.isSafeInteger(size) || typeof sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(sha256)) {
    throw new EngineProtocolError('engine answered a file blob without its size and sha256');
  }
  return { size: size as number, sha256 };
}

function bytesOf(raw: unknown, field: string): Uint8Array {
  if (!(raw instanceof Uint8Array))
    throw new EngineProtocolError(`engine answered ${field} that is not $bytes`);
  return raw;
}

function numbers(raw: unknown, field: string): Record<string, number> {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new EngineProtocolError(`engine answered ${field} that is not an object of numbers`);
  }
  const out: Record<string, number> = {};
  for (const [key, value] of Object.entries(raw)) {
    if (typeof value !== 'number')
      throw new EngineProtocolError(`engine answered ${field}.${key} = ${String(value)}`);
    out[key] = value;
  }
  return out;
}

function isWireTensor(raw: unknown): raw is WireTensor {
  return (
    typeof raw === 'object' &&
    raw !== null &&
    'dtype' in raw &&
    'data' in raw &&
    ArrayBuffer.isView((raw as { data: unknown }).data)
  );
}

/** An engine's output tensor in the project's types: int32 outputs widen to int64. */
function toTensor(raw: unknown, field: string): Tensor {
  if (!isWireTensor(raw)) throw new EngineProtocolError(`engine answered ${field} that is not a $tensor`);
  if (raw.dtype !== 'int32') return raw;
  return { dtype: 'int64', data: BigInt64Array.from(raw.data, (value) => BigInt(value)), shape: raw.shape };
}

function passResult(raw: unknown): ForwardBackwardResult {
  const result = raw as
    | { loss_fn_output_type?: unknown; loss_fn_outputs?: unknown; metrics?: unknown }
    | undefined;
  if (typeof result?.loss_fn_output_type !== 'string' || !Array.isArray(result.loss_fn_outputs)) {
    throw new EngineProtocolError(
      'engine answered a pass result without loss_fn_output_type and loss_fn_outputs',
    );
  }
  return {
    loss_fn_output_type: result.loss_fn_output_type,
    loss_fn_outputs: result.loss_fn_outputs.map((outputs: unknown, index) => {
      const out: Record<string, Tensor> = {};
      for (const [name, tensor] of Object.entries((outputs ?? {}) as Record<string, unknown>)) {
        out[name] = toTensor(tensor, `loss_fn_outputs.${index}.${name}`);
      }
      return out;
    }),
    metrics: numbers(result.metrics, 'metrics'),
  };
}

function numberList(raw: unknown, field: string): number[] {
  if (!isWireTensor(raw)) throw new EngineProtocolError(`engine answered ${field} that is not a $tensor`);
  if (raw.dtype === 'int64') return Array.from(raw.data, (value) => Number(value));
  return Array.from(raw.data as Float32Array | Int32Array);
}

function sampleRun(raw: Record<string, unknown>): SampleRun {
  if (typeof raw.finished !== 'boolean' || !Array.isArray(raw.sequences)) {
    throw new EngineProtocolError('engine answered a sample run without finished and sequences');
  }
  const sequences = raw.sequences.map((item: unknown, index): GeneratedSequence => {
    const sequence = item as {
      stop_reason?: unknown;
      tokens?: unknown;
      logprobs?: unknown;
      topk_logprobs?: unknown;
    };
    const reason = sequence.stop_reason ?? null;
    if (reason !== null && reason !== 'stop' && reason !== 'length') {
      throw new EngineProtocolError(`engine answered sequences.${index}.stop_reason ${String(reason)}`);
    }
    return {
      stop_reason: reason,
      tokens: numberList(sequence.tokens, `sequences.${index}.tokens`),
      logprobs: numberList(sequence.logprobs, `sequences.${index}.logprobs`),
      ...(sequence.topk_logprobs == null ? {} : { topk_logprobs: sequence.topk_logprobs as TopkRows }),
    };
  });
  return {
    finished: raw.finished,
    sequences,
    ...(raw.prompt_logprobs == null ? {} : { prompt_logprobs: raw.prompt_logprobs as (number | null)[] }),
    ...(raw.topk_prompt_logprobs == null
      ? {}
      : { topk_prompt_logprobs: raw.topk_prompt_logprobs as ([number, number][] | null)[] }),
    ...(raw.prompt_alt_tokens == null ? {} : { prompt_alt_tokens: raw.prompt_alt_tokens as PromptAltTokens }),
    ...(raw.target_prompt_logprobs == null
      ? {}
      : { target_prompt_logprobs: raw.target_prompt_logprobs as (number | null)[][] }),
    ...(typeof raw.continuation === 'string' ? { continuation: raw.continuation } : {}),
  };
}

/** A pass input in the protocol's form: token ids and loss inputs as buffers. */
export function encodeInput(frame: FrameBuilder, input: ForwardBackwardInput): Record<string, unknown> {
  return {
    loss_fn: input.loss_fn,
    loss_fn_config: { ...input.loss_fn_config },
    data: input.data.map((datum) => ({
      model_input: {
        chunks: datum.model_input.chunks.map((chunk) => ({
          type: chunk.type,
          tokens: frame.tokens(chunk.tokens),
        })),
      },
      loss_fn_inputs: Object.fromEntries(
        Object.entries(datum.loss_fn_inputs).map(([name, tensor]) => [name, frame.tensor(tensor)]),
      ),
    })),
  };
}
