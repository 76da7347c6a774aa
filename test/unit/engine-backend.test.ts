import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type {
  ForwardBackwardInput,
  SampleOptions,
  SampleRequest,
  SampleRun,
  SamplerModel,
} from '../../shared/backend/backend.js';
import { EngineBackend } from '../../shared/backend/engine/engine-backend.js';
import { EngineProcess, EngineVersionError } from '../../shared/backend/engine/engine-process.js';
import {
  encodeFrame,
  type Frame,
  FrameBuilder,
  FrameReader,
  resolveBuffers,
} from '../../shared/backend/engine/frame.js';
import { serveEngine } from '../../shared/backend/engine/serve.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { float32Tensor, int64Tensor } from '../../shared/backend/tensor.js';
import { InfrastructureError, StepUserError } from '../../shared/base/errors.js';
import { referenceEngineCommand } from '../support/reference-engine.js';

/**
 * The engine process and the `Backend` over it (shared/backend/engine/), driven against the reference
 * backend served as an engine (test/support/reference-engine.ts): same answers as the backend in
 * process, handles consumed and reused as docs/engine-protocol.md says, and every fault of the process
 * an `InfrastructureError` of the call, after which the engine restarts.
 */

const BASE = 'reference/byte-lm';
const engines: EngineProcess[] = [];
afterAll(async () => {
  await Promise.all(engines.map((engine) => engine.stop()));
});

function start(
  options: Parameters<typeof referenceEngineCommand>[0] = {},
  timeoutMs?: number,
  livenessProbeMs?: number,
) {
  const engine = new EngineProcess(referenceEngineCommand(options), {
    ...(timeoutMs === undefined ? {} : { requestTimeoutMs: timeoutMs }),
    ...(livenessProbeMs === undefined ? {} : { livenessProbeMs }),
  });
  engines.push(engine);
  return { engine, backend: new EngineBackend(engine) };
}

function pass(text: string, weights?: number[]): ForwardBackwardInput {
  const bytes = [...Buffer.from(text)];
  return {
    loss_fn: 'cross_entropy',
    loss_fn_config: {},
    data: [
      {
        model_input: { chunks: [{ type: 'encoded_text', tokens: Int32Array.from(bytes.slice(0, -1)) }] },
        loss_fn_inputs: {
          target_tokens: int64Tensor(bytes.slice(1)),
          ...(weights === undefined ? {} : { weights: float32Tensor(weights) }),
        },
      },
    ],
  };
}

function faults(): string {
  return mkdtempSync(path.join(tmpdir(), 'engine-faults-'));
}

