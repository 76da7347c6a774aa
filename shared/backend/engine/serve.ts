import { StepUserError } from '../../base/errors.js';
import type {
  Backend,
  BackendState,
  Datum,
  ForwardBackwardInput,
  ForwardBackwardResult,
  ModelInput,
  PassItem,
  SampleRequest,
  SampleRun,
  SamplerModel,
  SequencePrefix,
} from '../backend.js';
import type { Tensor } from '../tensor.js';
import type { EngineBaseModel } from './engine-process.js';
import {
  EngineProtocolError,
  encodeFrame,
  type Frame,
  FrameBuilder,
  FrameReader,
  resolveBuffers,
  type WireTensor,
} from './frame.js';

/**
 * The engine side of the protocol (docs/engine-protocol.md) over any TypeScript `Backend`: handles in,
 * handles out, one request at a time. It makes the reference backend an engine process, which the
 * protocol's own tests and the worker's crash tests drive exactly as they drive the torch engine; a
 * Python (or any other) engine implements the same messages itself.
 */

export interface ServeOptions {
  readonly engine: { readonly name: string; readonly version: string };
  readonly baseModels: readonly EngineBaseModel[];
  readonly device?: string;
  readonly dtype?: string;
  /** The protocol versions spoken (default [1]; tests offer others to check the handshake). */
  readonly protocolVersions?: readonly number[];
  /** Called before each request runs (tests stall or crash the engine here). */
  readonly beforeRequest?: (op: string) => Promise<void> | void;
}

class UnknownHandleError extends EngineProtocolError {}

/** Serves requests from `input` until `shutdown` or the end of input; answers go to `write`. */
export async function serveEngine(
  backend: Backend,
  input: AsyncIterable<Uint8Array>,
  write: (chunk: Uint8Array) => void,
  options: ServeOptions,
): Promise<void> {
  const server = new EngineServer(backend, options);
  const reader = new FrameReader();
  for await (const chunk of input) {
    for (const frame of reader.push(chunk)) {
      const { header, buffers, stop } = await server.answer(frame);
      for (const part of encodeFrame(header, buffers)) write(part);
      if (stop) return;
    }
  }
}

class EngineServer {
  readonly #states = new Map<string, BackendState>();
  readonly #samplers = new Map<string, SamplerModel>();
  #next = 1;

  constructor(
    private readonly backend: Backend,
    private readonly options: ServeOptions,
  ) {}

  async answer(
    frame: Frame,
  ): Promise<{ header: Record<string, unknown>; buffers: readonly Uint8Array[]; stop: boolean }> {
    const id = frame.header.id;
    const op = String(frame.header.op);
    const out = new FrameBuilder();
    try {
      await this.options.beforeRequest?.(op);
      const args = resolveBuffers(frame.header.args ?? {}, frame.buffers) as Record<string, unknown>;
      const result = await this.#run(op, args, out);
      return { header: { id, ok: true, result }, buffers: out.buffers, stop: op === 'shutdown' };
    } catch (error) {
      return { header: { id, ok: false, error: errorBody(error) }, buffers: [], stop: false };
    }
  }

