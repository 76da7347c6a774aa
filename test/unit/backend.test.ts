import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { BackendState, Datum, ForwardBackwardInput } from '../../shared/backend/backend.js';
import { type DatumJson, passInputFromJson } from '../../shared/backend/pass-input.js';
import { DIM, VOCAB } from '../../shared/backend/reference/model.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { asReferenceState, type ReferenceState } from '../../shared/backend/reference/state.js';
import { float32Tensor, int64Tensor } from '../../shared/backend/tensor.js';
import { InfrastructureError, StepUserError } from '../../shared/base/errors.js';
import { expectMatchesFiniteDifferences } from '../support/finite-difference.js';

const backend = new ReferenceBackend();
const BASE = 'Qwen/Qwen3-4B';

const bytes = (text: string) => [...Buffer.from(text, 'utf8')];

/** Next-token datum over the bytes of `text`, with optional per-token weights, as the JSON wire sends it. */
function textDatum(text: string, weights?: number[]): DatumJson {
  const all = bytes(text);
  const tokens = all.slice(0, -1);
  const w = weights ?? tokens.map(() => 1);
  return {
    model_input: { chunks: [{ type: 'encoded_text', tokens }] },
    loss_fn_inputs: {
      target_tokens: { data: all.slice(1), dtype: 'int64', shape: [tokens.length] },
      weights: { data: w, dtype: 'float32', shape: [w.length] },
    },
  };
}

/** The backend's typed input, converted as the worker converts a stored JSON payload. */
const ce = (data: DatumJson[], loss_fn = 'cross_entropy'): ForwardBackwardInput =>
  passInputFromJson({ data, loss_fn }, 'input');

/** A model whose adapter B is non-zero (so both A and B have gradients), from deterministic steps. */
async function trainedModel(rank = 4, steps = 3): Promise<BackendState> {
  let state = await backend.createModel({ base_model: BASE, lora_config: { rank, seed: 7 } });
  for (let i = 0; i < steps; i++) {
    state = (await backend.forwardBackward(state, ce([textDatum('the quick brown fox')]))).state;
    state = (await backend.optimStep(state, { learning_rate: 0.05 })).state;
  }
  return state;
}

function withParams(state: BackendState, params: Float64Array): ReferenceState {
  return { ...asReferenceState(state), params };
}

/** The accumulated gradient of `input` against central finite differences of `loss:sum`, per weight. */
async function expectFiniteDifferenceGradient(input: ForwardBackwardInput): Promise<void> {
  const state = asReferenceState(await trainedModel(3));
  const loss = async (params: Float64Array) =>
    (await backend.forward(withParams(state, params), input)).metrics['loss:sum'] as number;
  const grad = asReferenceState((await backend.forwardBackward(state, input)).state).grad as Float64Array;
  expect(grad.length).toBe(2 * DIM * 3);
  await expectMatchesFiniteDifferences(loss, state.params, grad, { minNorm: 0.1, relativeError: 1e-7 });
}

const sha = (data: Uint8Array) => createHash('sha256').update(data).digest('hex');

