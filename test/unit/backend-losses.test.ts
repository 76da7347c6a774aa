import { describe, expect, it } from 'vitest';
import type { BackendState, Datum, ForwardBackwardInput } from '../../shared/backend/backend.js';
import type { PassDatum } from '../../shared/backend/reference/inputs.js';
import { lossFunction } from '../../shared/backend/reference/losses.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { asReferenceState, type ReferenceState } from '../../shared/backend/reference/state.js';
import { float32Tensor, int64Tensor } from '../../shared/backend/tensor.js';
import { expectMatchesFiniteDifferences } from '../support/finite-difference.js';
import { clip, lossFormula, RL_LOSSES, type RlLoss } from '../support/loss-formulas.js';
import { seededRandom } from '../support/seeded-random.js';

/**
 * Tinker's policy-gradient losses (importance_sampling, ppo, cispo, dro) and cross_entropy's linearity on
 * the reference backend: values against the formulas, slopes and adapter gradients against central
 * finite differences (L3), metrics that merge across chunks as the SDK merges them.
 */

const backend = new ReferenceBackend();
const BASE = 'Qwen/Qwen3-4B';

const random = seededRandom;

/**
 * d formula / d lp by central differences. cispo's clip(r) is a stop-gradient: it is held at its value
 * at lp, which is what sg means.
 */
function numericSlope(
  loss: RlLoss,
  lp: number,
  q: number,
  a: number,
  config: Record<string, number>,
): number {
  const h = 1e-6;
  if (loss === 'cispo') {
    const frozen = clip(
      Math.exp(lp - q),
      config.clip_low_threshold ?? 0.8,
      config.clip_high_threshold ?? 1.2,
    );
    return (-frozen * (lp + h) * a - -frozen * (lp - h) * a) / (2 * h);
  }
  return (lossFormula(loss, lp + h, q, a, config) - lossFormula(loss, lp - h, q, a, config)) / (2 * h);
}

/** Ratios kept 0.02 away from the clip bounds so no finite difference straddles a kink. */
function ratioAwayFromBounds(next: () => number, lo: number, hi: number): number {
  for (;;) {
    const r = 0.4 + 1.6 * next();
    if (Math.abs(r - lo) > 0.02 && Math.abs(r - hi) > 0.02) return r;
  }
}

