import type { datum, forwardBackwardInput } from '../api/schemas.js';
import type { In } from '../client/tinker-client.js';
import { SUPPORTED_LOSS_FNS } from './reference/losses.js';

/**
 * A policy-gradient forward_backward as a Tinker client sends it: per datum the sequence's tokens, and
 * per target token the sampler's logprob and the advantage (`target_tokens` int64, `logprobs` and
 * `advantages` float32, as Tinker's `importance_sampling` and `ppo` take them). Used by
 * `npm run demo:rl` and the end-to-end workloads.
 *
 * Until the reference backend implements the RL losses, the step runs as `cross_entropy` with
 * `weights = advantages` (still carrying logprobs and advantages): on-policy REINFORCE, which has the
 * same gradient as importance_sampling while the sampler's logprobs equal the learner's. The switch is
 * `rlLossFn`: it answers the RL loss itself as soon as `SUPPORTED_LOSS_FNS` lists it.
 */

export type RlLossFn = 'importance_sampling' | 'ppo';

/** What a step meant as `wanted` runs as on this backend: `wanted`, or the cross_entropy stand-in. */
export function rlLossFn(wanted: RlLossFn): RlLossFn | 'cross_entropy' {
  return SUPPORTED_LOSS_FNS.includes(wanted) ? wanted : 'cross_entropy';
}

export interface RlSequence {
  /** The whole sequence (prompt and completion): inputs are all but the last, targets all but the first. */
  readonly tokens: readonly number[];
  /** Per target (tokens.length - 1): the sampler's logprob of that token (any value where advantage is 0). */
  readonly logprobs: readonly number[];
  /** Per target: its advantage (0 for prompt tokens, which are not trained). */
  readonly advantages: readonly number[];
}

const float32 = (data: readonly number[]) => ({
  data: [...data],
  dtype: 'float32' as const,
  shape: [data.length],
});

export function rlDatum(sequence: RlSequence, lossFn: RlLossFn | 'cross_entropy'): In<typeof datum> {
  const { tokens, logprobs, advantages } = sequence;
  const targets = tokens.slice(1);
  if (logprobs.length !== targets.length || advantages.length !== targets.length) {
    throw new Error(`an RL datum needs one logprob and one advantage per target (${targets.length})`);
  }
  return {
    model_input: { chunks: [{ type: 'encoded_text', tokens: tokens.slice(0, -1) }] },
    loss_fn_inputs: {
      target_tokens: { data: targets, dtype: 'int64', shape: [targets.length] },
      logprobs: float32(logprobs),
      advantages: float32(advantages),
      ...(lossFn === 'cross_entropy' ? { weights: float32(advantages) } : {}),
    },
  };
}

/** The forward_backward input of a policy-gradient step meant as `wanted` (see `rlLossFn`). */
export function rlPassInput(
  sequences: readonly RlSequence[],
  wanted: RlLossFn,
): In<typeof forwardBackwardInput> {
  const lossFn = rlLossFn(wanted);
  return { data: sequences.map((sequence) => rlDatum(sequence, lossFn)), loss_fn: lossFn };
}