describe('reference backend: model and gradients', () => {
  it('a new adapter equals the base model (B starts at zero)', async () => {
    const a = await backend.createModel({ base_model: BASE, lora_config: { rank: 8, seed: 1 } });
    const b = await backend.createModel({ base_model: BASE, lora_config: { rank: 2, seed: 99 } });
    const input = ce([textDatum('hello there')]);
    const [ra, rb] = [await backend.forward(a, input), await backend.forward(b, input)];
    expect(ra.loss_fn_outputs).toEqual(rb.loss_fn_outputs);
    const other = await backend.createModel({ base_model: 'another-base', lora_config: { rank: 8 } });
    expect((await backend.forward(other, input)).metrics['loss:sum']).not.toBe(ra.metrics['loss:sum']);
  });

  it('adapter gradients match central finite differences', async () => {
    await expectFiniteDifferenceGradient(
      ce([textDatum('abcabcabd', [1, 0.5, 0, 2, 1, 1, 1, 3]), textDatum('zebra!', [1, 1, 1, 1, 0.25])]),
    );
  });

  it('gradients sum across forward_backward calls; forward leaves the state alone', async () => {
    const state = await trainedModel();
    const a = ce([textDatum('first batch')]);
    const b = ce([textDatum('second one')]);
    const once = asReferenceState((await backend.forwardBackward(state, a)).state).grad as Float64Array;
    const twice = asReferenceState(
      (await backend.forwardBackward((await backend.forwardBackward(state, a)).state, a)).state,
    ).grad as Float64Array;
    expect(twice).toEqual(once.map((g) => 2 * g));
    const gb = asReferenceState((await backend.forwardBackward(state, b)).state).grad as Float64Array;
    const ab = asReferenceState(
      (await backend.forwardBackward((await backend.forwardBackward(state, a)).state, b)).state,
    ).grad as Float64Array;
    expect(ab).toEqual(once.map((g, i) => g + (gb[i] as number)));
    const before = await backend.serializeState(state);
    await backend.forward(state, a);
    await backend.forwardBackward(state, a);
    expect(await backend.serializeState(state)).toEqual(before);
  });

  it('reports logprobs, elementwise loss and name:reduction metrics as defined', async () => {
    const state = await trainedModel();
    const weights = [1, 2, 0, 0.5];
    const { result } = await backend.forwardBackward(state, ce([textDatum('wxyz!', weights)]));
    expect(result.loss_fn_output_type).toBe('ArrayRecord');
    const out = result.loss_fn_outputs[0];
    expect(out?.logprobs?.dtype).toBe('float32');
    expect(out?.logprobs?.shape).toEqual([4]);
    expect(out?.elementwise_loss?.shape).toEqual([4]);
    const logprobs = out?.logprobs?.data as Float32Array;
    expect(logprobs).toBeInstanceOf(Float32Array);
    for (const lp of logprobs) expect(lp).toBeLessThan(0);
    const elementwise = out?.elementwise_loss?.data as Float32Array;
    for (const [t, l] of elementwise.entries()) {
      expect(l).toBeCloseTo(-(weights[t] as number) * (logprobs[t] as number), 5);
    }
    const sum = weights.reduce((acc, w, t) => acc - w * (logprobs[t] as number), 0);
    expect(result.metrics['loss:sum']).toBeCloseTo(sum, 5);
    expect(result.metrics['loss:mean']).toBeCloseTo(sum / 3.5, 5);
    expect(result.metrics['weights_version:max']).toBe(3);
    const optim = await backend.optimStep(state, { learning_rate: 0.01 });
    for (const key of [...Object.keys(result.metrics), ...Object.keys(optim.result.metrics)]) {
      expect(key).toMatch(/^[a-z_]+:(mean|sum|min|max|slack|hash_unordered|unique)$/);
    }
    const zero = await backend.forward(state, ce([textDatum('ab', [0])]));
    expect(zero.metrics['loss:mean']).toBe(0);
  });
});

/**
 * Top-k style datum over `text` (targets [N, K]): per position the true next byte, then K - 1 other
 * bytes, with optional weights [N, K] (row-major).
 */
function topKDatum(text: string, k: number, weights?: number[]): DatumJson {
  const all = bytes(text);
  const tokens = all.slice(0, -1);
  const targets = tokens.flatMap((_, n) =>
    Array.from({ length: k }, (_, j) => ((all[n + 1] as number) + 37 * j) % VOCAB),
  );
  const shape = [tokens.length, k];
  return {
    model_input: { chunks: [{ type: 'encoded_text', tokens }] },
    loss_fn_inputs: {
      target_tokens: { data: targets, dtype: 'int64', shape },
      ...(weights ? { weights: { data: weights, dtype: 'float32', shape } } : {}),
    },
  };
}

/** Column `k` of a top-k datum as a 1-D datum. */
function column(datum: DatumJson, k: number): DatumJson {
  const pick = (name: string) => {
    const tensor = datum.loss_fn_inputs[name];
    if (tensor === undefined) return {};
    const [n, width] = tensor.shape as [number, number];
    const data = Array.from({ length: n }, (_, i) => tensor.data[i * width + k] as number);
    return { [name]: { data, dtype: tensor.dtype, shape: [n] } };
  };
  return { model_input: datum.model_input, loss_fn_inputs: { ...pick('target_tokens'), ...pick('weights') } };
}

