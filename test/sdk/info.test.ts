import { expect, it } from 'vitest';
import { describeScenario } from './scenario.js';

const BASE_MODEL = 'reference/byte-lm';

describeScenario('info', (report) => {
  it('get_server_capabilities lists the reference model', () => {
    const { models } = report().observed<{ models: string[] }>(
      'server_capabilities_list_the_reference_model',
    );
    expect(models).toContain(BASE_MODEL);
  });

  it('TrainingClient.get_info names the model and its tokenizer', () => {
    const info = report().observed<{
      model_id: string;
      expected_model_id: string;
      model_name: string | null;
      tokenizer_id: string | null;
    }>('training_client_get_info');
    expect(info.model_id).toBe(info.expected_model_id);
    expect(info.model_name).toBe(BASE_MODEL);
    expect(info.tokenizer_id).toEqual(expect.any(String));
  });

  it('SamplingClient.get_base_model (GET samplers/{id}) of a base-model sampler', () => {
    expect(report().observed('sampling_client_base_model_from_a_base_model')).toEqual({
      base_model: BASE_MODEL,
    });
  });

  it('SamplingClient.get_base_model of a sampler checkpoint', () => {
    const { base_model } = report().observed<{ base_model: string }>(
      'sampling_client_base_model_from_a_checkpoint',
    );
    expect(base_model).toBe(BASE_MODEL);
  });

  it('weights_info of a training checkpoint gives its base model and LoRA rank', () => {
    expect(report().observed('weights_info_of_a_training_checkpoint')).toEqual({
      base_model: BASE_MODEL,
      is_lora: true,
      lora_rank: 8,
    });
  });
});
