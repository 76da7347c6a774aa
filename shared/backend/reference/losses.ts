/**
 * The reference backend's loss functions, each a function of the target tokens' logprobs. A loss reads
 * its datum's inputs once (`forDatum`), then answers per element i of `target_tokens` (position
 * floor(i / K), candidate i mod K) its loss, its derivative with respect to that logprob, and its weight
 * in `loss:mean`. The training loop sums losses per position and turns the derivatives into the adapter
 * gradient (SequenceRunner.backward), so a new loss (importance_sampling, ppo, ...) is one more entry here.
 */

import { StepUserError } from '../../errors.js';
import { floatLossInput, type PassDatum } from './inputs.js';

export interface DatumLoss {
  /** Loss of element i whose target logprob is `logprob`. */
  value(i: number, logprob: number): number;
  /** d value / d logprob at element i; 0 adds no gradient. */
  slope(i: number, logprob: number): number;
  /** Element i's share of the denominator of `loss:mean`. */
  weight(i: number): number;
}

export interface LossFunction {
  forDatum(datum: PassDatum, config: Readonly<Record<string, number>>): DatumLoss;
}

/**
 * Tinker's `cross_entropy` (sum reduction): element i costs -w_i * logp(target_i), with `weights` of
 * `target_tokens`' shape ([N] or [N, K] for top-k distillation; all ones when absent). A zero weight
 * costs exactly 0 whatever the logprob.
 */
const crossEntropy: LossFunction = {
  forDatum(datum) {
    const weights = floatLossInput(datum, 'weights');
    const weight = weights === null ? () => 1 : (i: number) => weights[i] as number;
    return {
      value: (i, logprob) => {
        const w = weight(i);
        return w === 0 ? 0 : -w * logprob;
      },
      slope: (i) => -weight(i),
      weight,
    };
  },
};

const LOSS_FUNCTIONS: Readonly<Record<string, LossFunction>> = { cross_entropy: crossEntropy };

export const SUPPORTED_LOSS_FNS: readonly string[] = Object.keys(LOSS_FUNCTIONS);

export function lossFunction(name: string): LossFunction {
  const loss = Object.hasOwn(LOSS_FUNCTIONS, name) ? LOSS_FUNCTIONS[name] : undefined;
  if (loss === undefined) {
    throw new StepUserError(
      `loss_fn: unknown loss function ${JSON.stringify(name)}; supported: ${SUPPORTED_LOSS_FNS.join(', ')}`,
      { context: { field: 'loss_fn' } },
    );
  }
  return loss;
}