describe('EngineBackend over the reference engine', () => {
  it('answers what the backend answers in process, through training, weights, states and sampling', async () => {
    const { engine, backend } = start();
    const hello = await engine.start();
    expect(hello).toMatchObject({ protocol_version: 1, engine: { name: 'reference' } });
    expect(hello.base_models.map((model) => model.name)).toEqual([BASE]);
    await engine.ping();

    const local = new ReferenceBackend();
    const create = { base_model: BASE, lora_config: { rank: 4, seed: 3 } };
    let remote = await backend.createModel(create);
    let inProcess = await local.createModel(create);
    for (const text of ['hello engine', 'binary tensors']) {
      const a = await backend.forwardBackward(remote, pass(text));
      const b = await local.forwardBackward(inProcess, pass(text));
      expect(a.result).toEqual(b.result);
      remote = a.state;
      inProcess = b.state;
    }
    const stepA = await backend.optimStep(remote, { learning_rate: 0.05 });
    const stepB = await local.optimStep(inProcess, { learning_rate: 0.05 });
    expect(stepA.result).toEqual(stepB.result);
    expect(stepA.state.weights_version).toBe(1);
    remote = stepA.state;
    inProcess = stepB.state;
    expect(await backend.forward(remote, pass('after a step'))).toEqual(
      await local.forward(inProcess, pass('after a step')),
    );
    const weights = await backend.exportWeights(remote, 'training');
    expect(new Uint8Array(weights)).toEqual(new Uint8Array(await local.exportWeights(inProcess, 'training')));
    const sampler = await backend.loadSampler(BASE, await backend.exportWeights(remote, 'sampler'));
    const request = {
      num_samples: 2,
      prompt: { chunks: [{ type: 'encoded_text' as const, tokens: Int32Array.from([72, 105]) }] },
      sampling_params: { max_tokens: 6, temperature: 0.9, seed: 5 },
      prompt_logprobs: true,
    };
    const run = await backend.sample(sampler, request);
    const expected = await local.sample(
      await local.loadSampler(BASE, await local.exportWeights(inProcess, 'sampler')),
      request,
    );
    expect(run.sequences.map((s) => s.tokens)).toEqual(expected.sequences.map((s) => s.tokens));
    expect(run.prompt_logprobs).toEqual(expected.prompt_logprobs);
    // Sampled logprobs cross as float32 (docs/engine-protocol.md).
    expect(run.sequences[0]?.logprobs).toEqual(expected.sequences[0]?.logprobs.map(Math.fround));
    // A cut call resumes from its prefix exactly (P6).
    const cut = await backend.sample(sampler, request, { maxNewTokens: 2 });
    expect(cut.finished).toBe(false);
    const resumed = await backend.sample(sampler, request, { resume: cut.sequences });
    expect(resumed.sequences.map((s) => s.tokens)).toEqual(run.sequences.map((s) => s.tokens));
    // The SDK 0.26+ outputs cross too: the target ids as a tensor, the answers as the backend gave them.
    const newer = {
      ...request,
      topk_sample_logprobs: 3,
      prompt_alt_tokens_k: 2,
      target_prompt_logprobs: { shape: [1, 2] as [number, number], data: [105, -1] },
    };
    const newerRun = await backend.sample(sampler, newer);
    const newerExpected = await local.sample(
      await local.loadSampler(BASE, await local.exportWeights(inProcess, 'sampler')),
      newer,
    );
    expect(newerExpected.target_prompt_logprobs).toBeDefined();
    expect(newerRun.target_prompt_logprobs).toEqual(newerExpected.target_prompt_logprobs);
    expect(newerRun.prompt_alt_tokens).toEqual(newerExpected.prompt_alt_tokens);
    expect(newerRun.sequences.map((s) => s.topk_logprobs)).toEqual(
      newerExpected.sequences.map((s) => s.topk_logprobs),
    );

    // Two models in one fused call; the forward leaves its state's handle valid.
    const other = await backend.createModel({ base_model: BASE, lora_config: { rank: 2, seed: 1 } });
    const passes = await backend.runPasses([
      { type: 'forward_backward', state: remote, input: pass('fused one') },
      { type: 'forward', state: other, input: pass('fused two') },
    ]);
    const fused = await local.forwardBackward(inProcess, pass('fused one'));
    expect(passes[0]?.ok && passes[0].result).toEqual(fused.result);
    expect(passes[1]?.ok).toBe(true);
    expect(await backend.forward(other, pass('still valid'))).toBeDefined();
    await expect(backend.forward(remote, pass('consumed'))).rejects.toThrow(/unknown state handle/);
  });

  it('fails a bad input as a StepUserError naming the field and leaves the state valid', async () => {
    const { backend } = start();
    const state = await backend.createModel({ base_model: BASE, lora_config: { rank: 2 } });
    const bad = pass('ab');
    const datum = bad.data[0];
    if (datum === undefined) throw new Error('no datum');
    const wrong = { ...bad, data: [{ ...datum, loss_fn_inputs: { target_tokens: int64Tensor([9000]) } }] };
    const error = await backend.forwardBackward(state, wrong).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StepUserError);
    expect((error as StepUserError).context.field).toMatch(/target_tokens/);
    const [outcome] = await backend.runPasses([{ type: 'forward_backward', state, input: wrong }]);
    expect(outcome?.ok === false && outcome.error).toBeInstanceOf(StepUserError);
    await expect(backend.forwardBackward(state, pass('ab'))).resolves.toBeDefined();
  });

  it('reuses a resident state only for the exact bytes it serialized, and releases handles past its bound', async () => {
    const { engine } = start();
    const backend = new EngineBackend(engine, { maxLiveStates: 3 });
    const created = await backend.createModel({ base_model: BASE, lora_config: { rank: 2, seed: 9 } });
    const { state } = await backend.forwardBackward(created, pass('resident'));
    const bytes = await backend.serializeState(state);
    const again = await backend.deserializeState(bytes.slice());
    expect(again).toBe(state);
    expect(backend.reuse).toEqual({ resident: 1, loaded: 0 });
    // Taken once: the same bytes again (a duplicate delivery) load a copy of their own.
    const copy = await backend.deserializeState(bytes);
    expect(copy).not.toBe(state);
    // Other bytes of the same model are never answered with the resident handle.
    const { state: later } = await backend.forwardBackward(again, pass('later'));
    await backend.serializeState(later);
    const older = await backend.deserializeState(bytes);
    expect(older).not.toBe(later);
    expect(backend.reuse).toEqual({ resident: 1, loaded: 2 });
    expect(await backend.forward(older, pass('xy'))).toEqual(await backend.forward(copy, pass('xy')));
    for (let i = 0; i < 4; i++) await backend.createModel({ base_model: BASE, lora_config: { rank: 1 } });
    expect(backend.liveStates).toBe(3);
    // The oldest handles were released in the engine.
    await expect(backend.forward(copy, pass('xy'))).rejects.toThrow(/unknown state handle/);
  });

  it('offers no file blobs for an engine whose hello lists no blob_files: the worker hands bytes', async () => {
    const { engine, backend } = start();
    expect(await backend.fileBlobs()).toBeUndefined();
    expect(engine.lastHello?.features).toBeUndefined();
  });

  it('fails the request in flight with an InfrastructureError when the engine crashes, then restarts', async () => {
    const folder = faults();
    const { engine, backend } = start({ faults: folder });
    const state = await backend.createModel({ base_model: BASE, lora_config: { rank: 2 } });
    writeFileSync(path.join(folder, 'forward_backward'), 'exit');
    const error = await backend.forwardBackward(state, pass('crash')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InfrastructureError);
    expect((error as Error).message).toMatch(/engine exited \(code 3\) during forward_backward/);
    expect((error as Error).message).toMatch(/injected exit before forward_backward/);
    // The old run's handles are refused before they reach the new engine, which may reuse the names.
    const fresh = await backend.createModel({ base_model: BASE, lora_config: { rank: 2 } });
    expect(engine.restarts).toBe(1);
    await expect(backend.forward(state, pass('stale'))).rejects.toThrow(/engine restarted/);
    await expect(backend.forwardBackward(fresh, pass('fine'))).resolves.toBeDefined();
  });

  it('kills an engine that does not answer within the request timeout and restarts it', async () => {
    const folder = faults();
    const { engine, backend } = start({ faults: folder }, 3_000);
    const state = await backend.createModel({ base_model: BASE, lora_config: { rank: 2 } });
    const pid = engine.pid;
    writeFileSync(path.join(folder, 'forward'), 'hang');
    await expect(backend.forward(state, pass('hang'))).rejects.toThrow(
      /did not answer forward within 3000 ms/,
    );
    await engine.ping();
    expect(engine.pid).not.toBe(pid);
    expect(engine.restarts).toBe(1);
  });

  describe('a version 2 sample, which has no timeout of its own', () => {
    const request = {
      num_samples: 1,
      prompt: { chunks: [{ type: 'encoded_text' as const, tokens: Int32Array.from([72, 105]) }] },
      sampling_params: { max_tokens: 4, temperature: 0.9, seed: 5 },
    };

    it('fails, and the engine restarts, when the engine stops answering anything', async () => {
      const folder = faults();
      const { engine, backend } = start({ faults: folder, protocolVersions: [2, 1] }, 1_500, 100);
      const sampler = await backend.loadSampler(BASE, null);
      expect(engine.protocolVersion).toBe(2);
      const pid = engine.pid;
      writeFileSync(path.join(folder, 'sample'), 'hang');
      const error = await backend.sample(sampler, request).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InfrastructureError);
      // The liveness ping, sent after 100 ms of silence, went unanswered for the request timeout.
      expect((error as Error).message).toMatch(/did not answer ping within 1500 ms/);
      await engine.ping();
      expect(engine.pid).not.toBe(pid);
      expect(engine.restarts).toBe(1);
    });

    it('runs on while the engine is busy but answers the liveness ping within the request timeout', async () => {
      const folder = faults();
      const { engine, backend } = start({ faults: folder, protocolVersions: [2, 1] }, 1_500, 100);
      const sampler = await backend.loadSampler(BASE, null);
      writeFileSync(path.join(folder, 'sample'), 'delay 600');
      const run = await backend.sample(sampler, request);
      expect(run.sequences[0]?.tokens).toHaveLength(4);
      expect(engine.restarts).toBe(0);
    });
  });

  it('refuses an engine that speaks neither protocol version 2 nor 1, naming the versions it speaks', async () => {
    const { engine } = start({ protocolVersions: [3] });
    const error = await engine.start().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EngineVersionError);
    expect((error as Error).message).toMatch(/refused protocol version 1: .*speaks 3/);
  });

  it('falls back to protocol version 1 when the engine refuses 2, and drives it one request at a time', async () => {
    const { engine, backend } = start({});
    expect((await engine.start()).protocol_version).toBe(1);
    expect(await backend.batchesSamples()).toBe(false);
  });

  it('fails with an InfrastructureError naming the command when the engine cannot start', async () => {
    const engine = new EngineProcess({ command: '/nonexistent/engine', args: [] });
    await expect(engine.start()).rejects.toThrow(/\/nonexistent\/engine could not start/);
  });
});

