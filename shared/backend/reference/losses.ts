/**
 * The reference backend's loss functions, each a function of the target tokens' logprobs. A loss reads
 * its datum's inputs once (`forDatum`), then answers per element i of `target_tokens` (position
 * floor(i / K), candidate i mod K) its loss, its derivative with respect to that logprob, and its weight
 * in `loss:mean`. The training loop sums losses per position and turns the derivatives into the adapter
 * gradient (SequenceRunner.backward).
 *
 * With lp the learner's logprob of a target, q the `logprobs` input (the sampler's), A the `advantages`
 * input and r = exp(lp - q), the per-target losses are (Tinker's definitions; summed, never normalised):
 *   cross_entropy        -w lp                                  slope -w
 *   importance_sampling  -r A                                   slope -r A
 *   ppo                  -min(r A, clip(r, lo, hi) A)           slope -r A, or 0 where the clipped term wins
 *   cispo                -sg(clip(r, lo, hi)) lp A              slope -clip(r, lo, hi) A (sg: a constant)
 *   dro                  -(lp A - beta/2 (lp - q)^2)            slope -A + beta (lp - q)
 */

import { StepUserError } from '../../base/errors.js';
import { isLossFn, LOSS_FNS, type LossConfigValue, type LossFn, resolveLossConfig } from '../loss-config.js';
import { floatLossInput, type PassDatum } from './inputs.js';

export interface DatumLoss {
  /** Loss of element i whose target logprob is `logprob`. */
  value(i: number, logprob: number): number;
  /** d value / d logprob at element i; 0 adds no gradient. */
  slope(i: number, logprob: number): number;
  /** Element i's share of the denominator of `loss:mean`. */
  weight(i: number): number;
  /** Policy-gradient losses: the importance ratio r of element i, for the ratio metrics. */
  ratio?(i: number, logprob: number): number;
  /** ppo and cispo: whether element i's ratio lies outside [lo, hi] (for `clip_fraction:mean`). */
  clipped?(i: number, logprob: number): boolean;
}

export interface LossFunction {
  /** `config` is already resolved: every key of the loss present, defaults filled in, values checked. */
  forDatum(datum: PassDatum, config: Readonly<Record<string, number>>): DatumLoss;
}

/** -0 would reach the client as a negative zero; a loss of nothing is plain 0. */
const noNegativeZero = (x: number) => x + 0;

const clamp = (x: number, lo: number, hi: number) => Math.min(Math.max(x, lo), hi);

/**
 * Tinker's `cross_entropy` (sum reduction): element i costs -w_i * logp(target_i), with `weights` of
 * `target_tokens`' shape ([N] or [N, K] for top-k distillation; all ones when absent). Exactly linear in
 * the weights, of any sign, with no division by their sum: forward_backward_custom sends
 * weights = -dC/dlogprobs and relies on it (docs/design.md#l2).
 */
const crossEntropy: LossFunction = {
  forDatum(datum) {
    const weights = floatLossInput(datum, 'weights');
    const weight = weights === null ? () => 1 : (i: number) => weights[i] as number;
    return {
      value: (i, logprob) => noNegativeZero(-weight(i) * logprob),
      slope: (i) => -weight(i),
      weight,
    };
  },
};

/** The sampler's logprobs q and the advantages A of a policy-gradient datum (both required). */
function policyInputs(datum: PassDatum, lossFn: LossFn): { q: Float32Array; advantages: Float32Array } {
  const read = (name: string) => {
    const values = floatLossInput(datum, name);
    if (values === null) {
      const field = `${datum.field}.loss_fn_inputs.${name}`;
      throw new StepUserError(`${field}: is required by loss_fn ${lossFn}`, { context: { field } });
    }
    return values;
  };
  return { q: read('logprobs'), advantages: read('advantages') };
}

/** Every policy-gradient loss weighs each target 1 in `loss:mean` (the mean loss per target). */
const one = () => 1;

/** The importance ratio r = exp(lp - q) of element i. */
function importanceRatio(q: Float32Array): (i: number, lp: number) => number {
  return (i, lp) => Math.exp(lp - (q[i] as number));
}

const importanceSampling: LossFunction = {
  forDatum(datum) {
    const { q, advantages } = policyInputs(datum, 'importance_sampling');
    const ratio = importanceRatio(q);
    return {
      value: (i, lp) => noNegativeZero(-ratio(i, lp) * (advantages[i] as number)),
      slope: (i, lp) => -ratio(i, lp) * (advantages[i] as number),
      weight: one,
      ratio,
    };
  },
};

