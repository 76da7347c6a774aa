import { expect, it } from 'vitest';
import { describeScenario, LOGPROB_TOLERANCE } from './scenario.js';

/** Losses of the same step on the same weights and optimizer state. */
function expectSameLoss(actual: number, expected: number): void {
  expect(Math.abs(actual - expected)).toBeLessThanOrEqual(1e-6 * Math.max(1, Math.abs(expected)));
}

describeScenario('checkpoints', (report) => {
  it('save_state answers tinker://<run>/weights/<name>', () => {
    const { path, model_id } = report().observed<{ path: string; model_id: string }>(
      'save_state_returns_a_weights_path',
    );
    expect(path).toBe(`tinker://${model_id}/weights/untrained`);
  });

  it('load_state brings back the saved weights, on the saving client and on a fresh one', () => {
    const observed = report().observed<{ moved_by_training: number; reloaded: number; fresh_client: number }>(
      'load_state_on_an_existing_client',
    );
    expect(observed.moved_by_training).toBeGreaterThan(1e-3);
    expect(observed.reloaded).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
    expect(observed.fresh_client).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
  });

  it('load_state_with_optimizer on a fresh client then takes the saved model’s next step exactly', () => {
    const observed = report().observed<{ loss: number; reference_loss: number; after_step: number }>(
      'load_state_with_optimizer_on_an_existing_client',
    );
    expectSameLoss(observed.loss, observed.reference_loss);
    expect(observed.after_step).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
  });

  it('create_training_client_from_state gives the saved logprobs on the same data', () => {
    const { logprobs } = report().observed<{ logprobs: number }>('create_training_client_from_state');
    expect(logprobs).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
  });

  it('create_training_client_from_state_with_optimizer resumes exactly; without the optimizer it does not', () => {
    const observed = report().observed<{
      restored: number;
      losses: { saved: number; with_optimizer: number; without_optimizer: number };
      with_optimizer_after_step: number;
      without_optimizer_after_step: number;
    }>('create_training_client_from_state_with_optimizer');
    expect(observed.restored).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
    expectSameLoss(observed.losses.with_optimizer, observed.losses.saved);
    expect(observed.with_optimizer_after_step).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
    // Fresh Adam moments take another step from the same weights.
    expect(observed.without_optimizer_after_step).toBeGreaterThan(1e-4);
  });
});
