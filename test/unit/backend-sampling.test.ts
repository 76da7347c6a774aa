import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  type SampleRequest,
  type SamplerModel,
  type SamplingParams,
  toSampleResult,
} from '../../shared/backend/backend.js';
import { modelInputFromJson, passInputFromJson } from '../../shared/backend/pass-input.js';
import { VOCAB } from '../../shared/backend/reference/model.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { InfrastructureError, StepUserError } from '../../shared/base/errors.js';

const backend = new ReferenceBackend();
const BASE = 'meta-llama/Llama-3.2-1B';
const bytes = (text: string) => [...Buffer.from(text, 'utf8')];
const PROMPT = bytes('Once upon a time');
/** A typed prompt, converted as the worker converts a stored one. */
const promptOf = (tokens: number[]) => modelInputFromJson({ chunks: [{ tokens }] }, 'prompt');

function request(params: SamplingParams, extra: Partial<SampleRequest> = {}): SampleRequest {
  return {
    prompt: promptOf(PROMPT),
    sampling_params: params,
    ...extra,
  };
}

let tuned: SamplerModel;
let base: SamplerModel;

beforeAll(async () => {
  // A trained adapter, so sampling exercises the LoRA path; and the bare base model.
  let state = await backend.createModel({ base_model: BASE, lora_config: { rank: 8, seed: 2 } });
  const text = bytes('Once upon a time there was a tiny model. ');
  const datum = {
    model_input: { chunks: [{ tokens: text.slice(0, -1) }] },
    loss_fn_inputs: { target_tokens: { data: text.slice(1), dtype: 'int64' as const } },
  };
  const input = passInputFromJson({ data: [datum], loss_fn: 'cross_entropy' }, 'input');
  for (let i = 0; i < 5; i++) {
    const fb = await backend.forwardBackward(state, input);
    state = (await backend.optimStep(fb.state, { learning_rate: 0.05 })).state;
  }
  tuned = await backend.loadSampler(BASE, await backend.exportWeights(state, 'sampler'));
  base = await backend.loadSampler(BASE, null);
});

/** Full next-token distributions (sorted, as [token, logprob]) at every generated position. */
async function distributions(sampler: SamplerModel, generated: number[]): Promise<[number, number][][]> {
  const run = await backend.sample(sampler, {
    prompt: promptOf([...PROMPT, ...generated]),
    sampling_params: { max_tokens: 1, temperature: 0 },
    topk_prompt_logprobs: VOCAB,
  });
  return (run.topk_prompt_logprobs ?? []).slice(PROMPT.length) as [number, number][][];
}

async function generate(sampler: SamplerModel, params: SamplingParams, extra: Partial<SampleRequest> = {}) {
  return backend.sample(sampler, request(params, extra));
}

