import type { BackendState } from '../../shared/backend/backend.js';
import { passInputFromJson } from '../../shared/backend/pass-input.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';

export const referenceBackend = new ReferenceBackend();

/**
 * A reference model trained a few Adam steps on one sentence, so its adapter's B is non-zero and its
 * optimizer moments exist: a checkpoint worth archiving. Deterministic for a given rank and seed.
 */
export async function trainedReferenceModel(
  rank: number,
  options: { readonly baseModel?: string; readonly seed?: number; readonly steps?: number } = {},
): Promise<BackendState> {
  const tokens = [...new TextEncoder().encode('the quick brown fox')];
  const input = passInputFromJson(
    {
      loss_fn: 'cross_entropy',
      data: [
        {
          model_input: { chunks: [{ type: 'encoded_text', tokens: tokens.slice(0, -1) }] },
          loss_fn_inputs: {
            target_tokens: { data: tokens.slice(1), dtype: 'int64', shape: [tokens.length - 1] },
          },
        },
      ],
    },
    'input',
  );
  let state = await referenceBackend.createModel({
    base_model: options.baseModel ?? 'reference/byte-lm',
    lora_config: { rank, seed: options.seed ?? 5 },
  });
  for (let step = 0; step < (options.steps ?? 3); step++) {
    state = (await referenceBackend.forwardBackward(state, input)).state;
    state = (await referenceBackend.optimStep(state, { learning_rate: 0.05 })).state;
  }
  return state;
}
