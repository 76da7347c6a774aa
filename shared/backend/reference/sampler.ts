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
 */

import { InfrastructureError } from '../../errors.js';
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

function chooseToken(
  logprobs: Float64Array,
  request: ReferenceSampleRequest,
  seed: readonly [number, number],
  sampleIndex: number,
  position: number,
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
  const target = uniformAt(TAG_SAMPLE, seed[0], seed[1], sampleIndex, position) * total;
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
  parsed.prompt.forEach((token, t) => {
    if (t > 0) {
      if (parsed.promptLogprobs) promptLogprobs.push(Math.fround(promptRunner.logprobs[token] as number));
      if (parsed.topkPromptLogprobs > 0) {
        const top = rankedTokens(promptRunner.logprobs).slice(0, parsed.topkPromptLogprobs);
        topkPromptLogprobs.push(top.map((v) => [v, Math.fround(promptRunner.logprobs[v] as number)]));
      }
    }
    promptRunner.push(token);
  });

  const sequences: GeneratedSequence[] = [];
  const scratch = new Float64Array(VOCAB);
  for (let i = 0; i < parsed.numSamples; i++) {
    const prefix = options.resume?.[i];
    if (prefix) checkPrefix(prefix, i, parsed.maxTokens);
    const tokens = prefix ? [...prefix.tokens] : [];
    const logprobs = prefix ? [...prefix.logprobs] : [];
    const finish = (): StopReason | null =>
      endsWithStop(tokens, parsed.stops) ? 'stop' : tokens.length >= parsed.maxTokens ? 'length' : null;
    let stopReason = tokens.length > 0 ? finish() : null;
    const runner = promptRunner.clone();
    if (stopReason === null) for (const token of tokens) runner.push(token);
    for (let generated = 0; stopReason === null && generated < budget; generated++) {
      const token = chooseToken(runner.logprobs, parsed, seed, i, tokens.length, scratch);
      tokens.push(token);
      logprobs.push(Math.fround(runner.logprobs[token] as number));
      stopReason = finish();
      if (stopReason === null) runner.push(token);
    }
    sequences.push({ stop_reason: stopReason, tokens, logprobs });
  }
  return {
    finished: sequences.every((s) => s.stop_reason !== null),
    sequences,
    ...(parsed.promptLogprobs ? { prompt_logprobs: promptLogprobs } : {}),
    ...(parsed.topkPromptLogprobs > 0 ? { topk_prompt_logprobs: topkPromptLogprobs } : {}),
  };
}
