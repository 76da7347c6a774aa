import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SampleResult } from '../../shared/backend/backend.js';
import { cycle, expectBackToPending, startsOf, uninterrupted } from '../support/resume-harness.js';
import { BASE_MODEL, WorkerHarness } from '../support/worker-harness.js';

/**
 * P6 on the local cloud: a sample cut at random points, 1 to 3 times, and resumed from its saved
 * prefixes by later work items, answers exactly what one uninterrupted run answers (tokens,
 * logprobs, stop reasons, prompt logprobs), and the client sees nothing but try_again meanwhile.
 */

let h: WorkerHarness;

beforeAll(async () => {
  h = await WorkerHarness.start();
});

afterAll(() => h?.cloud.clients.dynamo.destroy());

interface Case {
  readonly numSamples: number;
  readonly maxTokens: number;
  readonly temperature: number;
  readonly slice: number;
  /** Slices before each cut (over all the work item's samples). */
  readonly cuts: readonly number[];
  /** Where in sequence 0's uninterrupted tokens a two-token stop sequence is taken from. */
  readonly stopAt: number | undefined;
  readonly seed: number;
  readonly prompt: readonly number[];
}

const caseArb: fc.Arbitrary<Case> = fc.record({
  numSamples: fc.integer({ min: 1, max: 3 }),
  maxTokens: fc.integer({ min: 3, max: 18 }),
  temperature: fc.constantFrom(0, 0.7, 1, 1.5),
  slice: fc.integer({ min: 1, max: 4 }),
  cuts: fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 1, maxLength: 3 }),
  stopAt: fc.option(fc.integer({ min: 0, max: 12 }), { nil: undefined }),
  seed: fc.integer({ min: 0, max: 2 ** 31 - 1 }),
  prompt: fc.array(fc.integer({ min: 32, max: 126 }), { minLength: 1, maxLength: 5 }),
});

/** Covered whatever the generator draws: several sequences, a stop sequence, three cuts. */
const examples: [Case][] = [
  [
    {
      numSamples: 3,
      maxTokens: 14,
      temperature: 1,
      slice: 2,
      cuts: [2, 3, 2],
      stopAt: 3,
      seed: 7,
      prompt: [72, 105],
    },
  ],
  [
    {
      numSamples: 2,
      maxTokens: 9,
      temperature: 0.7,
      slice: 1,
      cuts: [1, 4],
      stopAt: 0,
      seed: 99,
      prompt: [65],
    },
  ],
];

const tally = { runs: 0, cuts: 0, restoredRuns: 0, stopped: 0, multiSegment: 0 };

describe('exact resume (P6)', () => {
  it('forced cuts at random points give the uninterrupted tokens and logprobs', async () => {
    const t = h.tenant('exact');
    const session = await t.samplingSession({ base_model: BASE_MODEL });
    const bodyOf = (c: Case, stop?: number[][]) => ({
      num_samples: c.numSamples,
      prompt: { chunks: [{ type: 'encoded_text' as const, tokens: [...c.prompt] }] },
      sampling_params: {
        max_tokens: c.maxTokens,
        temperature: c.temperature,
        seed: c.seed,
        ...(stop === undefined ? {} : { stop }),
      },
      prompt_logprobs: true,
    });

    await fc.assert(
      fc.asyncProperty(caseArb, async (c) => {
        // A stop sequence the run really meets: two tokens of sequence 0's uninterrupted run.
        let stop: number[][] | undefined;
        if (c.stopAt !== undefined) {
          const plain = (await uninterrupted(bodyOf(c))) as SampleResult;
          const tokens = plain.sequences[0]?.tokens ?? [];
          const at = Math.min(c.stopAt, tokens.length - 2);
          if (at >= 0) stop = [tokens.slice(at, at + 2)];
        }
        const body = bodyOf(c, stop);
        const expected = await uninterrupted(body);
        const id = await t.sample(session, body);
        tally.runs += 1;

        let cutsDone = 0;
        let resumable = false;
        let restored = false;
        for (const cutAt of c.cuts) {
          const ran = await cycle(h, [id], { cutAt, worker: { sampleSliceTokens: c.slice } });
          expect(ran).toBeDefined();
          const outcome = ran?.samples[0];
          if (resumable) {
            const starts = startsOf(ran?.events ?? [], id);
            expect(starts?.every((start) => start.from === 'restored')).toBe(true);
            restored = true;
          }
          if (outcome?.outcome === 'committed') break;
          expect(outcome).toMatchObject({ outcome: 'cut', failed: 0, restart: 0 });
          cutsDone += 1;
          tally.cuts += 1;
          const ref = await expectBackToPending(h, t.tenant, id);
          // Every sequence generated before the cut, so every one has a pointer; delta cuts extend it.
          expect(ref?.cuts).toBe(cutsDone);
          expect(ref?.sequences).toHaveLength(c.numSamples);
          for (const pointer of ref?.sequences ?? []) {
            expect(pointer?.segments.length).toBeGreaterThanOrEqual(1);
            expect(pointer?.segments.length).toBeLessThanOrEqual(cutsDone);
            if ((pointer?.segments.length ?? 0) > 1) tally.multiSegment += 1;
          }
          resumable = true;
        }
        const last = await cycle(h, [id], { worker: { sampleSliceTokens: c.slice } });
        if (last !== undefined) {
          expect(last.samples[0]?.outcome).toBe('committed');
          if (cutsDone > 0) {
            expect(startsOf(last.events, id)?.every((start) => start.from === 'restored')).toBe(true);
            restored = true;
          }
        }
        if (restored) tally.restoredRuns += 1;
        const answer = (await h.answer(t.tenant, id)) as SampleResult;
        expect(answer).toEqual(expected);
        if (answer.sequences.some((sequence) => sequence.stop_reason === 'stop')) tally.stopped += 1;
      }),
      { seed: 6_260_301, numRuns: 8, examples, endOnFailure: true },
    );
    // The property was not vacuous: cuts happened, runs resumed from prefixes of several cuts, and
    // stop sequences ended sequences.
    expect(tally.cuts).toBeGreaterThanOrEqual(tally.runs / 2);
    expect(tally.restoredRuns).toBeGreaterThan(tally.runs / 2);
    expect(tally.multiSegment).toBeGreaterThan(0);
    expect(tally.stopped).toBeGreaterThan(0);
  });
});