describe('policy-gradient losses: values and slopes per target', () => {
  const configs: Record<RlLoss, Record<string, number>[]> = {
    importance_sampling: [{}],
    ppo: [{}, { clip_low_threshold: 0.9, clip_high_threshold: 1.1 }],
    cispo: [{}, { clip_low_threshold: 0.5, clip_high_threshold: 1.5 }],
    dro: [{}, { beta: 0.3 }, { beta: 0 }],
  };
  const cases = RL_LOSSES.flatMap((loss) => configs[loss].map((config) => ({ loss, config })));

  it.each(cases)('$loss $config: value is the formula, slope its derivative', ({ loss, config }) => {
    const next = random(17);
    const n = 400;
    const lps = Array.from({ length: n }, () => -0.05 - 6 * next());
    const lo = config.clip_low_threshold ?? 0.8;
    const hi = config.clip_high_threshold ?? 1.2;
    const ratios = lps.map(() => ratioAwayFromBounds(next, lo, hi));
    // q is float32 on the wire: the actual ratio is recomputed from the rounded q.
    const q = Float32Array.from(lps, (lp, i) => lp - Math.log(ratios[i] as number));
    const a = Float32Array.from(lps, () => (next() * 4 - 2) * (next() < 0.1 ? 0 : 1));
    const datum: PassDatum = {
      field: 'data[0]',
      tokens: new Int32Array(n),
      targets: new Int32Array(n),
      targetShape: [n],
      perPosition: 1,
      lossFnInputs: { logprobs: float32Tensor(q), advantages: float32Tensor(a) },
    };
    const { loss: fn, config: resolved } = lossFunction(loss, config);
    const terms = fn.forDatum(datum, resolved);
    let inside = 0;
    let outside = 0;
    let positive = 0;
    let negative = 0;
    for (let i = 0; i < n; i++) {
      const [lp, qi, ai] = [lps[i] as number, q[i] as number, a[i] as number];
      const r = Math.exp(lp - qi);
      if (r >= lo && r <= hi) inside += 1;
      else outside += 1;
      if (ai > 0) positive += 1;
      if (ai < 0) negative += 1;
      const expected = lossFormula(loss, lp, qi, ai, config);
      expect(terms.value(i, lp)).toBeCloseTo(expected, 12);
      const numeric = numericSlope(loss, lp, qi, ai, config);
      expect(Math.abs(terms.slope(i, lp) - numeric)).toBeLessThan(1e-7 + 1e-7 * Math.abs(numeric));
      expect(terms.weight(i)).toBe(1);
      expect(terms.ratio?.(i, lp)).toBeCloseTo(r, 12);
      if (loss === 'ppo' || loss === 'cispo') expect(terms.clipped?.(i, lp)).toBe(r < lo || r > hi);
    }
    // The sample covers both sides of the clip range and both signs of A.
    expect(Math.min(inside, outside, positive, negative)).toBeGreaterThan(25);
  });

  it("ppo's clipped branch has zero slope; cispo's slope is -clip(r) A whatever r", () => {
    const datum = (q: number, a: number): PassDatum => ({
      field: 'data[0]',
      tokens: new Int32Array(1),
      targets: new Int32Array(1),
      targetShape: [1],
      perPosition: 1,
      lossFnInputs: { logprobs: float32Tensor([q]), advantages: float32Tensor([a]) },
    });
    const ppo = lossFunction('ppo', {});
    const cispo = lossFunction('cispo', {});
    const lp = -1;
    // r = e^0.5 > 1.2 with A > 0: the clipped term 1.2 A is the smaller, constant in lp.
    expect(ppo.loss.forDatum(datum(-1.5, 2), ppo.config).slope(0, lp)).toBe(0);
    expect(ppo.loss.forDatum(datum(-1.5, 2), ppo.config).value(0, lp)).toBeCloseTo(-2.4, 12);
    // r > 1.2 with A < 0: the unclipped term is the smaller, so it keeps its slope -r A.
    expect(ppo.loss.forDatum(datum(-1.5, -2), ppo.config).slope(0, lp)).toBeCloseTo(2 * Math.exp(0.5), 12);
    // r = e^-0.5 < 0.8 with A < 0: clipped again.
    expect(ppo.loss.forDatum(datum(-0.5, -2), ppo.config).slope(0, lp)).toBe(0);
    expect(cispo.loss.forDatum(datum(-1.5, 2), cispo.config).slope(0, lp)).toBeCloseTo(-2.4, 12);
    expect(cispo.loss.forDatum(datum(-0.5, -2), cispo.config).slope(0, lp)).toBeCloseTo(1.6, 12);
  });

  it('config defaults: ppo and cispo clip to [0.8, 1.2], dro uses beta = 0.05', () => {
    expect(lossFunction('ppo', {}).config).toEqual({ clip_low_threshold: 0.8, clip_high_threshold: 1.2 });
    expect(lossFunction('cispo', { clip_high_threshold: 2 }).config).toEqual({
      clip_low_threshold: 0.8,
      clip_high_threshold: 2,
    });
    expect(lossFunction('dro', {}).config).toEqual({ beta: 0.05 });
    expect(lossFunction('importance_sampling', {}).config).toEqual({});
  });
});

const bytes = (text: string) => [...Buffer.from(text, 'utf8')];

function textDatum(text: string, inputs: Record<string, number[]> = {}): Datum {
  const all = bytes(text);
  const tokens = all.slice(0, -1);
  const extra = Object.fromEntries(
    Object.entries(inputs).map(([name, values]) => [name, float32Tensor(values)]),
  );
  return {
    model_input: { chunks: [{ type: 'encoded_text', tokens: Int32Array.from(tokens) }] },
    loss_fn_inputs: { target_tokens: int64Tensor(all.slice(1)), ...extra },
  };
}

