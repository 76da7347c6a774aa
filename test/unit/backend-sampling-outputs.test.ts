import { describe, expect, it } from 'vitest';
import type { SampleRequest } from '../../shared/backend/backend.js';
import { modelInputFromJson } from '../../shared/backend/pass-input.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { StepUserError } from '../../shared/base/errors.js';

/** The SDK 0.26+ sampling outputs on the reference backend (W8): read from the model's distribution. */
const backend = new ReferenceBackend();
const BASE = 'meta-llama/Llama-3.2-1B';
const PROMPT = [...Buffer.from('Once upon', 'utf8')];
const prompt = modelInputFromJson({ chunks: [{ tokens: PROMPT }] }, 'prompt');

const request = (extra: Partial<SampleRequest>): SampleRequest => ({
  prompt,
  num_samples: 2,
  sampling_params: { max_tokens: 6, seed: 11, temperature: 1 },
  ...extra,
});

describe('newer sampling outputs (reference backend)', () => {
  it('topk_sample_logprobs ranks the distribution each sampled token was drawn from', async () => {
    const sampler = await backend.loadSampler(BASE, null);
    const run = await backend.sample(sampler, request({ topk_sample_logprobs: 4, prompt_logprobs: true }));
    const plain = await backend.sample(sampler, request({}));
    for (const [i, sequence] of run.sequences.entries()) {
      // The outputs change nothing about what is sampled.
      expect(sequence.tokens).toEqual(plain.sequences[i]?.tokens);
      expect(sequence.topk_logprobs).toHaveLength(sequence.tokens.length);
      for (const [n, row] of (sequence.topk_logprobs ?? []).entries()) {
        expect(row).toHaveLength(4);
        const logprobs = row.map(([, logprob]) => logprob);
        expect([...logprobs].sort((a, b) => b - a)).toEqual(logprobs);
        // Each row is the full-context distribution: the sampled token's own logprob agrees with it.
        const own = row.find(([token]) => token === sequence.tokens[n]);
        if (own) expect(own[1]).toBe(sequence.logprobs[n]);
      }
    }
  });

  it('target_prompt_logprobs reads the prompt logprobs of the asked ids; -1 gets null', async () => {
    const sampler = await backend.loadSampler(BASE, null);
    const rows = PROMPT.length - 1;
    const data: number[] = [];
    for (let i = 0; i < rows; i++) data.push(PROMPT[i + 1] as number, -1);
    const run = await backend.sample(
      sampler,
      request({ prompt_logprobs: true, target_prompt_logprobs: { shape: [rows, 2], data } }),
    );
    expect(run.target_prompt_logprobs).toHaveLength(rows);
    for (let i = 0; i < rows; i++) {
      expect(run.target_prompt_logprobs?.[i]).toEqual([run.prompt_logprobs?.[i + 1], null]);
    }
  });

  it('prompt_alt_tokens_k draws k tokens per prompt position with their model logprobs; temperature 0 takes the top token', async () => {
    const sampler = await backend.loadSampler(BASE, null);
    const greedy = await backend.sample(
      sampler,
      request({
        sampling_params: { max_tokens: 2, seed: 1, temperature: 0 },
        prompt_alt_tokens_k: 3,
        topk_prompt_logprobs: 1,
      }),
    );
    const alt = greedy.prompt_alt_tokens;
    expect(alt?.tokens).toHaveLength(PROMPT.length - 1);
    for (let i = 0; i < PROMPT.length - 1; i++) {
      const top = greedy.topk_prompt_logprobs?.[i + 1]?.[0];
      expect(alt?.tokens[i]).toEqual([top?.[0], top?.[0], top?.[0]]);
      expect(alt?.logprobs[i]).toEqual([top?.[1], top?.[1], top?.[1]]);
    }
    const drawn = await backend.sample(sampler, request({ prompt_alt_tokens_k: 5 }));
    const again = await backend.sample(sampler, request({ prompt_alt_tokens_k: 5 }));
    expect(drawn.prompt_alt_tokens).toEqual(again.prompt_alt_tokens);
  });

  it('a run cut and resumed answers the same top-k rows as an uncut one (P6)', async () => {
    const sampler = await backend.loadSampler(BASE, null);
    const full = await backend.sample(sampler, request({ topk_sample_logprobs: 3 }));
    for (const cut of [1, 3, 5]) {
      const head = await backend.sample(sampler, request({ topk_sample_logprobs: 3 }), { maxNewTokens: cut });
      const resume = head.sequences.map((s) => ({ tokens: s.tokens, logprobs: s.logprobs }));
      const rest = await backend.sample(sampler, request({ topk_sample_logprobs: 3 }), { resume });
      expect(rest.sequences).toEqual(full.sequences);
    }
  });

  it('refuses a target id outside the vocabulary and a wrong shape, naming the field', async () => {
    const sampler = await backend.loadSampler(BASE, null);
    const rows = PROMPT.length - 1;
    await expect(
      backend.sample(
        sampler,
        request({ target_prompt_logprobs: { shape: [rows, 1], data: Array(rows).fill(99999) } }),
      ),
    ).rejects.toThrow(StepUserError);
    await expect(
      backend.sample(
        sampler,
        request({ target_prompt_logprobs: { shape: [rows + 1, 1], data: Array(rows + 1).fill(1) } }),
      ),
    ).rejects.toThrow(/target_prompt_logprobs.shape/);
  });
});