const gradOf = async (state: BackendState, input: ForwardBackwardInput) =>
  asReferenceState((await backend.forwardBackward(state, input)).state).grad as Float64Array;

describe('reference backend: 2-D cross_entropy (top-k targets)', () => {
  const K = 3;
  // Dyadic weights, exact in float32, some zero (no loss, no gradient).
  const weights = Array.from({ length: 8 * K }, (_, i) => [0.5, 0.25, 0.125, 0, 1, 2][i % 6] as number);
  const datum = topKDatum('abcabcabd', K, weights);

  it("logprobs are [N, K], one per target; a position's loss sums its targets", async () => {
    const state = await trainedModel();
    const { result } = await backend.forwardBackward(state, ce([datum]));
    const out = result.loss_fn_outputs[0];
    expect(out?.logprobs?.shape).toEqual([8, K]);
    expect(out?.elementwise_loss?.shape).toEqual([8]);
    const logprobs = out?.logprobs?.data as Float32Array;
    const losses = out?.elementwise_loss?.data as Float32Array;
    let sum = 0;
    for (let k = 0; k < K; k++) {
      // The same targets as a 1-D datum give the same logprobs, bit for bit.
      const single = await backend.forward(state, ce([column(datum, k)]));
      const columnLogprobs = single.loss_fn_outputs[0]?.logprobs?.data as Float32Array;
      for (let n = 0; n < 8; n++) expect(logprobs[n * K + k]).toBe(columnLogprobs[n]);
      sum += single.metrics['loss:sum'] as number;
    }
    for (let n = 0; n < 8; n++) {
      let expected = 0;
      for (let k = 0; k < K; k++)
        expected -= (weights[n * K + k] as number) * (logprobs[n * K + k] as number);
      expect(losses[n]).toBeCloseTo(expected, 5);
    }
    expect(result.metrics['loss:sum']).toBeCloseTo(sum, 10);
    const weightSum = weights.reduce((a, w) => a + w, 0);
    expect(result.metrics['loss:mean']).toBe((result.metrics['loss:sum'] as number) / weightSum);
  });

  it('the gradient is the sum of the per-column gradients', async () => {
    const state = await trainedModel();
    const grad = await gradOf(state, ce([datum]));
    const columns = await Promise.all(
      Array.from({ length: K }, (_, k) => gradOf(state, ce([column(datum, k)]))),
    );
    for (let i = 0; i < grad.length; i++) {
      const expected = columns.reduce((acc, g) => acc + (g[i] as number), 0);
      expect(Math.abs((grad[i] as number) - expected)).toBeLessThan(1e-12 * (1 + Math.abs(expected)));
    }
  });

  it('adapter gradients match central finite differences', async () => {
    await expectFiniteDifferenceGradient(ce([datum, topKDatum('zebra!', 2)]));
  });

  it('K = 1 is the 1-D loss bit for bit (logprobs keep the [N, 1] shape)', async () => {
    const state = await trainedModel();
    const flat = [1, 0.5, 0, 2, 1, 1, 1, 3];
    const twoD = ce([topKDatum('abcabcabd', 1, flat)]);
    const oneD = ce([textDatum('abcabcabd', flat)]);
    const [a, b] = [await backend.forwardBackward(state, twoD), await backend.forwardBackward(state, oneD)];
    expect(a.result.metrics).toEqual(b.result.metrics);
    expect(a.result.loss_fn_outputs[0]?.elementwise_loss).toEqual(
      b.result.loss_fn_outputs[0]?.elementwise_loss,
    );
    expect(a.result.loss_fn_outputs[0]?.logprobs?.data).toEqual(b.result.loss_fn_outputs[0]?.logprobs?.data);
    expect(a.result.loss_fn_outputs[0]?.logprobs?.shape).toEqual([8, 1]);
    expect(await backend.serializeState(a.state)).toEqual(await backend.serializeState(b.state));
  });

  it('sparse CSR targets and weights, as the SDK sends top-k, equal their dense form', async () => {
    const state = await trainedModel();
    const tokens = bytes('abcd').slice(0, 3);
    // Rows: {0: 98, 1: 120}, {0: 99}, {1: 100}; absent entries are target 0 with weight 0.
    const crow = [0, 2, 3, 4];
    const col = [0, 1, 0, 1];
    const sparse: DatumJson = {
      model_input: { chunks: [{ tokens }] },
      loss_fn_inputs: {
        target_tokens: {
          data: [98, 120, 99, 100],
          dtype: 'int64',
          shape: [3, 2],
          sparse_crow_indices: crow,
          sparse_col_indices: col,
        },
        weights: {
          data: [0.75, 0.25, 1, 1],
          dtype: 'float32',
          shape: [3, 2],
          sparse_crow_indices: crow,
          sparse_col_indices: col,
        },
      },
    };
    const dense: DatumJson = {
      model_input: { chunks: [{ tokens }] },
      loss_fn_inputs: {
        target_tokens: { data: [98, 120, 99, 0, 0, 100], dtype: 'int64', shape: [3, 2] },
        weights: { data: [0.75, 0.25, 1, 0, 0, 1], dtype: 'float32', shape: [3, 2] },
      },
    };
    const [a, b] = [
      await backend.forwardBackward(state, ce([sparse])),
      await backend.forwardBackward(state, ce([dense])),
    ];
    expect(a.result).toEqual(b.result);
    expect(await backend.serializeState(a.state)).toEqual(await backend.serializeState(b.state));
  });
});

