/**
 * The reference language model: a byte-level token model small enough to train on a CPU in milliseconds.
 *
 *   s_t  = sum_{u<=t} E[x_u]                          causal running sum of embeddings
 *   h_t  = tanh(E[x_t] + MIX * s_t / (t+1))           last token plus a causal average (frozen)
 *   h'_t = h_t + (h_t A) B                             LoRA on the hidden projection (A[d,r], B[r,d])
 *   z_t  = b + h'_t W                                  frozen output projection W[d,V], bias b[V]
 *   log p(. | x_<=t) = log_softmax(z_t)
 *
 * E, W, b derive from the base model's name by counter-based hashing; only A and B train. B starts at zero,
 * so a new adapter equals the base model. Every loop runs in a fixed order over Float64Array, so the same
 * inputs give the same bits in any process (exp/log/tanh are V8's fdlibm ports, deterministic per build).
 */
import { hashString, seedWords, uniformAt } from './prng.js';

/** Byte-level vocabulary: token id = byte value, so text prompts and stop strings encode as UTF-8. */
export const VOCAB = 256;
export const DIM = 16;
export const MAX_RANK = 64;
/** Longest prompt plus generation the reference model accepts. */
export const MAX_CONTEXT = 4096;
const CONTEXT_MIX = 0.5;
const UNEMBED_SCALE = 4 / Math.sqrt(DIM);

const TAG_EMBED = 1;
const TAG_UNEMBED = 2;
const TAG_BIAS = 3;
const TAG_LORA_A = 4;

export interface BaseWeights {
  readonly name: string;
  /** E[v,i] at v*DIM + i. */
  readonly embedding: Float64Array;
  /** W[i,v] at i*VOCAB + v. */
  readonly unembed: Float64Array;
  /** The same W transposed, W[i,v] at v*DIM + i, so each logit is one contiguous dot product. */
  readonly unembedT: Float64Array;
  readonly bias: Float64Array;
}

/** Values uniform in [-scale, scale), keyed by (name hash, tag, index). */
function fill(length: number, nameHash: number, tag: number, scale: number): Float64Array {
  const out = new Float64Array(length);
  for (let i = 0; i < length; i++) out[i] = (uniformAt(nameHash, tag, i) * 2 - 1) * scale;
  return out;
}

const baseCache = new Map<string, BaseWeights>();

/** The frozen base weights of `name` (memoised; a pure function of the name). */
export function baseWeights(name: string): BaseWeights {
  const cached = baseCache.get(name);
  if (cached) return cached;
  const h = hashString(name);
  const unembed = fill(DIM * VOCAB, h, TAG_UNEMBED, UNEMBED_SCALE);
  const unembedT = new Float64Array(DIM * VOCAB);
  for (let i = 0; i < DIM; i++)
    for (let v = 0; v < VOCAB; v++) unembedT[v * DIM + i] = unembed[i * VOCAB + v] as number;
  const weights: BaseWeights = {
    name,
    embedding: fill(VOCAB * DIM, h, TAG_EMBED, 1),
    unembed,
    unembedT,
    bias: fill(VOCAB, h, TAG_BIAS, 1),
  };
  if (baseCache.size >= 16) baseCache.clear();
  baseCache.set(name, weights);
  return weights;
}

/** Adapter parameters in one flat array: A (DIM x rank, row-major) then B (rank x DIM, row-major). */
export function adapterSize(rank: number): number {
  return 2 * DIM * rank;
}

/** A new adapter: A uniform in +-1/sqrt(DIM) keyed by (base model, seed), B zero. */
export function initialAdapter(baseModel: string, rank: number, seed: number): Float64Array {
  const params = new Float64Array(adapterSize(rank));
  const h = hashString(baseModel);
  const [seedLow, seedHigh] = seedWords(seed);
  const scale = 1 / Math.sqrt(DIM);
  for (let i = 0; i < DIM * rank; i++)
    params[i] = (uniformAt(h, TAG_LORA_A, seedLow, seedHigh, i) * 2 - 1) * scale;
  return params;
}

/**
 * Runs one sequence token by token. After `push(x_t)`, `logprobs` holds log p(. | x_<=t); `backward`
 * then adds that position's gradient to an accumulator. Training, scoring and sampling share this path,
 * so a sampled token's logprob equals what `forward` reports for it.
 */
export class SequenceRunner {
  readonly logprobs = new Float64Array(VOCAB);
  private readonly probs = new Float64Array(VOCAB);
  private readonly sum = new Float64Array(DIM);
  private count = 0;
  private readonly hidden = new Float64Array(DIM);
  private readonly low: Float64Array;
  private readonly adapted = new Float64Array(DIM);
  private readonly logits = new Float64Array(VOCAB);
  private readonly dLogits = new Float64Array(VOCAB);
  private readonly dAdapted = new Float64Array(DIM);
  private readonly dLow: Float64Array;

