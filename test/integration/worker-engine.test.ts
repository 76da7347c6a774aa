import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Backend } from '../../shared/backend/backend.js';
import { EngineBackend } from '../../shared/backend/engine/engine-backend.js';
import { EngineProcess } from '../../shared/backend/engine/engine-process.js';
import { TINY_MODEL_DIR } from '../../shared/backend/engine/installed-engines.js';
import { config } from '../../shared/base/config.js';
import type { ModelRow } from '../../shared/domain/records.js';
import { runWorkItem } from '../../shared/services/worker/index.js';
import { Residency } from '../../shared/services/worker/residency.js';
import { StateCache } from '../../shared/services/worker/state-cache.js';
import { expectClose } from '../support/close.js';
import { engineUnderTest } from '../support/engine/engine-under-test.js';
import { referenceEngineCommand } from '../support/reference-engine.js';
import { cycle } from '../support/resume-harness.js';
import { crossEntropy, textDatum, WorkerHarness } from '../support/worker-harness.js';

/**
 * The worker runtime on engine processes through the real local cloud (G1): training steps, saves and
 * samples on the torch engine answer what the same engine answers run one request at a time (R1,
 * within float32 tolerance, since passes of several models are fused), and an engine that crashes in
 * the middle of a request fails its work item as an infrastructure error: the model is re-planned
 * (E6), the engine restarts, and the answers are still exactly the sequential ones.
 */

const torch = engineUnderTest();

const engines: EngineBackend[] = [];
afterAll(async () => {
  await Promise.all(engines.map((backend) => backend.stop()));
});

/**
 * A torch engine backend, stopped after the file; it records the continuation each sample call was
 * handed. `versions` pins the protocol (version 1: sliced samples).
 */
function engine(keys: (string | undefined)[] = [], versions?: readonly number[]): EngineBackend {
  if (torch.command === undefined) throw new Error('no engine');
  const backend = new (class extends EngineBackend {
    override sample(...[sampler, request, options]: Parameters<EngineBackend['sample']>) {
      keys.push(options?.continuation);
      return super.sample(sampler, request, options);
    }
  })(
    new EngineProcess(torch.command, {
      requestTimeoutMs: 120_000,
      ...(versions === undefined ? {} : { protocolVersions: versions }),
    }),
  );
  engines.push(backend);
  return backend;
}

/** Dispatches and runs work items until the planner finds nothing. */
async function drain(h: WorkerHarness, backend: Backend) {
  const outcomes = [];
  for (let dispatched = await h.dispatch(); dispatched; dispatched = await h.dispatch()) {
    outcomes.push(await runWorkItem(dispatched.manifest, { backend, passWindowMs: 100 }));
  }
  return outcomes;
}

describe.skipIf(torch.command === undefined)('the worker runtime on the torch engine', () => {
  let h: WorkerHarness;

  beforeAll(async () => {
    h = await WorkerHarness.start({ baseModel: torch.baseModel ?? TINY_MODEL_DIR });
  });
  afterAll(() => {
    h?.cloud.clients.dynamo.destroy();
  });

  // Two engine processes start here (the worker's and the oracle's): seconds each on a busy machine.
  it('trains two tenants’ models, saves and samples, answering what the engine answers sequentially (R1)', {
    timeout: 300_000,
  }, async () => {
    const acme = h.tenant('acme');
    const beta = h.tenant('beta');
    const a = await acme.createModel(4, 11);
    const b = await beta.createModel(2, 5);
    await acme.pass(
      'forward_backward',
      a.model_id,
      crossEntropy(textDatum('hello world'), textDatum('lora')),
    );
    await beta.pass('forward_backward', b.model_id, crossEntropy(textDatum('another tenant')));
    await acme.optimStep(a.model_id, { learning_rate: 0.01 });
    await beta.optimStep(b.model_id, { learning_rate: 0.02 });
    await acme.pass('forward_backward', a.model_id, crossEntropy(textDatum('hello world')));
    await acme.optimStep(a.model_id, { learning_rate: 0.01 });
    await acme.pass('forward', a.model_id, crossEntropy(textDatum('hello world')));
    await acme.saveWeights(a.model_id, 'step-2');
    await acme.saveForSampler(a.model_id, 'sampler-2');
    await acme.loadWeights(a.model_id, `tinker://${a.model_id}/weights/step-2`, true);
    await acme.pass('forward', a.model_id, crossEntropy(textDatum('after the load')));
    const base = await beta.samplingSession({ base_model: h.baseModel });
    await beta.sample(base, {
      num_samples: 2,
      prompt: { chunks: [{ type: 'encoded_text', tokens: [72, 105] }] },
      sampling_params: { max_tokens: 6, temperature: 0.8, seed: 42 },
      prompt_logprobs: true,
    });

    const backend = engine();
    const outcomes = await drain(h, backend);
    expect(outcomes.flatMap((o) => o.models).every((m) => m.outcome === 'committed')).toBe(true);

    const named = await acme.samplingSession({
      model_path: `tinker://${a.model_id}/sampler_weights/sampler-2`,
    });
    await acme.sample(named, {
      num_samples: 1,
      prompt: { chunks: [{ type: 'encoded_text', tokens: [104, 101] }] },
      sampling_params: { max_tokens: 8, temperature: 1, top_k: 20, seed: 7 },
    });
    const samples = await drain(h, backend);
    expect(samples.flatMap((o) => o.samples).map((s) => s.outcome)).toEqual(['committed']);

    // The oracle runs every request in submit order on a fresh engine process.
    const expected = await h.oracle({ backend: engine() });
    const actual = await h.answers();
    expectClose(actual, expected, 1e-4);
    // Training moved the model: the second forward_backward's loss is below the first's.
    const losses = [...actual.values()]
      .map((answer) => (answer as { metrics?: Record<string, number> }).metrics?.['loss:sum'])
      .filter((loss): loss is number => loss !== undefined);
    expect(losses.length).toBeGreaterThan(3);
    // A model's next work item in this process took its committed state's resident handle (G3).
    expect(backend.reuse.resident).toBeGreaterThan(0);
  });
});

