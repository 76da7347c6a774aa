/**
 * Tinker's policy-gradient losses written out as documented (per token, float64), the oracle the
 * backend's losses and the server's answers are checked against. `lp` is the learner's logprob, `q`
 * the sampler's (`logprobs` input), `a` the advantage.
 */

export const RL_LOSSES = ['importance_sampling', 'ppo', 'cispo', 'dro'] as const;
export type RlLoss = (typeof RL_LOSSES)[number];

export const clip = (x: number, lo: number, hi: number) => Math.min(Math.max(x, lo), hi);

export function lossFormula(
  loss: RlLoss,
  lp: number,
  q: number,
  a: number,
  config: Readonly<Record<string, number>>,
): number {
  const r = Math.exp(lp - q);
  const lo = config.clip_low_threshold ?? 0.8;
  const hi = config.clip_high_threshold ?? 1.2;
  switch (loss) {
    case 'importance_sampling':
      return -r * a;
    case 'ppo':
      return -Math.min(r * a, clip(r, lo, hi) * a);
    case 'cispo':
      return -clip(r, lo, hi) * lp * a;
    case 'dro': {
      const beta = config.beta ?? 0.05;
      return -(lp * a - (beta / 2) * (lp - q) ** 2);
    }
  }
}
