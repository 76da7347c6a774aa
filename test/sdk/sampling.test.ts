import { expect, it } from 'vitest';
import { describeScenario, LOGPROB_TOLERANCE } from './scenario.js';

type TopK = Array<Array<[number, number]> | null>;

describeScenario('sampling', (report) => {
  it('num_samples > 1 from the base model: the same seed repeats, another seed differs', () => {
    const observed = report().observed<{
      tokens: number[][];
      same_seed_same_tokens: boolean;
      other_seed_differs: boolean;
      samples_differ_from_each_other: boolean;
      stop_reasons: string[];
    }>('several_samples_and_seeds');
    expect(observed.tokens).toHaveLength(3);
    expect(observed.same_seed_same_tokens).toBe(true);
    expect(observed.other_seed_differs).toBe(true);
    expect(observed.samples_differ_from_each_other).toBe(true);
    expect(observed.stop_reasons).toEqual(['length', 'length', 'length']);
  });

  it('a stop token ends the sequence with stop_reason "stop", the stop token included', () => {
    const observed = report().observed<{
      stop_token: number;
      expected_tokens: number[];
      tokens: number[];
      stop_reason: string;
    }>('stop_token_ends_the_sequence');
    expect(observed.tokens).toEqual(observed.expected_tokens);
    expect(observed.tokens.at(-1)).toBe(observed.stop_token);
    expect(observed.stop_reason).toBe('stop');
  });

  it('max_tokens ends the sequence with stop_reason "length"', () => {
    expect(report().observed('max_tokens_ends_with_length')).toEqual({ tokens: 5, stop_reason: 'length' });
  });

  it('include_prompt_logprobs (first is None) and topk_prompt_logprobs=k', () => {
    const { prompt_length, prompt_logprobs, topk } = report().observed<{
      prompt_length: number;
      prompt_logprobs: Array<number | null>;
      topk: TopK;
    }>('prompt_logprobs_and_top_k');
    expect(prompt_logprobs).toHaveLength(prompt_length);
    expect(prompt_logprobs[0]).toBeNull();
    for (const logprob of prompt_logprobs.slice(1)) expect(logprob).toBeLessThanOrEqual(0);
    expect(topk).toHaveLength(prompt_length);
    expect(topk[0]).toBeNull();
    for (const row of topk.slice(1)) {
      expect(row).toHaveLength(3);
      const logprobs = (row ?? []).map(([, logprob]) => logprob);
      expect(logprobs).toEqual([...logprobs].sort((a, b) => b - a));
      for (const [token] of row ?? []) expect(token).toBeGreaterThanOrEqual(0);
    }
  });

  it("compute_logprobs equals the training client's forward logprobs of the same sequence", () => {
    const observed = report().observed<{ length: number; forward_length: number; max_difference: number }>(
      'compute_logprobs_equals_forward',
    );
    expect(observed.length).toBe(observed.forward_length + 1);
    expect(observed.max_difference).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
  });

  it('a saved sampler checkpoint, opened by its path, samples what its weights sample', () => {
    const { tokens, expected } = report().observed<{ tokens: number[][]; expected: number[][] }>(
      'sampler_checkpoint_samples_like_the_weights',
    );
    expect(tokens).toEqual(expected);
  });

  it('a sampler checkpoint path is tinker://<run>/sampler_weights/<name>, as the SDK parses it', () => {
    const observed = report().observed<{
      path: string;
      checkpoint_type: string;
      training_run_id: string;
      model_id: string;
    }>('sampler_checkpoint_path_is_a_sampler_path');
    expect(observed.path).toBe(`tinker://${observed.model_id}/sampler_weights/sampler-path-shape`);
    expect(observed.checkpoint_type).toBe('sampler');
    expect(observed.training_run_id).toBe(observed.model_id);
  });

  it('the trained weights score their training text above the base model', () => {
    const { trained, base } = report().observed<{ trained: number; base: number }>(
      'trained_sampler_prefers_its_training_text',
    );
    expect(trained).toBeGreaterThan(base);
  });
});
