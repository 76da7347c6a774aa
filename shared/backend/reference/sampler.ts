/**
 * Autoregressive sampling for the reference backend.
 *
 * Token choice at generated position n of sample i: temperature 0 (or top_k 1) takes the most likely token
 * (lowest id on ties). Otherwise candidates are ordered by probability (ties: lower id first), cut to
 * top_k, then to the smallest head whose temperature-scaled probability reaches top_p, and one is drawn by
 * inverse CDF with u = uniformAt(seed, i, n). u depends on nothing else, so a run resumed from a restored
 * prefix continues exactly like an uninterrupted one (P6).
 *
 * Reported logprobs are under the model's own distribution (temperature 1, no top-k/top-p), rounded to
 * float32: the value `forward` gives the same token, which is what importance-sampling losses compare.
 * A sequence stops when its generated tokens end with a stop sequence (the stop tokens are kept in the
 * output; `stop_reason: "stop"`), or after max_tokens generated tokens (`"length"`). Matching looks only at
 * generated tokens, restored ones included, so it needs no state beyond the tokens themselves.
 *
 * The outputs of SDK 0.26+ are read from the same distributions: `topk_sample_logprobs` ranks the
 * model's own distribution at each generated position (restored positions are recomputed while the
 * prefix is replayed, so a resumed run answers exactly what an uncut one does, P6);
 * `prompt_alt_tokens_k` draws k tokens with replacement at prompt position t >= 1 at the request's
 * temperature (no top-k/top-p), u = uniformAt(TAG_ALT, seed, t, j), each with its model logprob;
 * `target_prompt_logprobs` reads the asked ids' model logprobs at their prompt positions.
 */

import { InfrastructureError } from '../../base/errors.js';
import type {
  GeneratedSequence,
  SampleOptions,
  SampleRequest,
  SampleRun,
  SamplerModel,
  SequencePrefix,
  StopReason,
} from '../backend.js';
import { BLOB_STATE, decodeBlob } from './codec.js';
import { parseSampleRequest, type ReferenceSampleRequest } from './inputs.js';
import { baseWeights, SequenceRunner, VOCAB } from './model.js';
import { seedWords, uniformAt } from './prng.js';
import { REFERENCE_STATE_KIND } from './state.js';

const TAG_SAMPLE = 0x53414d50;
const TAG_ALT = 0x414c5430;

export interface ReferenceSampler extends SamplerModel {
  readonly kind: typeof REFERENCE_STATE_KIND;
  readonly rank: number;
  readonly params: Float64Array;
}

/** A sampler for a saved adapter, or for the bare base model when `weights` is null. */
export function loadReferenceSampler(baseModel: string, weights: Uint8Array | null): ReferenceSampler {
  if (weights === null) {
    return { kind: REFERENCE_STATE_KIND, base_model: baseModel, rank: 0, params: new Float64Array(0) };
  }
  const { type, state } = decodeBlob(weights);
  if (type === BLOB_STATE) throw new InfrastructureError('sampler weights: got a model state blob');
  if (state.base_model !== baseModel) {
    throw new InfrastructureError(`sampler weights are for ${state.base_model}, not ${baseModel}`);
  }
  return { kind: REFERENCE_STATE_KIND, base_model: baseModel, rank: state.rank, params: state.params };
}

function asReferenceSampler(sampler: SamplerModel): ReferenceSampler {
  if (sampler.kind !== REFERENCE_STATE_KIND) {
    throw new InfrastructureError(`reference backend got a sampler of kind ${sampler.kind}`);
  }
  return sampler as ReferenceSampler;
}

function argmax(logprobs: Float64Array): number {
  let best = 0;
  for (let v = 1; v < VOCAB; v++) if ((logprobs[v] as number) > (logprobs[best] as number)) best = v;
  return best;
}

/** Token ids by descending logprob, ties by ascending id. */
function rankedTokens(logprobs: Float64Array): number[] {
  const ids = Array.from({ length: VOCAB }, (_, v) => v);
  return ids.sort((a, b) => (logprobs[b] as number) - (logprobs[a] as number) || a - b);
}

type Filter = Pick<ReferenceSampleRequest, 'temperature' | 'topK' | 'topP'>;

/** The token at uniform draw `u` (consumed only when the choice is random). */
function chooseToken(
  logprobs: Float64Array,
  request: Filter,
  u: () => number,
  weights: Float64Array,
): number {
  const best = argmax(logprobs);
  if (request.temperature === 0 || request.topK === 1) return best;
  const order = request.topK > 0 || request.topP < 1 ? rankedTokens(logprobs) : null;
  let count = request.topK > 0 ? Math.min(request.topK, VOCAB) : VOCAB;
  const top = logprobs[best] as number;
  let total = 0;
  for (let c = 0; c < count; c++) {
    const w = Math.exp(((logprobs[order ? (order[c] as number) : c] as number) - top) / request.temperature);
    weights[c] = w;
    total += w;
  }
  if (request.topP < 1) {
    const threshold = request.topP * total;
    let kept = 0;
    let cumulative = 0;
    while (kept < count && cumulative < threshold) cumulative += weights[kept++] as number;
    count = kept;
    total = cumulative;
  }
  const target = u() * total;
  let cumulative = 0;
  for (let c = 0; c < count; c++) {
    cumulative += weights[c] as number;
    if (target < cumulative) return order ? (order[c] as number) : c;
  }
  return order ? (order[count - 1] as number) : count - 1;
}

