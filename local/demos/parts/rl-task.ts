import type { RlSequence } from '../../../shared/client/rl-inputs.js';
import { encode } from './dataset.js';

/**
 * `npm run demo:rl`'s task, verifiable without any model: after a prompt, write plain lowercase text.
 * The reward of a completion is the fraction of its bytes that are lowercase ASCII letters or spaces;
 * the untrained byte-level model scores about 0.07 (most of its bytes are other byte values).
 */

export const RL_PROMPTS: readonly string[] = ['Q: ', 'say ', 'la ', 'text: '];

const isPlain = (byte: number) => byte === 0x20 || (byte >= 0x61 && byte <= 0x7a);

export function reward(completion: readonly number[]): number {
  if (completion.length === 0) return 0;
  return completion.filter(isPlain).length / completion.length;
}

/** Group-relative advantages (GRPO-style, no division by the std): each reward minus its group's mean. */
export function groupAdvantages(rewards: readonly number[]): number[] {
  const mean = rewards.reduce((sum, value) => sum + value, 0) / Math.max(1, rewards.length);
  return rewards.map((value) => value - mean);
}

export interface Rollout {
  readonly tokens: readonly number[];
  readonly logprobs: readonly number[];
}

/** A rollout as a training sequence: only the completion's tokens carry its advantage. */
export function rolloutSequence(prompt: string, rollout: Rollout, advantage: number): RlSequence {
  const promptTokens = encode(prompt);
  const untrained = promptTokens.length - 1;
  return {
    tokens: [...promptTokens, ...rollout.tokens],
    logprobs: [...Array<number>(untrained).fill(0), ...rollout.logprobs],
    advantages: [...Array<number>(untrained).fill(0), ...rollout.tokens.map(() => advantage)],
  };
}