describe('reference sampling', () => {
  it('honours max_tokens and reports stop_reason length', async () => {
    const run = await generate(tuned, { max_tokens: 17, seed: 1 }, { num_samples: 3 });
    expect(run.finished).toBe(true);
    expect(run.sequences).toHaveLength(3);
    for (const sequence of run.sequences) {
      expect(sequence.tokens).toHaveLength(17);
      expect(sequence.logprobs).toHaveLength(17);
      expect(sequence.stop_reason).toBe('length');
    }
    expect(toSampleResult(run)).toEqual({ type: 'sample', sequences: run.sequences });
  });

  it('temperature 0 is greedy, and top_k 1 or a tiny top_p equal it', async () => {
    const greedy = (await generate(tuned, { max_tokens: 24, temperature: 0 })).sequences[0];
    const dists = await distributions(tuned, greedy?.tokens ?? []);
    expect(greedy?.tokens).toEqual(dists.map((dist) => dist[0]?.[0]));
    for (const params of [
      { max_tokens: 24, temperature: 1, top_k: 1, seed: 5 },
      { max_tokens: 24, temperature: 1.5, top_p: 1e-9, seed: 6 },
    ]) {
      expect((await generate(tuned, params)).sequences[0]).toEqual(greedy);
    }
  });

  it('reports logprobs under the model distribution, equal to forward and to prompt_logprobs', async () => {
    const run = await generate(
      tuned,
      { max_tokens: 20, temperature: 1.3, seed: 9 },
      { prompt_logprobs: true },
    );
    const sequence = run.sequences[0];
    const tokens = [...PROMPT, ...(sequence?.tokens ?? [])];
    const dists = await distributions(tuned, sequence?.tokens ?? []);
    sequence?.tokens.forEach((token, n) => {
      expect(sequence.logprobs[n]).toBe(dists[n]?.find(([t]) => t === token)?.[1]);
    });
    // The same numbers a training-side forward pass reports.
    const state = await backend.createModel({ base_model: BASE, lora_config: { rank: 8, seed: 2 } });
    const forwardInput = {
      loss_fn: 'cross_entropy',
      data: [
        {
          model_input: { chunks: [{ tokens: tokens.slice(0, -1) }] },
          loss_fn_inputs: { target_tokens: { data: tokens.slice(1), dtype: 'int64' as const } },
        },
      ],
    };
    const forwardBase = await backend.forward(state, passInputFromJson(forwardInput, 'input'));
    const baseRun = await backend.sample(base, {
      prompt: promptOf(tokens),
      sampling_params: { max_tokens: 1 },
      prompt_logprobs: true,
    });
    expect(baseRun.prompt_logprobs).toEqual([
      null,
      ...(forwardBase.loss_fn_outputs[0]?.logprobs?.data ?? []),
    ]);
    expect(run.prompt_logprobs).toHaveLength(PROMPT.length);
    expect(run.prompt_logprobs?.[0]).toBeNull();
  });

  it('top_k and top_p keep every choice inside the allowed set', async () => {
    const topK = await generate(tuned, { max_tokens: 40, temperature: 2, top_k: 3, seed: 4 });
    const kDists = await distributions(tuned, topK.sequences[0]?.tokens ?? []);
    topK.sequences[0]?.tokens.forEach((token, n) => {
      expect(kDists[n]?.slice(0, 3).map(([t]) => t)).toContain(token);
    });
    const topP = await generate(tuned, { max_tokens: 40, temperature: 1, top_p: 0.6, seed: 4 });
    const pDists = await distributions(tuned, topP.sequences[0]?.tokens ?? []);
    let sawNonGreedy = false;
    topP.sequences[0]?.tokens.forEach((token, n) => {
      const dist = pDists[n] ?? [];
      const rank = dist.findIndex(([t]) => t === token);
      const massBefore = dist.slice(0, rank).reduce((acc, [, lp]) => acc + Math.exp(lp), 0);
      expect(massBefore).toBeLessThan(0.6 + 1e-6);
      if (rank > 0) sawNonGreedy = true;
    });
    expect(sawNonGreedy).toBe(true);
  });

  it('same seed gives the same tokens; another seed or sample index differs', async () => {
    const params = { max_tokens: 32, temperature: 1, seed: 1234 };
    const a = await generate(tuned, params, { num_samples: 4 });
    const b = await generate(tuned, params, { num_samples: 4 });
    expect(b).toEqual(a);
    const other = await generate(tuned, { ...params, seed: 1235 }, { num_samples: 4 });
    expect(other.sequences[0]?.tokens).not.toEqual(a.sequences[0]?.tokens);
    expect(new Set(a.sequences.map((s) => s.tokens.join(','))).size).toBe(4);
    const big = await generate(tuned, { ...params, seed: -(2 ** 60) });
    expect(big.sequences[0]?.tokens).not.toEqual(a.sequences[0]?.tokens);
  });

  it('stops on stop tokens, token sequences and strings, keeping the stop in the output', async () => {
    const free = (await generate(tuned, { max_tokens: 48, seed: 3 })).sequences[0]?.tokens ?? [];
    const stopToken = free[10] as number;
    const first = free.indexOf(stopToken);
    const byToken = (await generate(tuned, { max_tokens: 48, seed: 3, stop: [stopToken] })).sequences[0];
    expect(byToken?.stop_reason).toBe('stop');
    expect(byToken?.tokens).toEqual(free.slice(0, first + 1));

    const pair = free.slice(20, 22);
    const pairAt = free.findIndex((_, i) => free[i] === pair[0] && free[i + 1] === pair[1]);
    const bySequence = (await generate(tuned, { max_tokens: 48, seed: 3, stop: [pair, [VOCAB - 1, 0, 1]] }))
      .sequences[0];
    expect(bySequence?.tokens).toEqual(free.slice(0, pairAt + 2));
    expect(bySequence?.stop_reason).toBe('stop');

    const asText = Buffer.from(free.slice(30, 32)).toString('latin1');
    const utf8 = bytes(asText);
    const stringAt = free.findIndex((_, i) => utf8.every((b, j) => free[i + j] === b));
    const byString = (await generate(tuned, { max_tokens: 48, seed: 3, stop: asText })).sequences[0];
    if (stringAt >= 0) expect(byString?.tokens).toEqual(free.slice(0, stringAt + utf8.length));
    else expect(byString?.stop_reason).toBe('length');
  });

  it('user errors name the sampling field', async () => {
    const cases: [SampleRequest, RegExp][] = [
      [request({ top_p: 0 }), /sampling_params\.top_p: must be in \(0, 1\]/],
      [request({ temperature: -1 }), /sampling_params\.temperature/],
      [request({ max_tokens: 5000 }), /sampling_params\.max_tokens/],
      [request({ top_k: -2 }), /sampling_params\.top_k/],
      [request({ seed: 1.5 }), /sampling_params\.seed/],
      [request({ stop: [[]] }), /sampling_params\.stop\[0\]/],
      [request({ stop: [300] }), /sampling_params\.stop\[0\]: token id 300/],
      [request({}, { num_samples: 0 }), /num_samples/],
      [request({}, { prompt: { chunks: [] } }), /prompt: holds no tokens/],
      [request({}, { prompt: promptOf([1, VOCAB]) }), /prompt\.chunks\[0\]\.tokens\[1\]: token id 256/],
    ];
    for (const [bad, message] of cases) {
      await expect(backend.sample(tuned, bad)).rejects.toSatisfy(
        (e: unknown) => e instanceof StepUserError && message.test(e.message),
      );
    }
    await expect(
      backend.sample(tuned, request({ max_tokens: 4 }), { resume: [{ tokens: [1, 2], logprobs: [-1] }] }),
    ).rejects.toBeInstanceOf(InfrastructureError);
  });
});