describe.skipIf(torch.command === undefined)('resident state on the torch engine (S1, S4)', () => {
  let h: WorkerHarness;

  beforeAll(async () => {
    h = await WorkerHarness.start({ baseModel: torch.baseModel ?? TINY_MODEL_DIR });
  });
  afterAll(() => {
    h?.cloud.clients.dynamo.destroy();
  });

  it('keeps the state in the engine between work items, and another engine rebuilds it by replay', {
    timeout: 300_000,
  }, async () => {
    const t = h.tenant('resident');
    const { model_id: modelId } = await t.createModel(4, 21);
    const holderBackend = engine();
    const { doc, s3 } = h.cloud.clients;
    const residency = new Residency(holderBackend, {
      doc,
      s3,
      modelsTable: config().table('models'),
      bucket: config().bucket,
    });
    const run = async (backend: Backend, held?: Residency) => {
      for (let dispatched = await h.dispatch(); dispatched; dispatched = await h.dispatch()) {
        await runWorkItem(dispatched.manifest, {
          backend,
          states: new StateCache(0),
          ...(held === undefined ? {} : { residency: held }),
        });
      }
    };
    await run(holderBackend, residency);
    for (const text of ['resident one', 'resident two']) {
      await t.pass('forward_backward', modelId, crossEntropy(textDatum(text)));
      await run(holderBackend, residency);
      await t.optimStep(modelId, { learning_rate: 0.02 });
      await run(holderBackend, residency);
    }
    const held = (await h.modelRow(modelId)) as ModelRow;
    expect(held.state_ref).toBeUndefined();
    expect(held.replay).toHaveLength(5);
    expect(residency.counters).toMatchObject({ hits: 4, misses: 1 });

    // Another engine process (another host) runs the next step: create_model and four steps replayed.
    await t.pass('forward', modelId, crossEntropy(textDatum('resident one')));
    await run(engine());
    // The holder's entry is stale now; letting go writes nothing (the row is no longer its).
    await residency.letGoAll();
    expect(residency.counters.lost).toBe(1);

    const expected = await h.oracle({ backend: engine() });
    expectClose(await h.answers(), expected, 1e-4);
  });
});

