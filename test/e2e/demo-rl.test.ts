import { describe, expect, it } from 'vitest';
import { runScript } from '../support/processes.js';

/** `npm run demo:rl` (minus npm): the RL loop through its own local stack, with a cut mid-rollout. */
describe('npm run demo:rl', () => {
  it('raises the mean reward over the API, cuts and resumes rollouts exactly, and exits 0', async () => {
    const { child, output: printed, exited } = runScript('local/demos/demo-rl.ts');
    try {
      expect(await exited, printed()).toBe(0);
      // Not a TTY here: one plain line per step.
      const rewards = [...printed().matchAll(/^ {2}step +\d+\/12 +reward (\d\.\d+)/gm)].map((m) =>
        Number(m[1]),
      );
      expect(rewards).toHaveLength(12);
      const [, before, after] = /^ {2}reward +(\d\.\d+) -> (\d\.\d+) over 12 steps/m.exec(printed()) ?? [];
      expect(Number(after) - Number(before)).toBeGreaterThanOrEqual(0.25);
      expect(Number(after)).toBe(rewards.at(-1));
      const resumed = Number(/^ {2}cut and resumed +(\d+) rollouts/m.exec(printed())?.[1]);
      expect(resumed).toBeGreaterThan(0);
      expect(printed()).toMatch(
        /sampled again without a cut: the same tokens and logprobs for all \d+ rollouts/,
      );
      // The policy-gradient loss itself, not a stand-in.
      expect(printed()).toMatch(/loss_fn +importance_sampling/);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 120_000);
});