  /** `params` may be empty (rank 0): the bare base model. */
  constructor(
    private readonly base: BaseWeights,
    private readonly params: Float64Array,
    private readonly rank: number,
  ) {
    this.low = new Float64Array(rank);
    this.dLow = new Float64Array(rank);
  }

  /** An independent runner at the same position (used to fork one prompt into several samples). */
  clone(): SequenceRunner {
    const copy = new SequenceRunner(this.base, this.params, this.rank);
    copy.sum.set(this.sum);
    copy.count = this.count;
    copy.hidden.set(this.hidden);
    copy.low.set(this.low);
    copy.adapted.set(this.adapted);
    copy.logits.set(this.logits);
    copy.logprobs.set(this.logprobs);
    copy.probs.set(this.probs);
    return copy;
  }

  push(token: number): void {
    const { embedding, unembedT, bias } = this.base;
    const { sum, hidden, low, adapted, logits, params, rank } = this;
    const row = token * DIM;
    this.count += 1;
    for (let i = 0; i < DIM; i++) {
      sum[i] = (sum[i] as number) + (embedding[row + i] as number);
      hidden[i] = Math.tanh((embedding[row + i] as number) + (CONTEXT_MIX * (sum[i] as number)) / this.count);
    }
    low.fill(0);
    for (let i = 0; i < DIM; i++) {
      const hi = hidden[i] as number;
      for (let k = 0; k < rank; k++) low[k] = (low[k] as number) + hi * (params[i * rank + k] as number);
    }
    adapted.set(hidden);
    const bOffset = DIM * rank;
    for (let k = 0; k < rank; k++) {
      const lk = low[k] as number;
      for (let j = 0; j < DIM; j++) {
        adapted[j] = (adapted[j] as number) + lk * (params[bOffset + k * DIM + j] as number);
      }
    }
    for (let v = 0; v < VOCAB; v++) {
      const column = v * DIM;
      let acc = bias[v] as number;
      for (let j = 0; j < DIM; j++) acc += (adapted[j] as number) * (unembedT[column + j] as number);
      logits[v] = acc;
    }
    logSoftmax(logits, this.logprobs, this.probs);
  }

  /**
   * Adds d(L)/d(params) for the last pushed position to `grad`, where L depends on this position through
   * log p(targets[k]) with dL/dlog p(targets[k]) = slopes[k] (k < targets.length). Since
   * dlog p(t)/dz_v = [v = t] - p_v, dL/dz_v = sum_k slopes[k] [v = targets[k]] - p_v sum_k slopes[k].
   */
  backward(targets: Int32Array, slopes: Float64Array, grad: Float64Array): void {
    const { unembed } = this.base;
    const { params, rank, hidden, low, dLogits, dAdapted, dLow, probs } = this;
    let total = 0;
    for (let k = 0; k < targets.length; k++) total += slopes[k] as number;
    const scale = -total;
    for (let v = 0; v < VOCAB; v++) dLogits[v] = scale * (probs[v] as number);
    for (let k = 0; k < targets.length; k++) {
      const target = targets[k] as number;
      dLogits[target] = (dLogits[target] as number) + (slopes[k] as number);
    }
    for (let j = 0; j < DIM; j++) {
      const wRow = j * VOCAB;
      let acc = 0;
      for (let v = 0; v < VOCAB; v++) acc += (unembed[wRow + v] as number) * (dLogits[v] as number);
      dAdapted[j] = acc;
    }
    const bOffset = DIM * rank;
    for (let k = 0; k < rank; k++) {
      const lk = low[k] as number;
      let acc = 0;
      for (let j = 0; j < DIM; j++) {
        const index = bOffset + k * DIM + j;
        grad[index] = (grad[index] as number) + lk * (dAdapted[j] as number);
        acc += (params[index] as number) * (dAdapted[j] as number);
      }
      dLow[k] = acc;
    }
    for (let i = 0; i < DIM; i++) {
      const hi = hidden[i] as number;
      for (let k = 0; k < rank; k++) {
        const index = i * rank + k;
        grad[index] = (grad[index] as number) + hi * (dLow[k] as number);
      }
    }
  }
}

/** Log-probabilities and probabilities of a logit vector (probs are kept for the backward pass). */
function logSoftmax(logits: Float64Array, logprobs: Float64Array, probs: Float64Array): void {
  let max = Number.NEGATIVE_INFINITY;
  for (let v = 0; v < VOCAB; v++) if ((logits[v] as number) > max) max = logits[v] as number;
  let total = 0;
  for (let v = 0; v < VOCAB; v++) {
    const e = Math.exp((logits[v] as number) - max);
    probs[v] = e;
    total += e;
  }
  const logNorm = max + Math.log(total);
  for (let v = 0; v < VOCAB; v++) {
    logprobs[v] = (logits[v] as number) - logNorm;
    probs[v] = (probs[v] as number) / total;
  }
}
