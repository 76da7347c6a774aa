import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Backend, SampleRun } from '../../shared/backend/backend.js';
import { EngineBackend } from '../../shared/backend/engine/engine-backend.js';
import { EngineProcess } from '../../shared/backend/engine/engine-process.js';
import { TINY_MODEL_DIR } from '../../shared/backend/engine/installed-engines.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import type { WorkManifest } from '../../shared/domain/planning/work-item.js';
import { cancelFuture } from '../../shared/services/api/session-futures.js';
import { runWorkItem, type WorkerEvent } from '../../shared/services/worker/index.js';
import { engineUnderTest } from '../support/engine/engine-under-test.js';
import { onlyIds } from '../support/resume-harness.js';
import { createBackend as slowSampler } from '../support/resume-slow-sampler.js';
import { BASE_MODEL, type TenantClient, WorkerHarness } from '../support/worker-harness.js';

/**
 * cancel_future of a running sample (W9): the API marks its claim and answers `cancelled: true`; the
 * worker's cancel poll sees the mark, stops the sample at its next slice (a sliced backend) or decode
 * step (a backend that batches samples, through the call's stop signal), and commits it cancelled,
 * once. On the local cloud, the worker in-process; last, on the torch engine (protocol version 2),
 * whose decoder ends the call at its next step (`stop_sample`).
 */

let h: WorkerHarness;
let t: TenantClient;
let session: string;

beforeAll(async () => {
  h = await WorkerHarness.start();
  t = h.tenant('cancels');
  session = await t.samplingSession({ base_model: BASE_MODEL });
});

afterAll(() => h?.cloud.clients.dynamo.destroy());

const body = (maxTokens: number, seed: number) => ({
  num_samples: 1,
  prompt: { chunks: [{ type: 'encoded_text' as const, tokens: [99, 97, 110] }] },
  sampling_params: { max_tokens: maxTokens, temperature: 0.9, seed },
});

async function dispatched(id: string): Promise<WorkManifest> {
  const item = await h.dispatch({ only: onlyIds([id]) });
  expect(item).toBeDefined();
  return (item as { manifest: WorkManifest }).manifest;
}

/**
 * The reference backend as a batching one: each call runs until its `stop` signal fires, then answers
 * one token per sequence, unfinished (what an engine's step boundary answers).
 */
function stoppableSampler(): Backend & { readonly calls: number } {
  const inner = new ReferenceBackend();
  const backend = Object.create(inner) as Backend & { calls: number };
  backend.calls = 0;
  backend.batchesSamples = async () => true;
  backend.sample = async (sampler, request, options) => {
    backend.calls += 1;
    const stop = options?.stop;
    if (stop === undefined) throw new Error('a batching backend is given a stop signal');
    if (!stop.aborted)
      await new Promise((resolve) => stop.addEventListener('abort', resolve, { once: true }));
    return inner.sample(sampler, request, { ...options, maxNewTokens: 1 });
  };
  return backend;
}

async function cancelOnce(id: string): Promise<boolean> {
  return (await cancelFuture(t.ctx(), { request_id: id })).cancelled;
}

/** The future's answer is the cancel's user error. */
async function expectCancelled(id: string): Promise<void> {
  const answer = await h.answer(t.tenant, id);
  expect(answer).toMatchObject({ category: 'user' });
  expect(JSON.stringify(answer)).toContain('the sample was cancelled by the client');
}

