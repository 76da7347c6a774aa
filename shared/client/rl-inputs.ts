import type { datum, forwardBackwardInput } from '../services/api/schemas.js';
import type { In } from './tinker-client.js';

/**
 * A policy-gradient forward_backward as a Tinker client sends it: per datum the sequence's tokens, and
 * per target token the sampler's logprob and the advantage (`target_tokens` int64, `logprobs` and
 * `advantages` float32, as Tinker's `importance_sampling` and `ppo` take them). Used by
 * `npm run demo:rl` and the end-to-end workloads.
 */

export type RlLossFn = 'importance_sampling' | 'ppo';

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

export function rlDatum(sequence: RlSequence): In<typeof datum> {
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
    },
  };
}

/** The forward_backward input of a policy-gradient step. */
export function rlPassInput(
  sequences: readonly RlSequence[],
  lossFn: RlLossFn,
): In<typeof forwardBackwardInput> {
  return { data: sequences.map((sequence) => rlDatum(sequence)), loss_fn: lossFn };
}
