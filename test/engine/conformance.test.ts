import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ForwardBackwardInput, SampleRequest } from '../../shared/backend/backend.js';
import { EngineBackend } from '../../shared/backend/engine/engine-backend.js';
import { type EngineHello, EngineProcess } from '../../shared/backend/engine/engine-process.js';
import {
  EngineProtocolError,
  encodeFrame,
  type Frame,
  FrameReader,
} from '../../shared/backend/engine/frame.js';
import { float32Tensor, int64Tensor } from '../../shared/backend/tensor.js';
import { StepUserError } from '../../shared/base/errors.js';
import { logger } from '../../shared/base/logger.js';
import { readTar } from '../../shared/wire/archive/tar.js';
import { engineUnderTest } from '../support/engine/engine-under-test.js';
import { engineUserTokens } from '../support/engine/tokens.js';

/**
 * Conformance of an engine process to docs/engine-protocol.md, version 1: what any engine (the torch
 * one by default, ENGINE_COMMAND for another) must answer, driven through the worker's own client
 * (EngineBackend) and, for the handshake and malformed requests, frame by frame.
 */

const target = engineUnderTest();
const suite = target.command === undefined ? describe.skip : describe;

let engine: EngineProcess;
let backend: EngineBackend;
let hello: EngineHello;
let base: string;

beforeAll(async () => {
  if (target.command === undefined) return;
  logger.setLogLevel('WARN');
  engine = new EngineProcess(target.command, { requestTimeoutMs: 120_000 });
  backend = new EngineBackend(engine);
  hello = await backend.start();
  base = hello.base_models[0]?.name ?? '';
}, 180_000);

afterAll(async () => {
  await engine?.stop();
});

function pass(tokens: readonly number[], weights?: readonly number[]): ForwardBackwardInput {
  return {
    loss_fn: 'cross_entropy',
    loss_fn_config: {},
    data: [
      {
        model_input: { chunks: [{ type: 'encoded_text', tokens: Int32Array.from(tokens.slice(0, -1)) }] },
        loss_fn_inputs: {
          target_tokens: int64Tensor(tokens.slice(1)),
          weights: float32Tensor(weights ?? tokens.slice(1).map(() => 1)),
        },
      },
    ],
  };
}

/** One request written and answered frame by frame, outside the worker's client. */
async function raw(requests: readonly Record<string, unknown>[]): Promise<Frame[]> {
  const command = target.command;
  if (command === undefined) throw new Error('no engine');
  const child = spawn(command.command, [...command.args], {
    stdio: ['pipe', 'pipe', 'ignore'],
    env: { ...process.env, ...command.env },
  });
  const reader = new FrameReader();
  const frames: Frame[] = [];
  const done = new Promise<void>((resolve) => {
    child.stdout.on('data', (chunk: Buffer) => {
      frames.push(...reader.push(chunk));
      if (frames.length >= requests.length) resolve();
    });
    child.on('exit', () => resolve());
  });
  for (const request of requests) for (const part of encodeFrame(request)) child.stdin.write(part);
  await done;
  child.kill('SIGKILL');
  return frames;
}

