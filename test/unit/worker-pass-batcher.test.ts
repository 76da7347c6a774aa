import { describe, expect, it } from 'vitest';
import type { Backend, BackendState, ForwardBackwardInput, PassItem } from '../../shared/backend/backend.js';
import { passInputFromJson } from '../../shared/backend/pass-input.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { PassBatcher } from '../../shared/services/worker/pass-batcher.js';

const reference = new ReferenceBackend();

function input(text: string, badToken = false): ForwardBackwardInput {
  const all = [...Buffer.from(text, 'utf8')];
  const tokens = all.slice(0, -1);
  if (badToken) tokens[0] = 4096;
  const datum = {
    model_input: { chunks: [{ type: 'encoded_text', tokens }] },
    loss_fn_inputs: {
      target_tokens: { data: all.slice(1), dtype: 'int64' as const, shape: [tokens.length] },
    },
  };
  return passInputFromJson({ data: [datum], loss_fn: 'cross_entropy' }, 'input');
}

function recording(inner: Backend = reference): Backend & { calls: number[] } {
  const backend = Object.create(inner) as Backend & { calls: number[] };
  backend.calls = [];
  backend.runPasses = async (items: readonly PassItem[]) => {
    backend.calls.push(items.length);
    return inner.runPasses(items);
  };
  return backend;
}

async function models(n: number): Promise<BackendState[]> {
  return Promise.all(
    Array.from({ length: n }, (_, i) =>
      reference.createModel({ base_model: 'reference/byte-lm', lora_config: { rank: 2 + i, seed: i } }),
    ),
  );
}

describe('PassBatcher (R2: passes of several models fused into one backend call)', () => {
  it('fuses passes that arrive in the same tick into one runPasses call, each getting its own result', async () => {
    const backend = recording();
    const batcher = new PassBatcher(backend);
    const states = await models(3);
    const items: PassItem[] = states.map((state, i) => ({
      type: i === 1 ? 'forward' : 'forward_backward',
      state,
      input: input(`model ${i} text`),
    }));
    const outcomes = await Promise.all(items.map((item) => batcher.run(item)));
    expect(backend.calls).toEqual([3]);
    expect(batcher.batches).toBe(1);
    for (const [i, item] of items.entries()) {
      const outcome = outcomes[i];
      expect(outcome?.ok).toBe(true);
      const direct =
        item.type === 'forward'
          ? await reference.forward(item.state, item.input)
          : (await reference.forwardBackward(item.state, item.input)).result;
      expect(outcome?.ok && outcome.result).toEqual(direct);
    }
  });

  it('a user error fails only its own pass', async () => {
    const batcher = new PassBatcher(reference);
    const [a, b] = await models(2);
    const [good, bad] = await Promise.all([
      batcher.run({ type: 'forward_backward', state: a as BackendState, input: input('fine') }),
      batcher.run({ type: 'forward_backward', state: b as BackendState, input: input('broken', true) }),
    ]);
    expect(good?.ok).toBe(true);
    expect(bad).toMatchObject({ ok: false, error: { name: 'StepUserError' } });
  });

  it('a backend failure rejects every pass of its batch', async () => {
    const broken = Object.create(reference) as Backend;
    broken.runPasses = async () => {
      throw new Error('device lost');
    };
    const batcher = new PassBatcher(broken);
    const [a, b] = await models(2);
    const results = await Promise.allSettled([
      batcher.run({ type: 'forward', state: a as BackendState, input: input('x y') }),
      batcher.run({ type: 'forward', state: b as BackendState, input: input('x y') }),
    ]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
  });

  it('with a window, passes arriving a little apart still share a batch', async () => {
    const backend = recording();
    const batcher = new PassBatcher(backend, 50);
    const [a, b] = await models(2);
    const first = batcher.run({ type: 'forward', state: a as BackendState, input: input('early') });
    await new Promise((resolve) => setTimeout(resolve, 10));
    const second = batcher.run({ type: 'forward', state: b as BackendState, input: input('late') });
    await Promise.all([first, second]);
    expect(backend.calls).toEqual([2]);
  });
});