/**
 * ppo and cispo: the importance ratio, its clip range [lo, hi] (`clip_low_threshold`,
 * `clip_high_threshold`) and whether element i's ratio lies outside it.
 */
function clippedRatio(q: Float32Array, config: Readonly<Record<string, number>>) {
  const lo = config.clip_low_threshold ?? 0.8;
  const hi = config.clip_high_threshold ?? 1.2;
  const ratio = importanceRatio(q);
  const clipped = (i: number, lp: number) => {
    const r = ratio(i, lp);
    return r < lo || r > hi;
  };
  return { ratio, lo, hi, clipped };
}

const ppo: LossFunction = {
  forDatum(datum, config) {
    const { q, advantages } = policyInputs(datum, 'ppo');
    const { ratio, lo, hi, clipped } = clippedRatio(q, config);
    // The pessimistic (smaller) of the two surrogate objectives; the loss is its negation.
    const terms = (i: number, lp: number) => {
      const r = ratio(i, lp);
      const a = advantages[i] as number;
      return { r, unclipped: r * a, clipped: clamp(r, lo, hi) * a };
    };
    return {
      value: (i, lp) => {
        const { unclipped, clipped } = terms(i, lp);
        return noNegativeZero(-Math.min(unclipped, clipped));
      },
      // Where the clipped term is strictly smaller, r lies outside [lo, hi] and the clipped term is
      // constant in lp: no gradient. Otherwise the unclipped term -r A is the loss (inside the range the
      // two coincide), with slope -r A.
      slope: (i, lp) => {
        const { r, unclipped, clipped } = terms(i, lp);
        return clipped < unclipped ? 0 : -r * (advantages[i] as number);
      },
      weight: one,
      ratio,
      clipped,
    };
  },
};

const cispo: LossFunction = {
  forDatum(datum, config) {
    const { q, advantages } = policyInputs(datum, 'cispo');
    const { ratio, lo, hi, clipped } = clippedRatio(q, config);
    // The clipped ratio is a stop-gradient weight: lp's own factor carries the whole slope.
    const coefficient = (i: number, lp: number) => clamp(ratio(i, lp), lo, hi) * (advantages[i] as number);
    return {
      value: (i, lp) => noNegativeZero(-coefficient(i, lp) * lp),
      slope: (i, lp) => -coefficient(i, lp),
      weight: one,
      ratio,
      clipped,
    };
  },
};

const dro: LossFunction = {
  forDatum(datum, config) {
    const { q, advantages } = policyInputs(datum, 'dro');
    const beta = config.beta ?? 0.05;
    return {
      value: (i, lp) => {
        const drift = lp - (q[i] as number);
        return noNegativeZero(-(lp * (advantages[i] as number) - (beta / 2) * drift * drift));
      },
      slope: (i, lp) => -(advantages[i] as number) + beta * (lp - (q[i] as number)),
      weight: one,
      ratio: importanceRatio(q),
    };
  },
};

const LOSS_FUNCTIONS: Readonly<Record<LossFn, LossFunction>> = {
  cross_entropy: crossEntropy,
  importance_sampling: importanceSampling,
  ppo,
  cispo,
  dro,
};

export const SUPPORTED_LOSS_FNS: readonly string[] = LOSS_FNS;

function fail(field: string, problem: string): never {
  throw new StepUserError(`${field}: ${problem}`, { context: { field } });
}

/**
 * The loss `name` with its config resolved (defaults filled in). Intake has checked both already; they
 * are checked again because a stored payload outlives the code that accepted it.
 */
export function lossFunction(
  name: string,
  config: Readonly<Record<string, LossConfigValue>>,
): { loss: LossFunction; config: Readonly<Record<string, number>> } {
  if (!isLossFn(name)) {
    fail(
      'loss_fn',
      `unknown loss function ${JSON.stringify(name)}; supported: ${SUPPORTED_LOSS_FNS.join(', ')}`,
    );
  }
  const resolved = resolveLossConfig(name, config);
  if (!resolved.ok) fail(`loss_fn_config.${resolved.key}`, resolved.problem);
  return { loss: LOSS_FUNCTIONS[name], config: resolved.values };
}
