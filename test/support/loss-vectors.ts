import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { PassDatum } from '../../shared/backend/reference/inputs.js';
import { lossFunction } from '../../shared/backend/reference/losses.js';
import { float32Tensor } from '../../shared/backend/tensor.js';

/**
 * Shared loss test vectors (docs/design.md#l1): per-target inputs and the reference backend's loss
 * value, slope d loss / d logprob, `loss:mean` weight, ratio and clip flag for each, written to
 * test/support/fixtures/loss-vectors.json. test/unit/engine-loss-vectors.test.ts checks the file still equals
 * what the reference computes; the torch engine's pytest (engines/torch/tests/test_loss_vectors.py)
 * checks its losses against the same file, so both implementations answer to one set of numbers.
 *
 *   node --import tsx test/support/loss-vectors.ts    rewrites the file
 */

export const LOSS_VECTORS_FILE = fileURLToPath(new URL('./fixtures/loss-vectors.json', import.meta.url));

interface VectorInput {
  readonly loss_fn: string;
  readonly loss_fn_config: Record<string, number>;
  readonly target_shape: number[];
  /** The learner's logprob of each target, row-major. */
  readonly learner_logprobs: number[];
  readonly loss_fn_inputs: Record<string, number[]>;
}

export interface LossVector extends VectorInput {
  readonly expected: {
    readonly values: number[];
    readonly slopes: number[];
    readonly weights: number[];
    readonly ratios: number[] | null;
    readonly clipped: boolean[] | null;
  };
}

const LP = [-1, -2, -0.5, -3];
const POLICY = { logprobs: [-1.125, -1.5, -0.5, -3.5], advantages: [1, -2, 0.5, 1.5] };

const INPUTS: readonly VectorInput[] = [
  {
    loss_fn: 'cross_entropy',
    loss_fn_config: {},
    target_shape: [3],
    learner_logprobs: [-1.5, -0.25, -3],
    loss_fn_inputs: {},
  },
  {
    loss_fn: 'cross_entropy',
    loss_fn_config: {},
    target_shape: [2, 2],
    learner_logprobs: [-1, -2, -0.5, -4],
    loss_fn_inputs: { weights: [1, -0.5, 2, 0] },
  },
  {
    loss_fn: 'importance_sampling',
    loss_fn_config: {},
    target_shape: [4],
    learner_logprobs: LP,
    loss_fn_inputs: POLICY,
  },
  { loss_fn: 'ppo', loss_fn_config: {}, target_shape: [4], learner_logprobs: LP, loss_fn_inputs: POLICY },
  {
    loss_fn: 'ppo',
    loss_fn_config: { clip_low_threshold: 0.5, clip_high_threshold: 1.5 },
    target_shape: [2, 2],
    learner_logprobs: LP,
    loss_fn_inputs: POLICY,
  },
  { loss_fn: 'cispo', loss_fn_config: {}, target_shape: [4], learner_logprobs: LP, loss_fn_inputs: POLICY },
  { loss_fn: 'dro', loss_fn_config: {}, target_shape: [4], learner_logprobs: LP, loss_fn_inputs: POLICY },
  {
    loss_fn: 'dro',
    loss_fn_config: { beta: 0.25 },
    target_shape: [4],
    learner_logprobs: LP,
    loss_fn_inputs: POLICY,
  },
];

function vector(input: VectorInput): LossVector {
  const lossFnInputs = Object.fromEntries(
    Object.entries(input.loss_fn_inputs).map(([name, values]) => [
      name,
      { ...float32Tensor(Float32Array.from(values)), shape: input.target_shape },
    ]),
  );
  const count = input.learner_logprobs.length;
  const datum: PassDatum = {
    field: 'data[0]',
    tokens: new Int32Array(input.target_shape[0] ?? 0),
    targets: new Int32Array(count),
    targetShape: input.target_shape,
    perPosition: input.target_shape.length === 2 ? (input.target_shape[1] ?? 1) : 1,
    lossFnInputs,
  };
  const { loss, config } = lossFunction(input.loss_fn, input.loss_fn_config);
  const terms = loss.forDatum(datum, config);
  const each = <T>(f: (i: number, lp: number) => T) => input.learner_logprobs.map((lp, i) => f(i, lp));
  return {
    ...input,
    expected: {
      values: each((i, lp) => terms.value(i, lp)),
      slopes: each((i, lp) => terms.slope(i, lp)),
      weights: each((i) => terms.weight(i)),
      ratios: terms.ratio ? each((i, lp) => (terms.ratio as (i: number, lp: number) => number)(i, lp)) : null,
      clipped: terms.clipped
        ? each((i, lp) => (terms.clipped as (i: number, lp: number) => boolean)(i, lp))
        : null,
    },
  };
}

export function referenceLossVectors(): LossVector[] {
  return INPUTS.map(vector);
}

export function lossVectorsJson(): string {
  return `${JSON.stringify({ vectors: referenceLossVectors() }, null, 1)}\n`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(LOSS_VECTORS_FILE, lossVectorsJson());
  console.log(`wrote ${LOSS_VECTORS_FILE}`);
}
