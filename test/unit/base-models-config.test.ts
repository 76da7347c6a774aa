import { describe, expect, it } from 'vitest';
import { MAX_CONTEXT } from '../../shared/backend/reference/model.js';
import { BASE_MODELS_VAR, DEFAULT_BASE_MODEL, readConfig } from '../../shared/base/config.js';
import { ConfigError, ValidationError } from '../../shared/base/errors.js';
import { servedBaseModel, supportedModels } from '../../shared/services/api/capabilities.js';

/** G6: the pool's base models come from BASE_MODELS; unset, the reference model alone, as before. */
describe('base models from configuration (G6)', () => {
  it('defaults to the reference model, with REFERENCE_TOKENIZER_ID as its tokenizer', () => {
    expect(readConfig({}).baseModels).toEqual([{ name: DEFAULT_BASE_MODEL }]);
    expect(readConfig({ REFERENCE_TOKENIZER_ID: '/tok' }).baseModels).toEqual([
      { name: DEFAULT_BASE_MODEL, tokenizer_id: '/tok' },
    ]);
    // The reference model publishes its own limits (B2).
    expect(supportedModels(readConfig({}).baseModels)).toEqual([
      {
        model_name: DEFAULT_BASE_MODEL,
        max_context_length: MAX_CONTEXT,
        vocab_size: 256,
        max_num_samples: 256,
      },
    ]);
  });

  it('takes each model’s limits from BASE_MODELS, a vocabulary only when named (B2)', () => {
    const models = readConfig({
      [BASE_MODELS_VAR]: JSON.stringify([
        { name: '/models/tiny', max_context_length: 512, vocab_size: 32000, max_num_samples: 8 },
        { name: 'Qwen/Qwen3-0.6B' },
      ]),
    }).baseModels;
    expect(supportedModels(models)).toEqual([
      { model_name: '/models/tiny', max_context_length: 512, vocab_size: 32000, max_num_samples: 8 },
      { model_name: 'Qwen/Qwen3-0.6B', max_context_length: MAX_CONTEXT, max_num_samples: 256 },
    ]);
  });

  it('reads the list BASE_MODELS names, and capabilities list exactly it', () => {
    const models = readConfig({
      [BASE_MODELS_VAR]: JSON.stringify([
        { name: '/models/tiny-llama', tokenizer_id: '/models/tiny-llama', max_context_length: 512 },
        { name: 'Qwen/Qwen3-0.6B' },
      ]),
    }).baseModels;
    expect(models).toEqual([
      { name: '/models/tiny-llama', tokenizer_id: '/models/tiny-llama', max_context_length: 512 },
      { name: 'Qwen/Qwen3-0.6B' },
    ]);
    expect(supportedModels(models).map((model) => model.model_name)).toEqual([
      '/models/tiny-llama',
      'Qwen/Qwen3-0.6B',
    ]);
    expect(servedBaseModel('Qwen/Qwen3-0.6B', 'base_model', models).name).toBe('Qwen/Qwen3-0.6B');
    const error = (() => {
      try {
        return servedBaseModel(DEFAULT_BASE_MODEL, 'base_model', models);
      } catch (thrown) {
        return thrown;
      }
    })();
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).status).toBe(400);
    expect((error as ValidationError).context.field).toBe('base_model');
    expect((error as Error).message).toBe(
      'base_model: "reference/byte-lm" is not served here; the supported base models are "/models/tiny-llama", "Qwen/Qwen3-0.6B"',
    );
  });

  it.each([
    ['not json', /is not JSON/],
    ['[]', /non-empty list/],
    ['{"name":"x"}', /non-empty list/],
    ['[{"tokenizer_id":"t"}]', /entry 0 has no name/],
    ['[{"name":"a"},{"name":"a"}]', /names a twice/],
    ['[{"name":"a","tokenizer_id":""}]', /tokenizer_id/],
    ['[{"name":"a","max_context_length":0}]', /max_context_length/],
    ['[{"name":"a","vocab_size":1.5}]', /vocab_size/],
    ['[{"name":"a","max_num_samples":"8"}]', /max_num_samples/],
  ])('refuses BASE_MODELS=%s, naming the variable', (raw, problem) => {
    const read = () => readConfig({ [BASE_MODELS_VAR]: raw }).baseModels;
    expect(read).toThrow(ConfigError);
    expect(read).toThrow(problem);
    expect(read).toThrow(/BASE_MODELS/);
  });
});