describe.skipIf(torch.command === undefined)('sliced samples on the torch engine', () => {
  let h: WorkerHarness;

  beforeAll(async () => {
    h = await WorkerHarness.start({ baseModel: torch.baseModel ?? TINY_MODEL_DIR });
  });
  afterAll(() => {
    h?.cloud.clients.dynamo.destroy();
  });

  it('continues each slice from the last one, and a sample cut and resumed on another engine answers the same (P6)', {
    timeout: 300_000,
  }, async () => {
    const t = h.tenant('slices');
    const session = await t.samplingSession({ base_model: h.baseModel });
    const body = (seed: number) => ({
      num_samples: 3,
      prompt: { chunks: [{ type: 'encoded_text' as const, tokens: [72, 105, 33] }] },
      sampling_params: { max_tokens: 10, temperature: 1, seed },
      prompt_logprobs: true,
      topk_prompt_logprobs: 2,
      topk_sample_logprobs: 3,
      prompt_alt_tokens_k: 2,
    });
    const whole = await t.sample(session, body(3));
    const cut = await t.sample(session, body(4));
    const worker = { sampleSliceTokens: 3 };

    // Uncut, in 4 slices of 3 tokens: each slice after the first names the last one's state.
    const keys: (string | undefined)[] = [];
    const first = engine(keys, [1]);
    await cycle(h, [whole], { worker: { ...worker, backend: first } });
    expect(keys).toHaveLength(4);
    expect(keys[0]).toBeUndefined();
    expect(keys.slice(1).every((key) => typeof key === 'string')).toBe(true);

    // Cut after 2 slices on this engine; resumed on another, whose first slice replays the prefixes.
    const cutCycle = await cycle(h, [cut], { cutAt: 2, worker: { ...worker, backend: first } });
    expect(cutCycle?.samples.map((s) => s.outcome)).toEqual(['cut']);
    const elsewhere: (string | undefined)[] = [];
    await cycle(h, [cut], { worker: { ...worker, backend: engine(elsewhere, [1]) } });
    expect(elsewhere[0]).toBeUndefined();
    expect(elsewhere.length).toBeGreaterThan(1);
    expect(elsewhere.slice(1).every((key) => typeof key === 'string')).toBe(true);

    // Bit for bit what one uncut call on a fresh engine of the same protocol answers (version 2 decodes
    // in fixed-width batched steps, whose low bits differ from version 1's per-call batches).
    const expected = await h.oracle({ backend: engine([], [1]) });
    const actual = await h.answers();
    expect(actual.get(whole)).toEqual(expected.get(whole));
    expect(actual.get(cut)).toEqual(expected.get(cut));
    expect((actual.get(cut) as { sequences: unknown[] }).sequences).toHaveLength(3);
  });
});

describe('the worker runtime when its engine crashes mid-request', () => {
  let h: WorkerHarness;
  let engine: EngineBackend;
  const faults = mkdtempSync(path.join(tmpdir(), 'worker-engine-faults-'));

  beforeAll(async () => {
    h = await WorkerHarness.start();
    engine = new EngineBackend(new EngineProcess(referenceEngineCommand({ faults })));
  });
  afterAll(async () => {
    await engine?.stop();
    h?.cloud.clients.dynamo.destroy();
  });

  it('re-plans the work item, restarts the engine, and answers exactly as the sequential oracle', async () => {
    const t = h.tenant('acme');
    const m = await t.createModel(3, 2);
    await t.pass('forward_backward', m.model_id, crossEntropy(textDatum('before the crash')));
    await t.optimStep(m.model_id, { learning_rate: 0.05 });
    const first = await drain(h, engine);
    expect(first.flatMap((o) => o.models).map((part) => part.outcome)).toEqual(['committed']);
    const before = (await h.modelRow(m.model_id)) as ModelRow;

    await t.pass('forward_backward', m.model_id, crossEntropy(textDatum('the engine dies here')));
    await t.optimStep(m.model_id, { learning_rate: 0.05 });
    await t.pass('forward', m.model_id, crossEntropy(textDatum('after')));
    // The worker sends passes through its batcher: run_passes is the request in flight.
    writeFileSync(path.join(faults, 'run_passes'), 'exit');
    const dispatched = await h.dispatch();
    if (dispatched === undefined) throw new Error('nothing to run');
    const crashed = await runWorkItem(dispatched.manifest, { backend: engine });
    const [part] = crashed.models;
    expect(part?.outcome).toBe('failed');
    expect(part?.outcome === 'failed' && part.error).toMatch(/engine exited \(code 3\) during run_passes/);
    expect(part?.outcome === 'failed' && part.released).toBe(true);
    // Re-planned: nothing of the failed run was committed, and the model is pending again.
    const row = (await h.modelRow(m.model_id)) as ModelRow;
    expect(row.applied_through).toBe(before.applied_through);
    expect(row.state_ref).toBe(before.state_ref);
    expect(row.inflight).toBeUndefined();

    const rest = await drain(h, engine);
    const parts = rest.flatMap((o) => o.models);
    expect(parts.length).toBeGreaterThan(0);
    expect(parts.every((p) => p.outcome === 'committed')).toBe(true);
    expect(await h.answers()).toEqual(await h.oracle());
  });
});
