import { expect, it } from 'vitest';
import { describeScenario, LOGPROB_TOLERANCE } from './scenario.js';

describeScenario('training', (report) => {
  it('trains three models at once, interleaved, each loss falling over ten steps', () => {
    const { model_ids, losses } = report().observed<{ model_ids: string[]; losses: number[][] }>(
      'several_models_train_concurrently',
    );
    expect(new Set(model_ids).size).toBe(3);
    for (const history of losses) {
      expect(history).toHaveLength(10);
      expect(history.at(-1)).toBeLessThan((history[0] as number) * 0.7);
    }
  });

  it('forward returns per-token logprobs and leaves no gradient for the next step', () => {
    const observed = report().observed<{
      lengths: number[];
      expected_lengths: number[];
      forward_vs_forward_backward: number;
      forward_after_forward_backward: number;
      stepped_with_vs_without_forward: number;
      step_moved_logprobs: number;
      loss: number;
    }>('forward_has_no_gradient_effect');
    expect(observed.lengths).toEqual(observed.expected_lengths);
    expect(observed.forward_vs_forward_backward).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
    expect(observed.forward_after_forward_backward).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
    // The step moved the model, so the two models agreeing after it means forward added nothing.
    expect(observed.step_moved_logprobs).toBeGreaterThan(1e-3);
    expect(observed.stepped_with_vs_without_forward).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
    expect(observed.loss).toBeGreaterThan(0);
  });
});