function endsWithStop(tokens: readonly number[], stops: readonly (readonly number[])[]): boolean {
  return stops.some(
    (stop) =>
      stop.length <= tokens.length &&
      stop.every((token, j) => tokens[tokens.length - stop.length + j] === token),
  );
}

function checkPrefix(prefix: SequencePrefix, index: number, maxTokens: number): void {
  const ok =
    Array.isArray(prefix.tokens) &&
    Array.isArray(prefix.logprobs) &&
    prefix.tokens.length === prefix.logprobs.length &&
    prefix.tokens.length <= maxTokens &&
    prefix.tokens.every((t) => Number.isInteger(t) && t >= 0 && t < VOCAB) &&
    prefix.logprobs.every((l) => typeof l === 'number' && !Number.isNaN(l));
  if (!ok) throw new InfrastructureError(`resume[${index}]: restored prefix does not fit this request`);
}

function topkRow(logprobs: Float64Array, k: number): [number, number][] {
  return rankedTokens(logprobs)
    .slice(0, k)
    .map((v) => [v, Math.fround(logprobs[v] as number)]);
}

export function sampleReference(
  sampler: SamplerModel,
  request: SampleRequest,
  options: SampleOptions = {},
): SampleRun {
  const model = asReferenceSampler(sampler);
  const parsed = parseSampleRequest(request);
  const budget = options.maxNewTokens ?? Number.POSITIVE_INFINITY;
  if (!(budget >= 0)) throw new InfrastructureError(`maxNewTokens must be >= 0, got ${budget}`);
  const seed = seedWords(parsed.seed);
  const promptRunner = new SequenceRunner(baseWeights(model.base_model), model.params, model.rank);
  const promptLogprobs: (number | null)[] = [null];
  const topkPromptLogprobs: ([number, number][] | null)[] = [null];
  const scratch = new Float64Array(VOCAB);
  const altK = parsed.promptAltTokensK;
  const alt = { tokens: [] as number[][], logprobs: [] as number[][] };
  const altFilter: Filter = { temperature: parsed.temperature, topK: 0, topP: 1 };
  const target = parsed.targetPromptIds;
  const targetLogprobs: (number | null)[][] = [];
  parsed.prompt.forEach((token, t) => {
    if (t > 0) {
      const logprobs = promptRunner.logprobs;
      if (parsed.promptLogprobs) promptLogprobs.push(Math.fround(logprobs[token] as number));
      if (parsed.topkPromptLogprobs > 0)
        topkPromptLogprobs.push(topkRow(logprobs, parsed.topkPromptLogprobs));
      if (altK > 0) {
        const draws = Array.from({ length: altK }, (_, j) =>
          chooseToken(logprobs, altFilter, () => uniformAt(TAG_ALT, seed[0], seed[1], t, j), scratch),
        );
        alt.tokens.push(draws);
        alt.logprobs.push(draws.map((v) => Math.fround(logprobs[v] as number)));
      }
      if (target !== null) {
        const row = target.ids.subarray((t - 1) * target.columns, t * target.columns);
        targetLogprobs.push(
          Array.from(row, (id) => (id === -1 ? null : Math.fround(logprobs[id] as number))),
        );
      }
    }
    promptRunner.push(token);
  });

  const sequences: GeneratedSequence[] = [];
  const topk = parsed.topkSampleLogprobs;
  for (let i = 0; i < parsed.numSamples; i++) {
    const prefix = options.resume?.[i];
    if (prefix) checkPrefix(prefix, i, parsed.maxTokens);
    const tokens = prefix ? [...prefix.tokens] : [];
    const logprobs = prefix ? [...prefix.logprobs] : [];
    const finish = (): StopReason | null =>
      endsWithStop(tokens, parsed.stops) ? 'stop' : tokens.length >= parsed.maxTokens ? 'length' : null;
    let stopReason = tokens.length > 0 ? finish() : null;
    const runner = promptRunner.clone();
    const topkRows: [number, number][][] = [];
    // Replaying a restored prefix: needed to continue it, or to recompute its top-k rows.
    if (stopReason === null || topk > 0) {
      tokens.forEach((token, n) => {
        if (topk > 0) topkRows.push(topkRow(runner.logprobs, topk));
        if (n < tokens.length - 1 || stopReason === null) runner.push(token);
      });
    }
    for (let generated = 0; stopReason === null && generated < budget; generated++) {
      const position = tokens.length;
      const token = chooseToken(
        runner.logprobs,
        parsed,
        () => uniformAt(TAG_SAMPLE, seed[0], seed[1], i, position),
        scratch,
      );
      if (topk > 0) topkRows.push(topkRow(runner.logprobs, topk));
      tokens.push(token);
      logprobs.push(Math.fround(runner.logprobs[token] as number));
      stopReason = finish();
      if (stopReason === null) runner.push(token);
    }
    sequences.push({
      stop_reason: stopReason,
      tokens,
      logprobs,
      ...(topk > 0 ? { topk_logprobs: topkRows } : {}),
    });
  }
  return {
    finished: sequences.every((s) => s.stop_reason !== null),
    sequences,
    ...(parsed.promptLogprobs ? { prompt_logprobs: promptLogprobs } : {}),
    ...(parsed.topkPromptLogprobs > 0 ? { topk_prompt_logprobs: topkPromptLogprobs } : {}),
    ...(altK > 0 ? { prompt_alt_tokens: alt } : {}),
    ...(target !== null ? { target_prompt_logprobs: targetLogprobs } : {}),
  };
}