describe('reference sampling: exact resume (P6)', () => {
  const paramsArb = fc.record({
    seed: fc.integer({ min: -1e9, max: 1e9 }),
    temperature: fc.constantFrom(0, 0.7, 1, 1.6),
    top_k: fc.constantFrom(-1, 1, 5, 40),
    top_p: fc.constantFrom(1, 0.9, 0.5),
    max_tokens: fc.integer({ min: 1, max: 40 }),
    stop: fc.constantFrom(undefined, [32], [101, 32], 'e', [[116, 104], [46]]),
  });

  it('resuming from a prefix of any length gives the uninterrupted tokens and logprobs', async () => {
    await fc.assert(
      fc.asyncProperty(
        paramsArb,
        fc.integer({ min: 1, max: 3 }),
        fc.boolean(),
        fc.double({ min: 0, max: 1, noNaN: true }),
        async (params, numSamples, useTuned, cutFraction) => {
          const sampler = useTuned ? tuned : base;
          const full = await generate(sampler, params, { num_samples: numSamples });
          expect(full.finished).toBe(true);
          // Restored prefixes: a different cut point for each sequence, anywhere from 0 to its full length.
          const resume = full.sequences.map((s, i) => {
            const cut = Math.floor(((cutFraction + i / 3) % 1) * (s.tokens.length + 1));
            return { tokens: s.tokens.slice(0, cut), logprobs: s.logprobs.slice(0, cut) };
          });
          const resumed = await backend.sample(sampler, request(params, { num_samples: numSamples }), {
            resume,
          });
          expect(resumed).toEqual(full);
        },
      ),
      { numRuns: 60, seed: 20260101 },
    );
  });

  it('a cut run (maxNewTokens) continued from its own output equals the uninterrupted run', async () => {
    await fc.assert(
      fc.asyncProperty(paramsArb, fc.integer({ min: 0, max: 7 }), async (params, budget) => {
        const full = await generate(tuned, params, { num_samples: 2 });
        let run = await backend.sample(tuned, request(params, { num_samples: 2 }), { maxNewTokens: budget });
        for (let i = 0; !run.finished && i < 100; i++) {
          for (const s of run.sequences) expect(s.tokens.length).toBeLessThanOrEqual(params.max_tokens);
          const resume = run.sequences.map((s) => ({ tokens: s.tokens, logprobs: s.logprobs }));
          run = await backend.sample(tuned, request(params, { num_samples: 2 }), {
            resume,
            maxNewTokens: budget + 1,
          });
        }
        expect(run).toEqual(full);
      }),
      { numRuns: 40, seed: 7 },
    );
  });

  it('a restored prefix that already ends in a stop sequence finishes at once', async () => {
    const full = (await generate(tuned, { max_tokens: 30, seed: 8, stop: [[101]] })).sequences[0];
    if (full?.stop_reason === 'stop') {
      const run = await backend.sample(tuned, request({ max_tokens: 30, seed: 8, stop: [[101]] }), {
        resume: [{ tokens: full.tokens, logprobs: full.logprobs }],
        maxNewTokens: 0,
      });
      expect(run.finished).toBe(true);
      expect(run.sequences[0]).toEqual(full);
    }
    const unfinished = await backend.sample(tuned, request({ max_tokens: 30, seed: 8 }), { maxNewTokens: 0 });
    expect(unfinished.finished).toBe(false);
    expect(unfinished.sequences[0]).toEqual({ stop_reason: null, tokens: [], logprobs: [] });
    expect(() => toSampleResult(unfinished)).toThrow(/unfinished/);
  });
});
