import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { lossFormula, type RlLoss } from '../support/loss-formulas.js';
import { Pipeline } from '../support/pipeline.js';
import { seededRandom } from '../support/seeded-random.js';
import { WorkerHarness } from '../support/worker-harness.js';

/**
 * L1 end to end: over HTTP (JSON wire), through the scheduler, SQS and the worker Lambda, each
 * policy-gradient loss computes exactly its formula on the logprobs the server itself reports. A
 * `forward` with cross_entropy gives the model's logprobs; random q and A are drawn around them (ratios
 * inside and outside the clip range, advantages of both signs); then `forward_backward` with the loss
 * must answer `elementwise_loss` and `loss:sum` equal to the formula applied to those logprobs
 * (float32 tolerance), and the logprobs themselves unchanged.
 */

interface TensorJson {
  readonly data: number[];
  readonly dtype: string;
  readonly shape: number[];
}
interface PassAnswer {
  readonly loss_fn_outputs: Record<string, TensorJson>[];
  readonly metrics: Record<string, number>;
}

const TEXTS = ['reinforce this', 'a second rollout!'];
const bytes = (text: string) => [...Buffer.from(text, 'utf8')];

const random = seededRandom;

function datum(text: string, inputs: Record<string, number[]> = {}) {
  const all = bytes(text);
  const n = all.length - 1;
  const floats = Object.fromEntries(
    Object.entries(inputs).map(([name, data]) => [name, { data, dtype: 'float32' as const, shape: [n] }]),
  );
  return {
    model_input: { chunks: [{ type: 'encoded_text', tokens: all.slice(0, -1) }] },
    loss_fn_inputs: { target_tokens: { data: all.slice(1), dtype: 'int64' as const, shape: [n] }, ...floats },
  };
}

let harness: WorkerHarness;
let pipeline: Pipeline;
let client: TinkerClient;
let modelId = '';
let seq = 0;

beforeAll(async () => {
  harness = await WorkerHarness.start();
  pipeline = await Pipeline.start(harness, { lambdaWorker: true });
  client = await pipeline.client('rl-lab');
  const session = await client.createSession();
  const created = await client.createModel({
    session_id: session.session_id,
    model_seq_id: 0,
    base_model: 'reference/byte-lm',
    lora_config: { rank: 4, seed: 9 },
  });
  modelId = (await client.waitFor<{ model_id: string }>(created.request_id)).model_id;
  // One step so the adapter is not the bare base model.
  await client.waitFor(
    (
      await client.forwardBackward({
        model_id: modelId,
        seq_id: ++seq,
        forward_backward_input: { data: TEXTS.map((t) => datum(t)), loss_fn: 'cross_entropy' },
      })
    ).request_id,
  );
  await client.waitFor(
    (await client.optimStep({ model_id: modelId, seq_id: ++seq, adam_params: { learning_rate: 0.05 } }))
      .request_id,
  );
}, 120_000);

afterAll(async () => {
  await pipeline?.stop();
});

describe('every policy-gradient loss matches its formula on the logprobs the server reports', () => {
  it.each([
    ['importance_sampling', {}],
    ['ppo', {}],
    ['ppo', { clip_low_threshold: 0.9, clip_high_threshold: 1.1 }],
    ['cispo', { clip_low_threshold: 0.7, clip_high_threshold: 1.3 }],
    ['dro', { beta: 0.25 }],
    ['dro', {}],
  ] as [RlLoss, Record<string, number>][])('%s %o', async (loss, config) => {
    const forward = await client.waitFor<PassAnswer>(
      (
        await client.forward({
          model_id: modelId,
          seq_id: ++seq,
          forward_input: { data: TEXTS.map((t) => datum(t)), loss_fn: 'cross_entropy' },
        })
      ).request_id,
    );
    const next = random(seq);
    const reported = forward.loss_fn_outputs.map((out) => out.logprobs?.data ?? []);
    const inputs = reported.map((lps) => ({
      // Ratios spread over [0.5, 1.6]: both inside and outside every clip range used here.
      logprobs: lps.map((lp) => Math.fround(lp - Math.log(0.5 + 1.1 * next()))),
      advantages: lps.map(() => Math.fround(next() * 4 - 2)),
    }));
    const answer = await client.waitFor<PassAnswer>(
      (
        await client.forwardBackward({
          model_id: modelId,
          seq_id: ++seq,
          forward_backward_input: {
            data: TEXTS.map((t, d) => datum(t, inputs[d])),
            loss_fn: loss,
            loss_fn_config: config,
          },
        })
      ).request_id,
    );
    let sum = 0;
    let inside = 0;
    let outside = 0;
    answer.loss_fn_outputs.forEach((out, d) => {
      const lps = reported[d] as number[];
      // forward_backward sees the same weights as the forward before it: the same logprobs.
      expect(out.logprobs?.data).toEqual(lps);
      const { logprobs: q, advantages: a } = inputs[d] as { logprobs: number[]; advantages: number[] };
      const elementwise = out.elementwise_loss?.data ?? [];
      expect(elementwise).toHaveLength(lps.length);
      lps.forEach((lp, i) => {
        const expected = lossFormula(loss, lp, q[i] as number, a[i] as number, config);
        expect(Math.abs((elementwise[i] as number) - expected)).toBeLessThan(2e-6 * (1 + Math.abs(expected)));
        sum += expected;
        const r = Math.exp(lp - (q[i] as number));
        if (r >= (config.clip_low_threshold ?? 0.8) && r <= (config.clip_high_threshold ?? 1.2)) inside += 1;
        else outside += 1;
      });
    });
    expect(Math.min(inside, outside)).toBeGreaterThan(3);
    expect(Math.abs((answer.metrics['loss:sum'] as number) - sum)).toBeLessThan(1e-5 * (1 + Math.abs(sum)));
    expect(answer.metrics['ratio:mean']).toBeGreaterThan(0);
    if (loss === 'ppo' || loss === 'cispo') expect(answer.metrics['clip_fraction:mean']).toBeGreaterThan(0);
    for (const key of Object.keys(answer.metrics)) expect(key).toMatch(/^[a-z_]+:(mean|sum|min|max)$/);
  });
});
