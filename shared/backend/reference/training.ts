/**
 * Training steps of the reference backend, as pure functions from state to state.
 *
 * Loss (./losses.ts): L = sum over datums d, positions t and targets k of loss(log p(target_{d,t,k} |
 * tokens_{d,<=t})); for `cross_entropy` that is w_{d,t,k} * -log p(...) (K = 1 for 1-D target_tokens).
 * Outputs per datum: `logprobs` of target_tokens' shape ([N] or [N, K]) and `elementwise_loss` [N], the
 * loss of each position, both float32. The gradient is ADDED to the accumulator, so gradients sum across
 * forward_backward calls until optim_step applies and clears them (as in Tinker).
 * Metrics: `loss:sum` = L; `loss:mean` = L / sum w (0 when the weights sum to 0; policy-gradient losses
 * weigh each target 1, so it is the mean loss per target); `weights_version:max` = optimizer steps applied
 * so far. Policy-gradient losses add `ratio:mean` / `ratio:min` / `ratio:max` of r = exp(lp - q), and ppo
 * and cispo `clip_fraction:mean`, the share of targets whose r lies outside [lo, hi]. Each `:mean` of
 * those is a mean over datums of the datum's per-target mean: the SDK merges chunks' `:mean` metrics
 * weighted by their datum counts, which then gives the same mean as one chunk would. Weights are float32
 * (the wire's type); every sum runs in Float64 in a fixed order, so the same inputs give the same bits.
 *
 * optim_step is AdamW. With g the accumulated gradient (scaled by c/|g| when grad_clip_norm c > 0 and
 * |g| > c):
 *   m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2,  t = adam_step + 1,
 *   p = p (1 - lr wd) - lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
 * i.e. decoupled weight decay applied to the pre-step weights (PyTorch AdamW order).
 */

import { StepUserError } from '../../base/errors.js';
import type {
  AdamParams,
  CreateModelInput,
  ForwardBackwardInput,
  ForwardBackwardResult,
  LossFnOutput,
  OptimStepResult,
  WeightsKind,
} from '../backend.js';
import { float32Tensor } from '../tensor.js';
import { BLOB_SAMPLER_WEIGHTS, BLOB_STATE, BLOB_TRAINING_WEIGHTS, decodeBlob, encodeBlob } from './codec.js';
import { parseAdamParams, parseCreateModel, parsePassInput } from './inputs.js';
import { lossFunction } from './losses.js';
import { baseWeights, initialAdapter, SequenceRunner } from './model.js';
import { REFERENCE_STATE_KIND, type ReferenceState } from './state.js';

export function createReferenceModel(input: CreateModelInput): ReferenceState {
  const config = parseCreateModel(input);
  return {
    kind: REFERENCE_STATE_KIND,
    base_model: config.baseModel,
    rank: config.rank,
    weights_version: 0,
    adam_step: 0,
    params: initialAdapter(config.baseModel, config.rank, config.seed),
    moment1: null,
    moment2: null,
    grad: null,
  };
}

/** forward (state unchanged) or, `withGradient`, forward_backward (gradient added to the accumulator). */
export function runPass(
  state: ReferenceState,
  input: ForwardBackwardInput,
  withGradient: boolean,
): { state: ReferenceState; result: ForwardBackwardResult } {
  const { loss, config } = lossFunction(input.loss_fn, input.loss_fn_config);
  const datums = parsePassInput(input);
  const base = baseWeights(state.base_model);
  // This call's gradient, added to the accumulator at the end: a call's contribution never depends on
  // what was accumulated before it.
  const grad = withGradient ? new Float64Array(state.params.length) : null;
  let lossSum = 0;
  let weightSum = 0;
  const ratios = new RatioStats();
  const outputs = datums.map((datum): LossFnOutput => {
    const terms = loss.forDatum(datum, config);
    ratios.startDatum();
    const { tokens, targets, perPosition } = datum;
    const runner = new SequenceRunner(base, state.params, state.rank);
    const logprobs = new Float32Array(targets.length);
    const losses = new Float32Array(tokens.length);
    const slopes = new Float64Array(perPosition);
    for (let t = 0; t < tokens.length; t++) {
      runner.push(tokens[t] as number);
      const first = t * perPosition;
      let positionLoss = 0;
      let slopeSeen = false;
      for (let k = 0; k < perPosition; k++) {
        const i = first + k;
        const logprob = runner.logprobs[targets[i] as number] as number;
        logprobs[i] = logprob;
        positionLoss += terms.value(i, logprob);
        weightSum += terms.weight(i);
        if (terms.ratio) ratios.add(terms.ratio(i, logprob), terms.clipped?.(i, logprob));
        if (grad) {
          slopes[k] = terms.slope(i, logprob);
          slopeSeen ||= slopes[k] !== 0;
        }
      }
      losses[t] = positionLoss;
      lossSum += positionLoss;
      if (grad && slopeSeen) runner.backward(targets.subarray(first, first + perPosition), slopes, grad);
    }
    return {
      logprobs: { dtype: 'float32', data: logprobs, shape: datum.targetShape },
      elementwise_loss: float32Tensor(losses),
    };
  });
  const result: ForwardBackwardResult = {
    loss_fn_output_type: 'ArrayRecord',
    loss_fn_outputs: outputs,
    metrics: {
      'loss:mean': weightSum === 0 ? 0 : lossSum / weightSum,
      'loss:sum': lossSum,
      'weights_version:max': state.weights_version,
      ...ratios.metrics(),
    },
  };
  if (!grad) return { state, result };
  if (state.grad)
    for (let i = 0; i < grad.length; i++) grad[i] = (state.grad[i] as number) + (grad[i] as number);
  return { state: { ...state, grad }, result };
}