describe('reference backend: Adam', () => {
  it('matches a hand computation of two steps (bias correction, decoupled decay, clipping)', async () => {
    // Trained weights with a fresh optimizer, so the steps are Adam's first and second.
    const start = { ...asReferenceState(await trainedModel(2)), moment1: null, moment2: null, adam_step: 0 };
    const first = { learning_rate: 0.01, beta1: 0.8, beta2: 0.9, eps: 1e-6, weight_decay: 0.1 };
    const second = {
      learning_rate: 0.02,
      beta1: 0.8,
      beta2: 0.9,
      eps: 1e-6,
      weight_decay: 0.1,
      grad_clip_norm: 0.05,
    };
    const withGrad1 = asReferenceState(
      (await backend.forwardBackward(start, ce([textDatum('adam one')]))).state,
    );
    const step1 = await backend.optimStep(withGrad1, first);
    const s1 = asReferenceState(step1.state);
    const withGrad2 = asReferenceState(
      (await backend.forwardBackward(s1, ce([textDatum('adam, two!')]))).state,
    );
    const step2 = await backend.optimStep(withGrad2, second);
    const s2 = asReferenceState(step2.state);

    const g1 = withGrad1.grad as Float64Array;
    const g2 = withGrad2.grad as Float64Array;
    const norm2 = Math.sqrt(g2.reduce((acc, g) => acc + g * g, 0));
    expect(norm2).toBeGreaterThan(0.05); // so clipping is exercised
    const clip = 0.05 / norm2;
    for (let i = 0; i < g1.length; i++) {
      const p0 = start.params[i] as number;
      const m1 = 0.2 * (g1[i] as number);
      const v1 = 0.1 * (g1[i] as number) ** 2;
      const p1 = p0 * (1 - 0.01 * 0.1) - (0.01 * (m1 / 0.2)) / (Math.sqrt(v1 / 0.1) + 1e-6);
      expect(s1.params[i]).toBeCloseTo(p1, 12);
      // Adam's first step moves each weight by about lr against its gradient's sign.
      if (Math.abs(g1[i] as number) > 1e-3) {
        expect(p0 * (1 - 0.001) - (s1.params[i] as number)).toBeCloseTo(0.01 * Math.sign(g1[i] as number), 4);
      }
      const g = (g2[i] as number) * clip;
      const m2 = 0.8 * m1 + 0.2 * g;
      const v2 = 0.9 * v1 + 0.1 * g * g;
      const p2 =
        p1 * (1 - 0.02 * 0.1) - (0.02 * (m2 / (1 - 0.8 ** 2))) / (Math.sqrt(v2 / (1 - 0.9 ** 2)) + 1e-6);
      expect(s2.params[i]).toBeCloseTo(p2, 12);
    }
    expect(step1.result.metrics['grad_norm:mean']).toBeCloseTo(
      Math.sqrt(g1.reduce((a, g) => a + g * g, 0)),
      12,
    );
    expect(step2.result.metrics['grad_norm:mean']).toBeCloseTo(norm2, 12);
    expect([s1.weights_version, s2.weights_version]).toEqual([
      start.weights_version + 1,
      start.weights_version + 2,
    ]);
    expect([s1.adam_step, s2.adam_step]).toEqual([1, 2]);
    expect(step2.result.metrics['weights_version:max']).toBe(s2.weights_version);
    expect(s2.grad).toBeNull();
  });

  it('loss falls when training repeatedly on a small dataset', async () => {
    let state = await backend.createModel({ base_model: BASE, lora_config: { rank: 16, seed: 3 } });
    const data = ce([textDatum('hello world'), textDatum('hello there'), textDatum('help me')]);
    const losses: number[] = [];
    for (let step = 0; step < 40; step++) {
      const { state: next, result } = await backend.forwardBackward(state, data);
      losses.push(result.metrics['loss:mean'] as number);
      state = (await backend.optimStep(next, { learning_rate: 0.05 })).state;
    }
    const final = (await backend.forward(state, data)).metrics['loss:mean'] as number;
    expect(final).toBeLessThan(0.5 * (losses[0] as number));
    expect(losses[20] as number).toBeLessThan(losses[0] as number);
  });
});