  async #run(op: string, args: Record<string, unknown>, out: FrameBuilder): Promise<Record<string, unknown>> {
    const b = this.backend;
    switch (op) {
      case 'hello': {
        const spoken = this.options.protocolVersions ?? [1];
        if (!spoken.includes(args.protocol_version as number)) {
          throw new EngineProtocolError(
            `protocol_version ${String(args.protocol_version)} is not spoken; this engine speaks ${spoken.join(', ')}`,
          );
        }
        return {
          protocol_version: args.protocol_version,
          engine: this.options.engine,
          base_models: this.options.baseModels,
          device: this.options.device ?? 'cpu',
          dtype: this.options.dtype ?? 'float64',
        };
      }
      case 'ping':
      case 'shutdown':
        return {};
      case 'create_model':
        return { state: this.#issue(await b.createModel(args as never)) };
      case 'forward':
        return { result: encodeResult(out, await b.forward(this.#state(args.state), passInput(args.input))) };
      case 'forward_backward': {
        const outcome = await b.forwardBackward(this.#state(args.state), passInput(args.input));
        this.#states.delete(String(args.state));
        return { state: this.#issue(outcome.state), result: encodeResult(out, outcome.result) };
      }
      case 'run_passes': {
        const items = (args.items as { type: PassItem['type']; state: string; input: unknown }[]).map(
          (item): PassItem => ({
            type: item.type,
            state: this.#state(item.state),
            input: passInput(item.input),
          }),
        );
        const outcomes = await b.runPasses(items);
        return {
          outcomes: outcomes.map((outcome, index) => {
            if (!outcome.ok) return { ok: false, error: errorBody(outcome.error) };
            const before = (args.items as { state: string }[])[index]?.state as string;
            const changed = outcome.state !== this.#states.get(before);
            if (changed) this.#states.delete(before);
            return {
              ok: true,
              state: changed ? this.#issue(outcome.state) : stateBody(before, outcome.state),
              result: encodeResult(out, outcome.result),
            };
          }),
        };
      }
      case 'optim_step': {
        const outcome = await b.optimStep(this.#state(args.state), (args.params ?? {}) as never);
        this.#states.delete(String(args.state));
        return { state: this.#issue(outcome.state), result: outcome.result };
      }
      case 'export_weights':
        return { weights: out.bytes(await b.exportWeights(this.#state(args.state), args.kind as never)) };
      case 'import_weights': {
        const state = await b.importWeights(this.#state(args.state), args.weights as Uint8Array, {
          optimizer: args.optimizer === true,
        });
        this.#states.delete(String(args.state));
        return { state: this.#issue(state) };
      }
      case 'load_sampler': {
        const sampler = await b.loadSampler(
          String(args.base_model),
          (args.weights ?? null) as Uint8Array | null,
        );
        const handle = `m${this.#next++}`;
        this.#samplers.set(handle, sampler);
        return { sampler: handle };
      }
      case 'sample': {
        const sampler = this.#samplers.get(String(args.sampler));
        if (sampler === undefined) throw new UnknownHandleError(`unknown sampler ${String(args.sampler)}`);
        const resume = (args.resume ?? []) as ({ tokens: WireTensor; logprobs: WireTensor } | null)[];
        const run = await b.sample(sampler, sampleRequest(args.request), {
          resume: resume.map((prefix): SequencePrefix | null =>
            prefix === null
              ? null
              : { tokens: numbersOf(prefix.tokens), logprobs: numbersOf(prefix.logprobs) },
          ),
          ...(typeof args.max_new_tokens === 'number' ? { maxNewTokens: args.max_new_tokens } : {}),
          ...(typeof args.continuation === 'string' ? { continuation: args.continuation } : {}),
        });
        return encodeRun(out, run);
      }
      case 'serialize_state':
        return { bytes: out.bytes(await b.serializeState(this.#state(args.state))) };
      case 'deserialize_state':
        return { state: this.#issue(await b.deserializeState(args.bytes as Uint8Array)) };
      case 'release':
        for (const handle of args.handles as string[]) {
          this.#states.delete(handle);
          this.#samplers.delete(handle);
        }
        return {};
      default:
        throw new EngineProtocolError(`unknown op ${op}`);
    }
  }

  #state(handle: unknown): BackendState {
    const state = this.#states.get(String(handle));
    if (state === undefined) throw new UnknownHandleError(`unknown state handle ${String(handle)}`);
    return state;
  }

  #issue(state: BackendState): Record<string, unknown> {
    const handle = `s${this.#next++}`;
    this.#states.set(handle, state);
    return stateBody(handle, state);
  }
}

function stateBody(handle: string, state: BackendState): Record<string, unknown> {
  return { handle, base_model: state.base_model, weights_version: state.weights_version };
}

function errorBody(error: unknown): Record<string, unknown> {
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof StepUserError) {
    const field = error.context.field;
    return { kind: 'user', message, ...(typeof field === 'string' ? { field } : {}) };
  }
  if (error instanceof EngineProtocolError) return { kind: 'protocol', message };
  return { kind: 'infrastructure', message };
}

function tokensOf(raw: unknown): Int32Array {
  const tensor = raw as WireTensor;
  if (tensor.dtype === 'int32') return tensor.data;
  if (tensor.dtype === 'int64') return Int32Array.from(tensor.data, (value) => Number(value));
  throw new EngineProtocolError('tokens must be an int32 tensor');
}

function numbersOf(tensor: WireTensor): number[] {
  return tensor.dtype === 'int64' ? Array.from(tensor.data, (v) => Number(v)) : Array.from(tensor.data);
}

function tensorOf(raw: unknown): Tensor {
  const tensor = raw as WireTensor;
  if (tensor.dtype !== 'int32') return tensor;
  return { dtype: 'int64', data: BigInt64Array.from(tensor.data, (v) => BigInt(v)), shape: tensor.shape };
}

function modelInput(raw: unknown): ModelInput {
  const chunks = (raw as { chunks: { type: 'encoded_text'; tokens: unknown }[] }).chunks;
  return { chunks: chunks.map((chunk) => ({ type: 'encoded_text', tokens: tokensOf(chunk.tokens) })) };
}

function passInput(raw: unknown): ForwardBackwardInput {
  const input = raw as {
    loss_fn: string;
    loss_fn_config?: Record<string, number>;
    data: { model_input: unknown; loss_fn_inputs: Record<string, unknown> }[];
  };
  return {
    loss_fn: input.loss_fn,
    loss_fn_config: input.loss_fn_config ?? {},
    data: input.data.map(
      (datum): Datum => ({
        model_input: modelInput(datum.model_input),
        loss_fn_inputs: Object.fromEntries(
          Object.entries(datum.loss_fn_inputs).map(([name, tensor]) => [name, tensorOf(tensor)]),
        ),
      }),
    ),
  };
}

function sampleRequest(raw: unknown): SampleRequest {
  const request = raw as Omit<SampleRequest, 'prompt' | 'target_prompt_logprobs'> & {
    prompt: unknown;
    target_prompt_logprobs?: WireTensor;
  };
  const { target_prompt_logprobs: target, ...rest } = request;
  return {
    ...rest,
    prompt: modelInput(request.prompt),
    // The ids cross as a [prompt - 1, K] tensor; the backend takes them row-major with their shape.
    ...(target === undefined
      ? {}
      : {
          target_prompt_logprobs: {
            shape: [target.shape[0] ?? 0, target.shape[1] ?? 0],
            data: numbersOf(target),
          },
        }),
  };
}

function encodeResult(out: FrameBuilder, result: ForwardBackwardResult): Record<string, unknown> {
  return {
    loss_fn_output_type: result.loss_fn_output_type,
    loss_fn_outputs: result.loss_fn_outputs.map((outputs) =>
      Object.fromEntries(Object.entries(outputs).map(([name, tensor]) => [name, out.tensor(tensor)])),
    ),
    metrics: result.metrics,
  };
}

function encodeRun(out: FrameBuilder, run: SampleRun): Record<string, unknown> {
  return {
    finished: run.finished,
    sequences: run.sequences.map((sequence) => ({
      stop_reason: sequence.stop_reason,
      tokens: out.tokens(Int32Array.from(sequence.tokens)),
      logprobs: out.tensor({
        dtype: 'float32',
        data: Float32Array.from(sequence.logprobs),
        shape: [sequence.logprobs.length],
      }),
      ...(sequence.topk_logprobs === undefined ? {} : { topk_logprobs: sequence.topk_logprobs }),
    })),
    ...(run.prompt_logprobs === undefined ? {} : { prompt_logprobs: run.prompt_logprobs }),
    ...(run.topk_prompt_logprobs === undefined ? {} : { topk_prompt_logprobs: run.topk_prompt_logprobs }),
    ...(run.prompt_alt_tokens === undefined ? {} : { prompt_alt_tokens: run.prompt_alt_tokens }),
    ...(run.target_prompt_logprobs === undefined
      ? {}
      : { target_prompt_logprobs: run.target_prompt_logprobs }),
    ...(run.continuation === undefined ? {} : { continuation: run.continuation }),
  };
}
