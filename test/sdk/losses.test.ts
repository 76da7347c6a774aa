import { expect, it } from 'vitest';
import { describeScenario, LOGPROB_TOLERANCE } from './scenario.js';

/** Float32 round trips of losses and logprobs: relative agreement this close (L1; the SDK sends float32). */
const FLOAT32_RELATIVE = 1e-5;

interface LossCase {
  loss_fn: string;
  config: Record<string, number> | null;
  elementwise_error: number;
  loss_sum: number;
  expected_sum: number;
  logprobs_vs_forward: number;
  metrics: Record<string, number>;
  ratios_outside: number;
  ratios_inside: number;
  advantage_signs: [number, number];
}

describeScenario(
  'losses',
  (report) => {
    it('importance_sampling, ppo, cispo and dro each equal their formula on forward logprobs', () => {
      const { cases } = report().observed<{ cases: LossCase[] }>('builtin_losses_match_their_formulas');
      expect(cases.map((c) => c.loss_fn)).toEqual(['importance_sampling', 'ppo', 'ppo', 'cispo', 'dro']);
      for (const c of cases) {
        const label = `${c.loss_fn} ${JSON.stringify(c.config)}`;
        expect(c.elementwise_error, label).toBeLessThan(FLOAT32_RELATIVE);
        expect(Math.abs(c.loss_sum - c.expected_sum), label).toBeLessThan(
          FLOAT32_RELATIVE * (1 + Math.abs(c.expected_sum)),
        );
        expect(c.logprobs_vs_forward, label).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
        expect(Math.min(c.ratios_inside, c.ratios_outside, ...c.advantage_signs), label).toBeGreaterThan(3);
        for (const key of Object.keys(c.metrics)) expect(key).toMatch(/^[a-z_]+:(mean|sum|min|max)$/);
        expect(c.metrics['ratio:mean'], label).toBeGreaterThan(0);
        if (c.loss_fn === 'ppo' || c.loss_fn === 'cispo') {
          expect(c.metrics['clip_fraction:mean'], label).toBeGreaterThan(0);
        }
      }
    });

    it('forward_backward_custom with a cross-entropy loss equals the built-in cross_entropy on a twin', (ctx) => {
      const observed = report().observed<{
        skipped?: string;
        custom_loss_sum: number;
        custom_metric: number;
        builtin_loss_sum: number;
        next_step_difference: number;
        step_moved_logprobs: number;
      }>('forward_backward_custom_equals_cross_entropy');
      if (observed.skipped !== undefined) {
        ctx.skip(observed.skipped);
        return;
      }
      const tolerance = FLOAT32_RELATIVE * (1 + Math.abs(observed.builtin_loss_sum));
      expect(Math.abs(observed.custom_loss_sum - observed.builtin_loss_sum)).toBeLessThan(tolerance);
      expect(Math.abs(observed.custom_metric - observed.builtin_loss_sum)).toBeLessThan(tolerance);
      expect(observed.step_moved_logprobs).toBeGreaterThan(1e-3);
      expect(observed.next_step_difference).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
    });
  },
  { torch: true },
);