describe('cancel_future of a running sample', () => {
  it('a sliced sample stops at its next slice and its future ends cancelled', async () => {
    const id = await t.sample(session, body(40, 3));
    const events: WorkerEvent[] = [];
    let answered: boolean | undefined;
    const outcome = await runWorkItem(await dispatched(id), {
      backend: slowSampler({ busyMs: 10 }),
      clients: h.cloud.clients,
      sampleSliceTokens: 1,
      cutPollMs: 0,
      cancelPollMs: 20,
      onEvent: async (event) => {
        events.push(event);
        if (event.kind === 'sample-slice' && answered === undefined) answered = await cancelOnce(id);
      },
    });
    expect(answered).toBe(true);
    expect(outcome.samples[0]).toMatchObject({ outcome: 'committed' });
    const slices = events.filter((event) => event.kind === 'sample-slice');
    expect(slices.length).toBeLessThan(40);
    await expectCancelled(id);
    // Ended: a second cancel changes nothing.
    expect(await cancelOnce(id)).toBe(false);
  });

  it('a whole call on a batching backend is stopped, and its future ends cancelled', async () => {
    const id = await t.sample(session, body(40, 4));
    const backend = stoppableSampler();
    const run = runWorkItem(await dispatched(id), {
      backend,
      clients: h.cloud.clients,
      cutPollMs: 0,
      cancelPollMs: 20,
    });
    // The call is running (its claim held) before the cancel.
    while (backend.calls === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(await cancelOnce(id)).toBe(true);
    const outcome = await run;
    expect(outcome.samples[0]).toMatchObject({ outcome: 'committed' });
    expect(backend.calls).toBe(1);
    await expectCancelled(id);
  });

  it('a sample whose run ends before it sees the cancel still ends cancelled', async () => {
    const id = await t.sample(session, body(3, 5));
    let answered: boolean | undefined;
    const outcome = await runWorkItem(await dispatched(id), {
      backend: new ReferenceBackend(),
      clients: h.cloud.clients,
      cutPollMs: 0,
      // No poll: only the commit's condition on the claim's mark can carry the cancel.
      cancelPollMs: 0,
      onEvent: async (event) => {
        if (event.kind === 'sample-done') answered = await cancelOnce(id);
      },
    });
    expect(answered).toBe(true);
    expect(outcome.samples[0]).toMatchObject({ outcome: 'committed' });
    await expectCancelled(id);
  });
});

const torch = engineUnderTest();

describe.skipIf(torch.command === undefined)('cancel_future of a running sample on the torch engine', () => {
  let engine: EngineBackend | undefined;
  afterAll(async () => {
    await engine?.stop();
  });

  it('the engine stops the call at its next step and the future ends cancelled', {
    timeout: 120_000,
  }, async () => {
    if (torch.command === undefined) throw new Error('no engine');
    const runs: SampleRun[] = [];
    let started = false;
    engine = new (class extends EngineBackend {
      override async sample(...[sampler, request, options]: Parameters<EngineBackend['sample']>) {
        started = true;
        const run = await super.sample(sampler, request, options);
        runs.push(run);
        return run;
      }
    })(new EngineProcess(torch.command, { requestTimeoutMs: 120_000, protocolVersions: [2] }));
    expect(await engine.batchesSamples?.()).toBe(true);
    const h2 = await WorkerHarness.start({ baseModel: torch.baseModel ?? TINY_MODEL_DIR });
    try {
      const t2 = h2.tenant('engine-cancels');
      const sessionOnEngine = await t2.samplingSession({ base_model: h2.baseModel });
      // Long enough to be running when the cancel lands (the tiny model's context is 2,048 tokens).
      const id = await t2.sample(sessionOnEngine, body(2_000, 6));
      const item = await h2.dispatch({ only: onlyIds([id]) });
      const run = runWorkItem((item as { manifest: WorkManifest }).manifest, {
        backend: engine,
        clients: h2.cloud.clients,
        cutPollMs: 0,
        cancelPollMs: 20,
      });
      while (!started) await new Promise((resolve) => setTimeout(resolve, 10));
      expect((await cancelFuture(t2.ctx(), { request_id: id })).cancelled).toBe(true);
      expect((await run).samples[0]).toMatchObject({ outcome: 'committed' });
      // The engine answered early, unfinished, with its tokens so far.
      expect(runs).toHaveLength(1);
      expect(runs[0]?.finished).toBe(false);
      expect(runs[0]?.sequences[0]?.tokens.length ?? 2_000).toBeLessThan(2_000);
      const answer = await h2.answer(t2.tenant, id);
      expect(JSON.stringify(answer)).toContain('the sample was cancelled by the client');
    } finally {
      h2.cloud.clients.dynamo.destroy();
    }
  });
});
