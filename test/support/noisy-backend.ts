import type {
  AdamParams,
  Backend,
  BackendState,
  CreateModelInput,
  ForwardBackwardInput,
  ForwardBackwardResult,
  Metrics,
  OptimStepResult,
  PassItem,
  PassOutcome,
  SampleOptions,
  SampleRequest,
  SampleRun,
  SamplerModel,
  StepOutcome,
  WeightsKind,
} from '../../shared/backend/backend.js';
import { hashWords, uniformAt } from '../../shared/backend/reference/prng.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';

/**
 * A deliberately non-deterministic backend, standing for a GPU engine (E3): the reference backend,
 * whose every new state gets a fresh tag drawn from this instance's seed and a counter, so two runs
 * of the same steps (two deliveries of one work item) serialize different bytes and report different
 * metrics. The tag is written ahead of the reference bytes, and each forward_backward and
 * optim_step reports the tag of the state it produced (`state_tag:unique`), with noise of the tag
 * added to its other metrics: a committed row is consistent when the state its `state_ref` names
 * carries the tag its last state-changing step reported (`stateTagOf`, `reportedStateTag`).
 * Checkpoints and samples are the reference backend's (a checkpoint's keys are run-unique all the
 * same).
 */

/** The metric that carries the produced state's tag. */
export const STATE_TAG_METRIC = 'state_tag:unique';

const MAGIC = Buffer.from('NOISY1\n');
/** Relative size of the noise added to the other metrics. */
const NOISE = 1e-6;

interface NoisyState extends BackendState {
  readonly inner: BackendState;
  readonly tag: number;
}

const isNoisy = (state: BackendState): state is NoisyState => 'inner' in state && 'tag' in state;

/** The tag written ahead of a noisy state's bytes; undefined for bytes of another backend. */
export function stateTagOf(bytes: Uint8Array): number | undefined {
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (buffer.length < MAGIC.length + 8 || !buffer.subarray(0, MAGIC.length).equals(MAGIC)) return undefined;
  return buffer.readDoubleLE(MAGIC.length);
}

/** The state tag a step's result reports (forward_backward and optim_step results), if any. */
export function reportedStateTag(result: unknown): number | undefined {
  if (typeof result !== 'object' || result === null || !('metrics' in result)) return undefined;
  const metrics = (result as { metrics: unknown }).metrics;
  if (typeof metrics !== 'object' || metrics === null) return undefined;
  const tag = (metrics as Record<string, unknown>)[STATE_TAG_METRIC];
  return typeof tag === 'number' ? tag : undefined;
}

export class NoisyBackend implements Backend {
  readonly name = 'noisy-reference';
  #drawn = 0;

  constructor(
    /** Seeds this instance's tags: give each worker process or invocation its own. */
    readonly seed: number,
    private readonly inner: Backend = new ReferenceBackend(),
  ) {}

  /** A fresh tag: an integer below 2^31, never 0 (exact in JSON and as a float64). */
  #nextTag(): number {
    this.#drawn++;
    return 1 + Math.floor(uniformAt(hashWords(this.seed, this.#drawn), this.#drawn) * 0x7ffffffe);
  }

  #wrap(inner: BackendState): NoisyState {
    return {
      kind: 'noisy',
      base_model: inner.base_model,
      weights_version: inner.weights_version,
      inner,
      tag: this.#nextTag(),
    };
  }

  #unwrap(state: BackendState): BackendState {
    return isNoisy(state) ? state.inner : state;
  }

  #noisy(metrics: Metrics, tag: number): Metrics {
    const noisy: Metrics = {};
    for (const [name, value] of Object.entries(metrics))
      noisy[name] = value + value * NOISE * ((tag % 1000) / 1000);
    noisy[STATE_TAG_METRIC] = tag;
    return noisy;
  }

  async createModel(input: CreateModelInput): Promise<BackendState> {
    return this.#wrap(await this.inner.createModel(input));
  }

  async forward(state: BackendState, input: ForwardBackwardInput): Promise<ForwardBackwardResult> {
    return this.inner.forward(this.#unwrap(state), input);
  }

  async forwardBackward(
    state: BackendState,
    input: ForwardBackwardInput,
  ): Promise<StepOutcome<ForwardBackwardResult>> {
    const outcome = await this.inner.forwardBackward(this.#unwrap(state), input);
    const next = this.#wrap(outcome.state);
    return {
      state: next,
      result: { ...outcome.result, metrics: this.#noisy(outcome.result.metrics, next.tag) },
    };
  }

  async runPasses(items: readonly PassItem[]): Promise<PassOutcome[]> {
    const outcomes = await this.inner.runPasses(
      items.map((item) => ({ ...item, state: this.#unwrap(item.state) })),
    );
    return outcomes.map((outcome, index) => {
      if (!outcome.ok || items[index]?.type !== 'forward_backward') return outcome;
      const next = this.#wrap(outcome.state);
      return {
        ok: true,
        state: next,
        result: { ...outcome.result, metrics: this.#noisy(outcome.result.metrics, next.tag) },
      };
    });
  }

  async optimStep(state: BackendState, params: AdamParams): Promise<StepOutcome<OptimStepResult>> {
    const outcome = await this.inner.optimStep(this.#unwrap(state), params);
    const next = this.#wrap(outcome.state);
    return { state: next, result: { metrics: this.#noisy(outcome.result.metrics, next.tag) } };
  }

  exportWeights(state: BackendState, kind: WeightsKind): Promise<Uint8Array> {
    return this.inner.exportWeights(this.#unwrap(state), kind);
  }

  async importWeights(
    state: BackendState,
    bytes: Uint8Array,
    options: { optimizer: boolean },
  ): Promise<BackendState> {
    return this.#wrap(await this.inner.importWeights(this.#unwrap(state), bytes, options));
  }

  loadSampler(baseModel: string, weights: Uint8Array | null): Promise<SamplerModel> {
    return this.inner.loadSampler(baseModel, weights);
  }

  sample(sampler: SamplerModel, request: SampleRequest, options?: SampleOptions): Promise<SampleRun> {
    return this.inner.sample(sampler, request, options);
  }

  async serializeState(state: BackendState): Promise<Uint8Array> {
    const tag = isNoisy(state) ? state.tag : 0;
    const head = Buffer.alloc(MAGIC.length + 8);
    MAGIC.copy(head);
    head.writeDoubleLE(tag, MAGIC.length);
    return Buffer.concat([head, await this.inner.serializeState(this.#unwrap(state))]);
  }

  async deserializeState(bytes: Uint8Array): Promise<BackendState> {
    const tag = stateTagOf(bytes);
    if (tag === undefined) throw new Error('not a noisy backend state');
    const inner = await this.inner.deserializeState(bytes.subarray(MAGIC.length + 8));
    const state: NoisyState = {
      kind: 'noisy',
      base_model: inner.base_model,
      weights_version: inner.weights_version,
      inner,
      tag,
    };
    return state;
  }
}