const pass = (data: Datum[], loss_fn: string, loss_fn_config: Record<string, number> = {}) =>
  ({ data, loss_fn, loss_fn_config }) satisfies ForwardBackwardInput;

async function trainedModel(): Promise<ReferenceState> {
  let state: BackendState = await backend.createModel({
    base_model: BASE,
    lora_config: { rank: 3, seed: 7 },
  });
  for (let i = 0; i < 3; i++) {
    state = (await backend.forwardBackward(state, pass([textDatum('the quick brown fox')], 'cross_entropy')))
      .state;
    state = (await backend.optimStep(state, { learning_rate: 0.05 })).state;
  }
  return asReferenceState(state);
}

const gradOf = async (state: BackendState, input: ForwardBackwardInput) =>
  asReferenceState((await backend.forwardBackward(state, input)).state).grad as Float64Array;

const TEXTS = ['abcabcabd', 'zebra crossing!', 'policy gradients'];

/**
 * Datums over TEXTS with q set from the model's own logprobs so each ratio is drawn away from the clip
 * bounds (inside and outside [lo, hi]), and advantages of both signs.
 */
async function rlData(state: ReferenceState, seed: number, lo = 0.8, hi = 1.2): Promise<Datum[]> {
  const next = random(seed);
  const scored = await backend.forward(
    state,
    pass(
      TEXTS.map((text) => textDatum(text)),
      'cross_entropy',
    ),
  );
  return TEXTS.map((text, d) => {
    const lps = scored.loss_fn_outputs[d]?.logprobs?.data as Float32Array;
    const q = Array.from(lps, (lp) => lp - Math.log(ratioAwayFromBounds(next, lo, hi)));
    const advantages = Array.from(lps, () => next() * 4 - 2);
    return textDatum(text, { logprobs: q, advantages });
  });
}

/** The adapter gradient against central finite differences of `loss:sum` of `surrogate`. */
async function expectGradientMatches(
  state: ReferenceState,
  input: ForwardBackwardInput,
  surrogate: ForwardBackwardInput = input,
): Promise<void> {
  const lossSum = async (params: Float64Array) =>
    (await backend.forward({ ...state, params } as ReferenceState, surrogate)).metrics['loss:sum'] as number;
  const grad = await gradOf(state, input);
  await expectMatchesFiniteDifferences(lossSum, state.params, grad, { minNorm: 0.05, relativeError: 1e-6 });
}

describe('policy-gradient losses: adapter gradients (finite differences)', () => {
  it.each([
    ['importance_sampling', {}],
    ['ppo', {}],
    ['ppo', { clip_low_threshold: 0.9, clip_high_threshold: 1.1 }],
    ['dro', { beta: 0.2 }],
  ] as [string, Record<string, number>][])('%s %o', async (loss, config) => {
    const state = await trainedModel();
    const data = await rlData(state, 5, config.clip_low_threshold ?? 0.8, config.clip_high_threshold ?? 1.2);
    await expectGradientMatches(state, pass(data, loss, config));
  });

  it('cispo: the gradient of -c lp A with c = clip(r) held fixed, i.e. cross_entropy with weights c A', async () => {
    const state = await trainedModel();
    const data = await rlData(state, 6);
    const scored = await backend.forward(state, pass(data, 'cispo'));
    const surrogate = data.map((datum, d) => {
      const lps = scored.loss_fn_outputs[d]?.logprobs?.data as Float32Array;
      const q = datum.loss_fn_inputs.logprobs?.data as Float32Array;
      const a = datum.loss_fn_inputs.advantages?.data as Float32Array;
      const weights = Array.from(
        lps,
        (lp, i) => clip(Math.exp(lp - (q[i] as number)), 0.8, 1.2) * (a[i] as number),
      );
      return { ...datum, loss_fn_inputs: { ...datum.loss_fn_inputs, weights: float32Tensor(weights) } };
    });
    await expectGradientMatches(state, pass(data, 'cispo'), pass(surrogate, 'cross_entropy'));
  });
});