/** The ratio metrics of a pass: per-datum means averaged over datums, extremes over every target. */
class RatioStats {
  private datumMeans = 0;
  private clipMeans = 0;
  private datums = 0;
  private clipDatums = 0;
  private min = Number.POSITIVE_INFINITY;
  private max = Number.NEGATIVE_INFINITY;
  private sum = 0;
  private clipped = 0;
  private count = 0;
  private clipCounted = false;

  startDatum(): void {
    this.closeDatum();
  }

  add(ratio: number, clipped: boolean | undefined): void {
    this.sum += ratio;
    this.count += 1;
    if (ratio < this.min) this.min = ratio;
    if (ratio > this.max) this.max = ratio;
    if (clipped !== undefined) {
      this.clipCounted = true;
      if (clipped) this.clipped += 1;
    }
  }

  metrics(): Record<string, number> {
    this.closeDatum();
    if (this.datums === 0) return {};
    const out: Record<string, number> = {
      'ratio:mean': this.datumMeans / this.datums,
      'ratio:min': this.min,
      'ratio:max': this.max,
    };
    if (this.clipDatums > 0) out['clip_fraction:mean'] = this.clipMeans / this.clipDatums;
    return out;
  }

  private closeDatum(): void {
    if (this.count > 0) {
      this.datumMeans += this.sum / this.count;
      this.datums += 1;
      if (this.clipCounted) {
        this.clipMeans += this.clipped / this.count;
        this.clipDatums += 1;
      }
    }
    this.sum = 0;
    this.clipped = 0;
    this.count = 0;
    this.clipCounted = false;
  }
}

export function referenceOptimStep(
  state: ReferenceState,
  adamParams: AdamParams,
): { state: ReferenceState; result: OptimStepResult } {
  const { learningRate: lr, beta1, beta2, eps, weightDecay, gradClipNorm } = parseAdamParams(adamParams);
  const size = state.params.length;
  const grad = state.grad ?? new Float64Array(size);
  let squares = 0;
  for (let i = 0; i < size; i++) squares += (grad[i] as number) * (grad[i] as number);
  const gradNorm = Math.sqrt(squares);
  const clip = gradClipNorm > 0 && gradNorm > gradClipNorm ? gradClipNorm / gradNorm : 1;
  const step = state.adam_step + 1;
  const correction1 = 1 - beta1 ** step;
  const correction2 = 1 - beta2 ** step;
  const decay = 1 - lr * weightDecay;
  const params = state.params.slice();
  const moment1 = state.moment1?.slice() ?? new Float64Array(size);
  const moment2 = state.moment2?.slice() ?? new Float64Array(size);
  for (let i = 0; i < size; i++) {
    const g = (grad[i] as number) * clip;
    const m = beta1 * (moment1[i] as number) + (1 - beta1) * g;
    const v = beta2 * (moment2[i] as number) + (1 - beta2) * g * g;
    moment1[i] = m;
    moment2[i] = v;
    params[i] = (params[i] as number) * decay - (lr * (m / correction1)) / (Math.sqrt(v / correction2) + eps);
  }
  const weightsVersion = state.weights_version + 1;
  return {
    state: {
      ...state,
      params,
      moment1,
      moment2,
      grad: null,
      adam_step: step,
      weights_version: weightsVersion,
    },
    result: { metrics: { 'grad_norm:mean': gradNorm, 'weights_version:max': weightsVersion } },
  };
}

/** `training`: weights, moments and Adam step (save_weights); `sampler`: weights only. */
export function exportReferenceWeights(state: ReferenceState, kind: WeightsKind): Uint8Array {
  return encodeBlob(kind === 'training' ? BLOB_TRAINING_WEIGHTS : BLOB_SAMPLER_WEIGHTS, state);
}

/**
 * load_weights: the checkpoint's adapter replaces the model's; with `optimizer` its Adam moments and step
 * come too, else they reset. The gradient accumulator is cleared; `weights_version` keeps counting this
 * model's optimizer steps.
 */
export function importReferenceWeights(
  state: ReferenceState,
  bytes: Uint8Array,
  options: { optimizer: boolean },
): ReferenceState {
  const { type, state: saved } = decodeBlob(bytes);
  if (type === BLOB_STATE) throw new StepUserError('path: names a model state, not a weights checkpoint');
  if (saved.base_model !== state.base_model) {
    throw new StepUserError(
      `path: checkpoint is for base model ${saved.base_model}, not ${state.base_model}`,
    );
  }
  if (saved.rank !== state.rank) {
    throw new StepUserError(`path: checkpoint has LoRA rank ${saved.rank}, the model has rank ${state.rank}`);
  }
  if (options.optimizer && type === BLOB_SAMPLER_WEIGHTS) {
    throw new StepUserError('optimizer: a sampler checkpoint holds no optimizer state');
  }
  return {
    ...state,
    params: saved.params,
    moment1: options.optimizer ? saved.moment1 : null,
    moment2: options.optimizer ? saved.moment2 : null,
    adam_step: options.optimizer ? saved.adam_step : 0,
    grad: null,
  };
}