describe('serveEngine', () => {
  it('hands its backend the continuation a sample names, and answers the one the backend returns', async () => {
    const handed: (string | undefined)[] = [];
    class KeepingBackend extends ReferenceBackend {
      override async sample(
        sampler: SamplerModel,
        request: SampleRequest,
        options?: SampleOptions,
      ): Promise<SampleRun> {
        handed.push(options?.continuation);
        return { ...(await super.sample(sampler, request, options)), continuation: `kept-${handed.length}` };
      }
    }
    const reader = new FrameReader();
    const written: Frame[] = [];
    let wake: (() => void) | undefined;
    const answer = async (): Promise<Record<string, unknown>> => {
      while (written.length === 0) await new Promise<void>((resolve) => (wake = resolve));
      const frame = written.shift() as Frame;
      expect(frame.header.ok).toBe(true);
      return resolveBuffers(frame.header.result, frame.buffers) as Record<string, unknown>;
    };
    const sample = (id: number, sampler: unknown, continuation?: string) => {
      const frame = new FrameBuilder();
      const tokens = frame.tokens(Int32Array.from([104, 105]));
      const args = {
        sampler,
        request: {
          num_samples: 1,
          prompt: { chunks: [{ type: 'encoded_text', tokens }] },
          sampling_params: { max_tokens: 6, seed: 3 },
        },
        resume: [],
        max_new_tokens: 2,
        ...(continuation === undefined ? {} : { continuation }),
      };
      return encodeFrame({ id, op: 'sample', args }, frame.buffers);
    };
    const results: Record<string, unknown>[] = [];
    async function* requests(): AsyncGenerator<Uint8Array> {
      yield* encodeFrame({ id: 1, op: 'hello', args: { protocol_version: 1, worker: 'test' } });
      await answer();
      yield* encodeFrame({ id: 2, op: 'load_sampler', args: { base_model: BASE, weights: null } });
      const { sampler } = await answer();
      yield* sample(3, sampler);
      results.push(await answer());
      yield* sample(4, sampler, 'kept-1');
      results.push(await answer());
      yield* encodeFrame({ id: 5, op: 'shutdown', args: {} });
    }
    await serveEngine(
      new KeepingBackend(),
      requests(),
      (chunk) => {
        written.push(...reader.push(chunk.slice()));
        wake?.();
      },
      {
        engine: { name: 'keeping', version: '1' },
        baseModels: [{ name: BASE, tokenizer_id: BASE, vocab_size: 256 }],
      },
    );
    expect(handed).toEqual([undefined, 'kept-1']);
    expect(results.map((result) => result.continuation)).toEqual(['kept-1', 'kept-2']);
    expect(results.every((result) => result.finished === false)).toBe(true);
  });
});