describe('policy-gradient losses: outputs and metrics', () => {
  it.each(RL_LOSSES)(
    '%s: elementwise_loss and loss:sum are the formula on the reported logprobs',
    async (loss) => {
      const state = await trainedModel();
      const data = await rlData(state, 9);
      const config: Record<string, number> = loss === 'dro' ? { beta: 0.1 } : {};
      const { result } = await backend.forwardBackward(state, pass(data, loss, config));
      expect(result.loss_fn_output_type).toBe('ArrayRecord');
      let sum = 0;
      let clipped = 0;
      let ratioMeans = 0;
      let clipMeans = 0;
      let ratioMin = Number.POSITIVE_INFINITY;
      data.forEach((datum, d) => {
        const out = result.loss_fn_outputs[d];
        const lps = out?.logprobs?.data as Float32Array;
        const elementwise = out?.elementwise_loss?.data as Float32Array;
        expect(out?.logprobs?.shape).toEqual(datum.loss_fn_inputs.target_tokens?.shape);
        const q = datum.loss_fn_inputs.logprobs?.data as Float32Array;
        const a = datum.loss_fn_inputs.advantages?.data as Float32Array;
        let ratioSum = 0;
        clipped = 0;
        lps.forEach((lp, i) => {
          const expected = lossFormula(loss, lp, q[i] as number, a[i] as number, config);
          expect(Math.abs((elementwise[i] as number) - expected)).toBeLessThan(
            1e-5 * (1 + Math.abs(expected)),
          );
          sum += expected;
          const r = Math.exp(lp - (q[i] as number));
          ratioSum += r;
          ratioMin = Math.min(ratioMin, r);
          if (r < 0.8 || r > 1.2) clipped += 1;
        });
        ratioMeans += ratioSum / lps.length;
        clipMeans += clipped / lps.length;
      });
      const metrics = result.metrics;
      expect(Math.abs((metrics['loss:sum'] as number) - sum)).toBeLessThan(1e-5 * (1 + Math.abs(sum)));
      expect(metrics['ratio:mean']).toBeCloseTo(ratioMeans / data.length, 5);
      expect(metrics['ratio:min']).toBeCloseTo(ratioMin, 5);
      expect(metrics['weights_version:max']).toBe(3);
      if (loss === 'ppo' || loss === 'cispo') {
        expect(metrics['clip_fraction:mean']).toBeCloseTo(clipMeans / data.length, 12);
        expect(metrics['clip_fraction:mean']).toBeGreaterThan(0);
      } else {
        expect(metrics['clip_fraction:mean']).toBeUndefined();
      }
      for (const key of Object.keys(metrics)) expect(key).toMatch(/^[a-z_]+:(mean|sum|min|max)$/);
    },
  );

  it('metrics of chunks merged as the SDK merges them equal the metrics of one call', async () => {
    const state = await trainedModel();
    const data = await rlData(state, 11);
    const whole = (await backend.forward(state, pass(data, 'ppo'))).metrics;
    const chunks = [data.slice(0, 1), data.slice(1)];
    const parts = await Promise.all(
      chunks.map(async (chunk) => (await backend.forward(state, pass(chunk, 'ppo'))).metrics),
    );
    const merged: Record<string, number> = {};
    for (const key of Object.keys(whole)) {
      const values = parts.map((part) => part[key] as number);
      const reduction = key.split(':')[1];
      if (reduction === 'sum') merged[key] = values.reduce((x, y) => x + y, 0);
      if (reduction === 'min') merged[key] = Math.min(...values);
      if (reduction === 'max') merged[key] = Math.max(...values);
      if (reduction === 'mean') {
        merged[key] = values.reduce((acc, v, c) => acc + v * (chunks[c]?.length ?? 0), 0) / data.length;
      }
    }
    for (const key of ['loss:sum', 'ratio:mean', 'ratio:min', 'ratio:max', 'clip_fraction:mean']) {
      expect(merged[key]).toBeCloseTo(whole[key] as number, 10);
    }
  });

  it('a 2-D target_tokens [N, K] takes logprobs and advantages of the same shape', async () => {
    const state = await trainedModel();
    const datum: Datum = {
      model_input: { chunks: [{ type: 'encoded_text', tokens: Int32Array.of(1, 2) }] },
      loss_fn_inputs: {
        target_tokens: int64Tensor([2, 5, 3, 9], [2, 2]),
        logprobs: float32Tensor([-5, -5, -5, -5], [2, 2]),
        advantages: float32Tensor([1, -1, 0.5, 2], [2, 2]),
      },
    };
    const { result } = await backend.forwardBackward(state, pass([datum], 'importance_sampling'));
    const out = result.loss_fn_outputs[0];
    expect(out?.logprobs?.shape).toEqual([2, 2]);
    const lps = out?.logprobs?.data as Float32Array;
    const a = [1, -1, 0.5, 2];
    const perTarget = Array.from(lps, (lp, i) => -Math.exp(lp + 5) * (a[i] as number));
    const elementwise = out?.elementwise_loss?.data as Float32Array;
    expect(elementwise[0]).toBeCloseTo((perTarget[0] as number) + (perTarget[1] as number), 4);
    expect(elementwise[1]).toBeCloseTo((perTarget[2] as number) + (perTarget[3] as number), 4);
  });
});