describe('reference backend: state bytes', () => {
  it('serialize/deserialize round-trips bit-exactly at every stage', async () => {
    const fresh = await backend.createModel({
      base_model: 'ünïcode/base',
      lora_config: { rank: 5, seed: -12 },
    });
    const accumulated = (await backend.forwardBackward(fresh, ce([textDatum('round trip')]))).state;
    const stepped = (await backend.optimStep(accumulated, { learning_rate: 0.1, weight_decay: 0.01 })).state;
    const pending = (await backend.forwardBackward(stepped, ce([textDatum('again')]))).state;
    for (const state of [fresh, accumulated, stepped, pending]) {
      const blob = await backend.serializeState(state);
      const back = await backend.deserializeState(blob);
      expect(await backend.serializeState(back)).toEqual(blob);
      const [a, b] = [asReferenceState(state), asReferenceState(back)];
      expect(Buffer.from(b.params.buffer)).toEqual(Buffer.from(a.params.buffer));
      expect(b.grad === null).toBe(a.grad === null);
      expect(b.moment1 === null).toBe(a.moment1 === null);
      expect({ ...b, params: 0, grad: 0, moment1: 0, moment2: 0 }).toEqual({
        ...a,
        params: 0,
        grad: 0,
        moment1: 0,
        moment2: 0,
      });
      // The restored state continues exactly like the original.
      const next = ce([textDatum('continue')]);
      const [ra, rb] = [
        await backend.forwardBackward(state, next),
        await backend.forwardBackward(back, next),
      ];
      expect(rb.result).toEqual(ra.result);
      expect(await backend.serializeState(rb.state)).toEqual(await backend.serializeState(ra.state));
    }
    // Compact: header + name + weights, moments only once they exist, the accumulator only while pending.
    const size = 2 * DIM * 5 * 8;
    expect((await backend.serializeState(fresh)).length).toBe(32 + 16 + size);
    expect((await backend.serializeState(stepped)).length).toBe(32 + 16 + 3 * size);
    expect((await backend.serializeState(pending)).length).toBe(32 + 16 + 4 * size);
  });

  it('is deterministic across processes: a fresh process produces the same bytes', async () => {
    const script = async () => {
      let state = await backend.createModel({ base_model: BASE, lora_config: { rank: 4, seed: 11 } });
      for (let i = 0; i < 3; i++) {
        const fb = await backend.forwardBackward(
          state,
          ce([textDatum('determinism'), textDatum('is bit exact')]),
        );
        state = (await backend.optimStep(fb.state, { learning_rate: 0.03, weight_decay: 0.01 })).state;
      }
      const fb = await backend.forwardBackward(state, ce([textDatum('pending grads')]));
      return `${sha(await backend.serializeState(fb.state))} ${JSON.stringify(fb.result)}`;
    };
    const here = await script();
    const moduleUrl = new URL('../../shared/backend/reference/reference-backend.ts', import.meta.url).href;
    const passInputUrl = new URL('../../shared/backend/pass-input.ts', import.meta.url).href;
    const code = `
      import { createHash } from 'node:crypto';
      const { ReferenceBackend } = await import(${JSON.stringify(moduleUrl)});
      const backend = new ReferenceBackend();
      const BASE = ${JSON.stringify(BASE)};
      const sha = (d) => createHash('sha256').update(d).digest('hex');
      const { passInputFromJson } = await import(${JSON.stringify(passInputUrl)});
      const textDatum = ${textDatum.toString()};
      const bytes = ${bytes.toString()};
      const ce = (data) => passInputFromJson({ data, loss_fn: 'cross_entropy' }, 'input');
      const script = ${script.toString()};
      process.stdout.write(await script());`;
    const there = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
      encoding: 'utf8',
    });
    expect(there).toBe(here);
  });

  it('exports and imports weights for save_weights / load_weights', async () => {
    const saved = await trainedModel(4, 2);
    const training = await backend.exportWeights(saved, 'training');
    const sampler = await backend.exportWeights(saved, 'sampler');
    expect(sampler.length).toBeLessThan(training.length);
    const later = (await backend.forwardBackward(await trainedModel(4, 4), ce([textDatum('x y')]))).state;

    const withOptimizer = asReferenceState(await backend.importWeights(later, training, { optimizer: true }));
    const savedRef = asReferenceState(saved);
    expect(withOptimizer.params).toEqual(savedRef.params);
    expect(withOptimizer.moment1).toEqual(savedRef.moment1);
    expect(withOptimizer.adam_step).toBe(savedRef.adam_step);
    expect(withOptimizer.grad).toBeNull();
    expect(withOptimizer.weights_version).toBe(later.weights_version);

    const weightsOnly = asReferenceState(await backend.importWeights(later, sampler, { optimizer: false }));
    expect(weightsOnly.params).toEqual(savedRef.params);
    expect([weightsOnly.moment1, weightsOnly.moment2, weightsOnly.adam_step]).toEqual([null, null, 0]);
    const input = ce([textDatum('same weights, same answer')]);
    expect((await backend.forward(weightsOnly, input)).loss_fn_outputs).toEqual(
      (await backend.forward(saved, input)).loss_fn_outputs,
    );

    await expect(backend.importWeights(later, sampler, { optimizer: true })).rejects.toThrow(/optimizer/);
    const otherRank = await backend.createModel({ base_model: BASE, lora_config: { rank: 3 } });
    await expect(backend.importWeights(otherRank, training, { optimizer: false })).rejects.toThrow(/rank 4/);
    const otherBase = await backend.createModel({ base_model: 'other', lora_config: { rank: 4 } });
    await expect(backend.importWeights(otherBase, training, { optimizer: false })).rejects.toBeInstanceOf(
      StepUserError,
    );
    const stateBlob = await backend.serializeState(saved);
    await expect(backend.importWeights(later, stateBlob, { optimizer: false })).rejects.toBeInstanceOf(
      StepUserError,
    );
    await expect(backend.deserializeState(training)).rejects.toBeInstanceOf(InfrastructureError);
    await expect(
      backend.deserializeState(stateBlob.subarray(0, stateBlob.length - 8)),
    ).rejects.toBeInstanceOf(InfrastructureError);
    await expect(backend.deserializeState(new Uint8Array(64))).rejects.toThrow(/magic/);
  });
});

