import { encodeCutRow } from '../../shared/repositories/prefix/codec/cut-row.js';
import { decodeRowItem } from '../../shared/repositories/prefix/codec/row-item.js';
import { packedSizes } from '../../shared/repositories/prefix/codec/token-packing.js';
import type { CutRow } from '../../shared/repositories/prefix/types.js';
import { seededRandom } from '../../test/support/seeded-random.js';

/**
 * The prefix benchmark's workload: unfinished sample calls at a cut, generated from a fixed seed.
 * Token counts are log-uniform over [minTokens, maxTokens]; token ids are uniform over a BPE-sized
 * vocabulary (the packer's worst realistic case: no small-id skew, no runs); logprobs are float32.
 */

export interface WorkloadSpec {
  readonly calls: number;
  readonly minTokens: number;
  readonly maxTokens: number;
  readonly vocab: number;
  readonly seed: number;
}

export interface Workload {
  readonly spec: WorkloadSpec;
  readonly contentId: string;
  readonly rows: readonly CutRow[];
  readonly totalTokens: number;
}

export function buildWorkload(spec: WorkloadSpec): Workload {
  const random = seededRandom(spec.seed);
  const contentId = `bench-checkpoint-${spec.seed}`;
  const ratio = spec.maxTokens / spec.minTokens;
  let totalTokens = 0;
  const rows: CutRow[] = Array.from({ length: spec.calls }, (_, index) => {
    const count = Math.round(spec.minTokens * ratio ** random());
    const tokens = new Uint32Array(count);
    const logprobs = new Float32Array(count);
    for (let i = 0; i < count; i++) {
      tokens[i] = Math.floor(random() * spec.vocab);
      // Sampled tokens mostly have high probability: logprobs near 0 with a long negative tail.
      logprobs[i] = Math.log(1 - 0.999 * random() ** 4);
    }
    totalTokens += count;
    return { callId: `call-${index}`, contentId, weightVersion: 3, tokens, logprobs };
  });
  return { spec, contentId, rows, totalTokens };
}

export interface EncodingStats {
  /** Stored items (chunks) over all rows. */
  readonly items: number;
  /** Packed token-id bytes per token, as stored (mode and width bytes included). */
  readonly tokenIdBytesPerToken: number;
  /** Whole stored item bytes per token: header, token ids, float32 logprobs, digest. */
  readonly itemBytesPerToken: number;
}

/** What the row encoding stores for this workload; both sides of the save cases store exactly this. */
export function encodingStats(workload: Workload): EncodingStats {
  let items = 0;
  let tokenIdBytes = 0;
  let itemBytes = 0;
  for (const row of workload.rows) {
    for (const item of encodeCutRow(row, 'stats').items) {
      items += 1;
      itemBytes += item.bytes.length;
      const sizes = Object.values(packedSizes(decodeRowItem(item.bytes).tokens));
      tokenIdBytes += Math.min(...sizes);
    }
  }
  return {
    items,
    tokenIdBytesPerToken: tokenIdBytes / workload.totalTokens,
    itemBytesPerToken: itemBytes / workload.totalTokens,
  };
}