describe('cross_entropy is exactly linear in its weights (L2)', () => {
  it('loss and gradient of a*w1 + b*w2 are a*(those of w1) + b*(those of w2), any sign, no normalisation', async () => {
    const state = await trainedModel();
    const text = 'linear in weights';
    const n = bytes(text).length - 1;
    const next = random(3);
    const w1 = Array.from({ length: n }, () => next() * 4 - 2);
    const w2 = Array.from({ length: n }, () => next() * 4 - 2);
    // Weights summing to (about) zero and to a negative number: no division by their sum anywhere.
    const w2Centred = w2.map((w) => w - w2.reduce((x, y) => x + y, 0) / n);
    const [a, b] = [-1.5, 0.75];
    const combined = w1.map((w, i) => a * w + b * (w2Centred[i] as number));
    const run = async (weights: number[]) => {
      const input = pass([textDatum(text, { weights })], 'cross_entropy');
      const { result } = await backend.forwardBackward(state, input);
      return { loss: result.metrics['loss:sum'] as number, grad: await gradOf(state, input) };
    };
    const [r1, r2, rc] = [await run(w1), await run(w2Centred), await run(combined)];
    expect(rc.loss).toBeCloseTo(a * r1.loss + b * r2.loss, 4);
    const scale = Math.max(...rc.grad.map(Math.abs));
    rc.grad.forEach((g, i) => {
      expect(Math.abs(g - (a * (r1.grad[i] as number) + b * (r2.grad[i] as number)))).toBeLessThan(
        1e-5 * scale,
      );
    });
    // The loss is -sum w lp exactly, with the reported logprobs.
    const result = await backend.forward(
      state,
      pass([textDatum(text, { weights: combined })], 'cross_entropy'),
    );
    const lps = result.loss_fn_outputs[0]?.logprobs?.data as Float32Array;
    const expected = Array.from(lps).reduce((acc, lp, i) => acc - Math.fround(combined[i] as number) * lp, 0);
    expect(result.metrics['loss:sum']).toBeCloseTo(expected, 4);
  });

  it('absent weights are ones', async () => {
    const state = await trainedModel();
    const text = 'ones';
    const ones = bytes(text)
      .slice(1)
      .map(() => 1);
    const absent = await backend.forwardBackward(state, pass([textDatum(text)], 'cross_entropy'));
    const given = await backend.forwardBackward(
      state,
      pass([textDatum(text, { weights: ones })], 'cross_entropy'),
    );
    expect(absent.result).toEqual(given.result);
    expect(asReferenceState(absent.state).grad).toEqual(asReferenceState(given.state).grad);
  });
});