describe('reference backend: user errors', () => {
  const good = textDatum('fine');
  const cases: [string, () => Promise<unknown>, RegExp][] = [
    [
      'token id out of vocab',
      async () =>
        backend.forwardBackward(
          await trainedModel(),
          ce([{ ...good, model_input: { chunks: [{ tokens: [1, VOCAB, 2] }] } }]),
        ),
      /data\[0\]\.model_input\.chunks\[0\]\.tokens\[1\]: token id 256 is outside the vocabulary/,
    ],
    [
      'target out of vocab',
      async () =>
        backend.forward(
          await trainedModel(),
          ce([good, { ...good, loss_fn_inputs: { target_tokens: { data: [1, 2, -1], dtype: 'int64' } } }]),
        ),
      /data\[1\]\.loss_fn_inputs\.target_tokens\.data\[2\]/,
    ],
    [
      'weights length mismatch',
      async () => backend.forwardBackward(await trainedModel(), ce([textDatum('abcd', [1, 1])])),
      /data\[0\]\.loss_fn_inputs\.weights: has shape \[2\]; it must match target_tokens' \[3\]/,
    ],
    [
      'target length mismatch',
      async () =>
        backend.forwardBackward(
          await trainedModel(),
          ce([{ ...good, loss_fn_inputs: { target_tokens: { data: [1], dtype: 'int64' } } }]),
        ),
      /data\[0\]\.loss_fn_inputs\.target_tokens: has 1 positions for 3 input tokens/,
    ],
    [
      '2-D weights of another width',
      async () => {
        const datum = topKDatum('abcd', 2);
        const weights = {
          data: Array.from({ length: 9 }, () => 1),
          dtype: 'float32' as const,
          shape: [3, 3],
        };
        return backend.forward(
          await trainedModel(),
          ce([{ ...datum, loss_fn_inputs: { ...datum.loss_fn_inputs, weights } }]),
        );
      },
      /data\[0\]\.loss_fn_inputs\.weights: has shape \[3, 3\]; it must match target_tokens' \[3, 2\]/,
    ],
    [
      'float32 target tokens',
      async () =>
        backend.forward(
          await trainedModel(),
          ce([{ ...good, loss_fn_inputs: { target_tokens: { data: [1, 2, 3], dtype: 'float32' } } }]),
        ),
      /data\[0\]\.loss_fn_inputs\.target_tokens\.dtype: must be int64/,
    ],
    [
      '3-D target tokens',
      async () =>
        backend.forward(
          await trainedModel(),
          ce([
            {
              ...good,
              loss_fn_inputs: { target_tokens: { data: [1, 2, 3], dtype: 'int64', shape: [3, 1, 1] } },
            },
          ]),
        ),
      /target_tokens\.shape: must be \[N\] or \[N, K\], got \[3, 1, 1\]/,
    ],
    [
      '2-D weights for 1-D targets',
      async () =>
        backend.forward(
          await trainedModel(),
          ce([
            {
              ...good,
              loss_fn_inputs: {
                ...good.loss_fn_inputs,
                weights: { data: [1, 1, 1], dtype: 'float32', shape: [3, 1] },
              },
            },
          ]),
        ),
      /data\[0\]\.loss_fn_inputs\.weights: has shape \[3, 1\]; it must match target_tokens' \[3\]/,
    ],
    [
      'a weight beyond float32',
      async () => backend.forwardBackward(await trainedModel(), ce([textDatum('abcd', [1, 1e39, 1])])),
      /data\[0\]\.loss_fn_inputs\.weights\.data\[1\]: must be a finite float32, got Infinity/,
    ],
    [
      'typed weights of the wrong length',
      async () => {
        const datum: Datum = {
          model_input: { chunks: [{ type: 'encoded_text', tokens: Int32Array.of(1, 2, 3) }] },
          loss_fn_inputs: { target_tokens: int64Tensor([2, 3, 4]), weights: float32Tensor([1, 1]) },
        };
        return backend.forwardBackward(await trainedModel(), {
          data: [datum],
          loss_fn: 'cross_entropy',
          loss_fn_config: {},
        });
      },
      /data\[0\]\.loss_fn_inputs\.weights: has shape \[2\]; it must match target_tokens' \[3\]/,
    ],
    [
      'typed tensor whose shape disagrees with its data',
      async () => {
        const datum: Datum = {
          model_input: { chunks: [{ type: 'encoded_text', tokens: Int32Array.of(1, 2, 3) }] },
          loss_fn_inputs: { target_tokens: int64Tensor([2, 3], [3]) },
        };
        return backend.forward(await trainedModel(), {
          data: [datum],
          loss_fn: 'cross_entropy',
          loss_fn_config: {},
        });
      },
      /data\[0\]\.loss_fn_inputs\.target_tokens\.shape: \[3\] does not match its 2 values/,
    ],
    [
      'typed token ids across chunks',
      async () => {
        const datum: Datum = {
          model_input: {
            chunks: [
              { type: 'encoded_text', tokens: Int32Array.of(1) },
              { type: 'encoded_text', tokens: Int32Array.of(2, -5) },
            ],
          },
          loss_fn_inputs: { target_tokens: int64Tensor([2, 3, 4]) },
        };
        return backend.forward(await trainedModel(), {
          data: [datum],
          loss_fn: 'cross_entropy',
          loss_fn_config: {},
        });
      },
      /data\[0\]\.model_input\.chunks\[1\]\.tokens\[1\]: token id -5 is outside the vocabulary/,
    ],
    [
      'unknown loss_fn',
      async () => backend.forwardBackward(await trainedModel(), ce([good], 'mse')),
      /loss_fn: unknown loss function "mse"; supported: cross_entropy, importance_sampling, ppo, cispo, dro/,
    ],
    [
      'ppo without its policy inputs',
      async () => backend.forwardBackward(await trainedModel(), ce([good], 'ppo')),
      /data\[0\]\.loss_fn_inputs\.logprobs: is required by loss_fn ppo/,
    ],
    [
      'a config key the loss does not take',
      async () =>
        backend.forward(await trainedModel(), {
          ...ce([good]),
          loss_fn_config: { clip_low_threshold: 0.8 },
        }),
      /loss_fn_config\.clip_low_threshold: not a config key of loss_fn cross_entropy/,
    ],
    [
      'empty data',
      async () => backend.forwardBackward(await trainedModel(), ce([])),
      /data: must hold at least one datum/,
    ],
    [
      'negative learning rate',
      async () => backend.optimStep(await trainedModel(), { learning_rate: -0.1 }),
      /adam_params\.learning_rate: must be >= 0, got -0\.1/,
    ],
    [
      'beta1 of 1',
      async () => backend.optimStep(await trainedModel(), { learning_rate: 0.1, beta1: 1 }),
      /adam_params\.beta1/,
    ],
    [
      'zero eps',
      async () => backend.optimStep(await trainedModel(), { learning_rate: 0.1, eps: 0 }),
      /adam_params\.eps/,
    ],
    [
      'rank 0',
      async () => backend.createModel({ base_model: BASE, lora_config: { rank: 0 } }),
      /lora_config\.rank/,
    ],
    [
      'empty base model',
      async () => backend.createModel({ base_model: '', lora_config: { rank: 4 } }),
      /base_model/,
    ],
  ];
  it.each(cases)('%s throws StepUserError naming the field', async (_name, run, message) => {
    const error = await run().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(StepUserError);
    expect((error as Error).message).toMatch(message);
  });

  it('a fused batch fails only the bad item; the others match single runs', async () => {
    const state = await trainedModel();
    const other = await backend.createModel({ base_model: 'other-base', lora_config: { rank: 2 } });
    const input = ce([textDatum('fused pass')]);
    const outcomes = await backend.runPasses([
      { type: 'forward_backward', state, input },
      { type: 'forward', state: other, input: ce([textDatum('x')], 'nope') },
      { type: 'forward', state: other, input },
    ]);
    const [first, bad, third] = outcomes;
    expect(bad?.ok).toBe(false);
    expect(bad?.ok === false && bad.error).toBeInstanceOf(StepUserError);
    const single = await backend.forwardBackward(state, input);
    expect(first?.ok && first.result).toEqual(single.result);
    expect(first?.ok && (await backend.serializeState(first.state))).toEqual(
      await backend.serializeState(single.state),
    );
    expect(third?.ok && third.result).toEqual(await backend.forward(other, input));
    expect(third?.ok && third.state).toBe(other);
  });
});

describe('reference backend: cost', () => {
  it('a forward_backward over 4 datums of 64 tokens at rank 32 takes a few milliseconds', async () => {
    const state = await backend.createModel({ base_model: BASE, lora_config: { rank: 32 } });
    const text = 'a reasonably long training line of exactly sixty-four bytes ok!!';
    const input = ce([0, 1, 2, 3].map((i) => textDatum(`${i}${text}`)));
    for (let i = 0; i < 20; i++) await backend.forwardBackward(state, input);
    // CPU time of this process, not wall time, so other work on a shared machine barely moves it.
    const runs = 15;
    const before = process.cpuUsage();
    for (let i = 0; i < runs; i++) await backend.forwardBackward(state, input);
    const used = process.cpuUsage(before);
    const perCallMs = (used.user + used.system) / 1000 / runs;
    // Typical: 3-6 ms. The bound catches gross regressions (an O(T^2) context, a loop ten times slower).
    expect(perCallMs).toBeLessThan(30);
  });
});