suite('engine protocol conformance (docs/engine-protocol.md)', () => {
  it('greets with a version the worker offers (2, else 1), its base models, device and dtype, and answers ping', async () => {
    // The worker offers version 2 first and falls back to 1 (docs/engine-protocol.md, "Version 2").
    expect([1, 2]).toContain(hello.protocol_version);
    expect(hello.engine.name).toEqual(expect.any(String));
    expect(hello.base_models.length).toBeGreaterThan(0);
    for (const model of hello.base_models) {
      expect(model).toMatchObject({ name: expect.any(String), tokenizer_id: expect.any(String) });
      expect(model.vocab_size).toBeGreaterThan(1);
    }
    if (target.baseModel !== undefined) expect(base).toBe(target.baseModel);
    expect(hello.device).toEqual(expect.any(String));
    expect(hello.dtype).toEqual(expect.any(String));
    await expect(backend.ping()).resolves.toBeUndefined();
  });

  // Two engine processes of its own start here: tens of seconds each on a busy machine.
  it('refuses another protocol version naming the ones it speaks, and unknown ops, as protocol errors', {
    timeout: 300_000,
  }, async () => {
    const [refused] = await raw([{ id: 1, op: 'hello', args: { protocol_version: 99, worker: 'test' } }]);
    expect(refused?.header).toMatchObject({ id: 1, ok: false, error: { kind: 'protocol' } });
    expect(JSON.stringify(refused?.header.error)).toMatch(/1/);
    const answers = await raw([
      { id: 1, op: 'hello', args: { protocol_version: 1, worker: 'test' } },
      { id: 2, op: 'no_such_op', args: {} },
      {
        id: 3,
        op: 'forward',
        args: { state: 'no-such-handle', input: { loss_fn: 'cross_entropy', data: [] } },
      },
    ]);
    expect(answers.map((frame) => frame.header.id)).toEqual([1, 2, 3]);
    expect(answers[1]?.header).toMatchObject({ ok: false, error: { kind: 'protocol' } });
    expect(answers[2]?.header).toMatchObject({ ok: false, error: { kind: 'protocol' } });
  });

  it('trains through handles: a changed state gets a new handle and the old one is gone', async () => {
    const vocab = hello.base_models[0]?.vocab_size ?? 2;
    const tokens = engineUserTokens(vocab, 12, 1);
    const created = await backend.createModel({ base_model: base, lora_config: { rank: 4, seed: 7 } });
    expect(created).toMatchObject({ kind: 'engine', base_model: base, weights_version: 0 });
    const first = await backend.forwardBackward(created, pass(tokens));
    const logprobs = first.result.loss_fn_outputs[0]?.logprobs;
    expect(logprobs?.dtype).toBe('float32');
    expect(logprobs?.shape).toEqual([tokens.length - 1]);
    expect(first.result.metrics['loss:sum']).toBeGreaterThan(0);
    await expect(backend.forward(created, pass(tokens))).rejects.toThrow(EngineProtocolError);
    const stepped = await backend.optimStep(first.state, { learning_rate: 0.01 });
    expect(stepped.state.weights_version).toBe(1);
    expect(stepped.result.metrics).toEqual(expect.any(Object));
    // A step on the same data lowers the loss.
    const after = await backend.forward(stepped.state, pass(tokens));
    expect(after.metrics['loss:sum']).toBeLessThan(first.result.metrics['loss:sum'] as number);
  });

  it('answers a bad input as a user error naming the field, leaving the state valid', async () => {
    const vocab = hello.base_models[0]?.vocab_size ?? 2;
    const state = await backend.createModel({ base_model: base, lora_config: { rank: 2, seed: 1 } });
    const bad = pass([1, 2, 3]);
    const datum = bad.data[0];
    if (datum === undefined) throw new Error('no datum');
    const input = {
      ...bad,
      data: [{ ...datum, loss_fn_inputs: { target_tokens: int64Tensor([2, vocab + 5]) } }],
    };
    const error = await backend.forwardBackward(state, input).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StepUserError);
    expect(String((error as StepUserError).context.field)).toMatch(/target_tokens/);
    await expect(backend.forward(state, pass([1, 2, 3]))).resolves.toBeDefined();
  });

  it('runs several models in one run_passes call, each answered on its own', async () => {
    const a = await backend.createModel({ base_model: base, lora_config: { rank: 2, seed: 1 } });
    const b = await backend.createModel({ base_model: base, lora_config: { rank: 4, seed: 2 } });
    const alone = await backend.forward(b, pass([5, 6, 7, 8]));
    const outcomes = await backend.runPasses([
      { type: 'forward_backward', state: a, input: pass([1, 2, 3, 4]) },
      { type: 'forward', state: b, input: pass([5, 6, 7, 8]) },
    ]);
    expect(outcomes.map((outcome) => outcome.ok)).toEqual([true, true]);
    const fused = outcomes[1]?.ok ? outcomes[1].result : undefined;
    const fusedLogprobs = Array.from(fused?.loss_fn_outputs[0]?.logprobs?.data as Float32Array);
    const aloneLogprobs = Array.from(alone.loss_fn_outputs[0]?.logprobs?.data as Float32Array);
    expect(fusedLogprobs).toHaveLength(aloneLogprobs.length);
    for (const [i, value] of fusedLogprobs.entries())
      expect(value).toBeCloseTo(aloneLogprobs[i] as number, 4);
  });

  it('exports a PEFT adapter tar naming its base model, and states round-trip through bytes', async () => {
    const created = await backend.createModel({ base_model: base, lora_config: { rank: 2, seed: 3 } });
    const { state } = await backend.forwardBackward(created, pass([3, 4, 5, 6]));
    const stepped = (await backend.optimStep(state, { learning_rate: 0.05 })).state;
    for (const kind of ['sampler', 'training'] as const) {
      const files = new Map(readTar(await backend.exportWeights(stepped, kind)).map((f) => [f.name, f.data]));
      const config = JSON.parse(new TextDecoder().decode(files.get('adapter_config.json'))) as Record<
        string,
        unknown
      >;
      expect(config.base_model_name_or_path).toBe(base);
      expect(files.has('adapter_model.safetensors')).toBe(true);
      expect(files.has('optimizer.safetensors')).toBe(kind === 'training');
    }
    const bytes = await backend.serializeState(stepped);
    const fresh = new EngineBackend(engine);
    const loaded = await fresh.deserializeState(bytes);
    expect(loaded.weights_version).toBe(1);
    const before = await backend.forward(stepped, pass([7, 8, 9]));
    const again = await fresh.forward(loaded, pass([7, 8, 9]));
    expect(Array.from(again.loss_fn_outputs[0]?.logprobs?.data as Float32Array)).toEqual(
      Array.from(before.loss_fn_outputs[0]?.logprobs?.data as Float32Array),
    );
  });

  it('samples reproducibly by seed, and a cut call resumes exactly (P6)', async () => {
    const created = await backend.createModel({ base_model: base, lora_config: { rank: 2, seed: 4 } });
    const sampler = await backend.loadSampler(base, await backend.exportWeights(created, 'sampler'));
    const request: SampleRequest = {
      num_samples: 2,
      prompt: { chunks: [{ type: 'encoded_text', tokens: Int32Array.from([1, 2, 3]) }] },
      sampling_params: { max_tokens: 8, temperature: 1, seed: 11 },
      prompt_logprobs: true,
    };
    const full = await backend.sample(sampler, request);
    expect(full.finished).toBe(true);
    expect(full.sequences).toHaveLength(2);
    expect(full.prompt_logprobs).toHaveLength(3);
    expect(await backend.sample(sampler, request)).toEqual(full);
    const cut = await backend.sample(sampler, request, { maxNewTokens: 3 });
    expect(cut.finished).toBe(false);
    const resumed = await backend.sample(sampler, request, { resume: cut.sequences });
    expect(resumed.sequences.map((s) => s.tokens)).toEqual(full.sequences.map((s) => s.tokens));
    const base_ = await backend.loadSampler(base, null);
    expect((await backend.sample(base_, request)).sequences).toHaveLength(2);
  });

  it('answers the SDK 0.26+ sampling outputs (W8), resumed top-k rows included (P6)', async () => {
    const created = await backend.createModel({ base_model: base, lora_config: { rank: 2, seed: 4 } });
    const sampler = await backend.loadSampler(base, await backend.exportWeights(created, 'sampler'));
    const prompt = [1, 2, 3, 4];
    const request: SampleRequest = {
      num_samples: 2,
      prompt: { chunks: [{ type: 'encoded_text', tokens: Int32Array.from(prompt) }] },
      sampling_params: { max_tokens: 6, temperature: 1, seed: 5 },
      prompt_logprobs: true,
      topk_sample_logprobs: 3,
      prompt_alt_tokens_k: 2,
      // Each prompt position asks for its own next token, and nothing in the second column.
      target_prompt_logprobs: { shape: [3, 2], data: [2, -1, 3, -1, 4, -1] },
    };
    const full = await backend.sample(sampler, request);
    for (const sequence of full.sequences) {
      const rows = sequence.topk_logprobs ?? [];
      expect(rows).toHaveLength(sequence.tokens.length);
      rows.forEach((row, n) => {
        expect(row).toHaveLength(3);
        expect(row[0]?.[1]).toBeGreaterThanOrEqual(sequence.logprobs[n] as number);
      });
    }
    expect(full.target_prompt_logprobs).toEqual(full.prompt_logprobs?.slice(1).map((l) => [l, null]));
    const alt = full.prompt_alt_tokens;
    expect(alt?.tokens).toHaveLength(3);
    expect(alt?.tokens.every((row) => row.length === 2)).toBe(true);
    expect((await backend.sample(sampler, request)).prompt_alt_tokens).toEqual(alt);
    // The draws' logprobs are the model's: asked back as target ids, they answer the same values.
    const asked = await backend.sample(sampler, {
      ...request,
      target_prompt_logprobs: { shape: [3, 2], data: alt?.tokens.flat() ?? [] },
    });
    expect(asked.target_prompt_logprobs).toEqual(alt?.logprobs);
    const cut = await backend.sample(sampler, request, { maxNewTokens: 2 });
    const resumed = await backend.sample(sampler, request, { resume: cut.sequences });
    expect(resumed.sequences.map((s) => s.topk_logprobs)).toEqual(full.sequences.map((s) => s.topk_logprobs));
    const bad = await backend
      .sample(sampler, { ...request, prompt_alt_tokens_k: -1 })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(StepUserError);
    expect(String((bad as StepUserError).context.field)).toBe('prompt_alt_tokens_k');
  });

  it('answers a sliced call passed its continuations as it answers an uncut one; stale keys change nothing', async () => {
    const created = await backend.createModel({ base_model: base, lora_config: { rank: 2, seed: 9 } });
    const sampler = await backend.loadSampler(base, await backend.exportWeights(created, 'sampler'));
    const request: SampleRequest = {
      num_samples: 3,
      prompt: { chunks: [{ type: 'encoded_text', tokens: Int32Array.from([5, 6, 7, 8]) }] },
      sampling_params: { max_tokens: 10, temperature: 1, seed: 21 },
      prompt_logprobs: true,
      topk_prompt_logprobs: 2,
      topk_sample_logprobs: 3,
      prompt_alt_tokens_k: 2,
      target_prompt_logprobs: { shape: [3, 1], data: [6, -1, 8] },
    };
    const { continuation: none, ...full } = await backend.sample(sampler, request);
    expect(none).toBeUndefined();
    // The worker's slices: each resumes from the tokens so far and names the previous slice's key.
    let run = await backend.sample(sampler, request, { maxNewTokens: 3 });
    const first = run;
    let slices = 1;
    while (!run.finished) {
      run = await backend.sample(sampler, request, {
        resume: run.sequences,
        maxNewTokens: 3,
        ...(run.continuation === undefined ? {} : { continuation: run.continuation }),
      });
      slices += 1;
    }
    expect(slices).toBe(4);
    expect(run).toEqual(full);
    // A key the engine no longer holds, or one whose state does not match the resumed prefixes.
    expect(
      await backend.sample(sampler, request, { resume: first.sequences, continuation: 'no-such-key' }),
    ).toEqual(full);
    const again = await backend.sample(sampler, request, { maxNewTokens: 3 });
    const shorter = again.sequences.map((s) => ({
      tokens: s.tokens.slice(0, 1),
      logprobs: s.logprobs.slice(0, 1),
    }));
    expect(
      await backend.sample(sampler, request, {
        resume: shorter,
        ...(again.continuation === undefined ? {} : { continuation: again.continuation }),
      }),
    ).toEqual(full);
  });

  it('forgets released handles', async () => {
    const state = await backend.createModel({ base_model: base, lora_config: { rank: 2 } });
    await engine.call('release', () => ({ handles: [(state as unknown as { handle: string }).handle] }));
    await expect(backend.forward(state, pass([1, 2, 3]))).rejects.toThrow(EngineProtocolError);
  });
});
