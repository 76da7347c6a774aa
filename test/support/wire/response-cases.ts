import type { StoredForwardBackwardResult, StoredSampleResult } from '../../../shared/wire/results.js';

/**
 * Stored results our encoders turn into protobuf; their bytes (responses.ours.json) and the SDK's
 * decoding of those bytes (responses.sdk.json) are fixtures, see make_fixtures.py.
 */

const f = (values: number[]) => ({ dtype: 'float32' as const, data: values });

export const FORWARD_BACKWARD_CASES: Record<string, StoredForwardBackwardResult> = {
  'cross-entropy': {
    loss_fn_output_type: 'ArrayRecord',
    loss_fn_outputs: [
      { logprobs: f([-0.5, -1.25, -3.1]), elementwise_loss: f([0.5, 1.25, 3.1]) },
      { logprobs: f([-0.1, -0.2, -0.3, -0.4, -0.5]), elementwise_loss: f([0.1, 0.2, 0.3, 0.4, 0.5]) },
      { logprobs: f([-2, -7.75]), elementwise_loss: f([2, 7.75]) },
    ],
    metrics: { 'loss:sum': 18.13, 'ntokens:sum': 10, 'clock:unique': 1.5e9 },
  },
  'ragged-trailing-shapes': {
    loss_fn_output_type: 'pkg.losses:TorchLossReturn',
    loss_fn_outputs: [
      {
        topk: { dtype: 'float32', data: [1, 2, 3, 4, 5, 6, 7, 8], shape: [2, 4] },
        ids: { dtype: 'int64', data: [9, 8] },
      },
      {
        topk: { dtype: 'float32', data: [0, 0, 0, 0], shape: [1, 4] },
        ids: { dtype: 'int64', data: [7], shape: [1] },
      },
      {
        topk: { dtype: 'float32', data: [1.5, 2.5], shape: [1, 2] },
        ids: { dtype: 'int64', data: [2 ** 40] },
      },
    ],
    metrics: { 'loss:mean': 0.25 },
  },
  'field-sets-change': {
    loss_fn_output_type: 'ArrayRecord',
    loss_fn_outputs: [{ a: f([1]) }, { a: f([2]), b: f([3]) }, { b: f([4]), a: f([5]) }, { a: f([6]) }],
    metrics: {},
  },
  'no-datums': { loss_fn_output_type: 'ArrayRecord', loss_fn_outputs: [], metrics: { 'loss:sum': 0 } },
  'datums-without-fields': { loss_fn_output_type: 'ArrayRecord', loss_fn_outputs: [{}, {}], metrics: {} },
};

export const SAMPLE_CASES: Record<string, StoredSampleResult> = {
  full: {
    sequences: [
      { stop_reason: 'stop', tokens: [5, 6, 7], logprobs: [-0.5, -1, -0.125] },
      { stop_reason: 'length', tokens: [150_000, 0], logprobs: null },
    ],
    prompt_logprobs: [null, -2.5, -0.75],
    topk_prompt_logprobs: [
      null,
      [
        [11, -0.5],
        [12, -1.5],
        [13, -2.5],
      ],
      [[21, -0.25]],
    ],
    prompt_cache_hit_tokens: 3,
  },
  minimal: { sequences: [{ stop_reason: 'stop', tokens: [1] }] },
  'no-sequences': { sequences: [], prompt_logprobs: [null], prompt_cache_hit_tokens: 0 },
};
