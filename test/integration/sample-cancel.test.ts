import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Backend } from '../../shared/backend/backend.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import type { WorkManifest } from '../../shared/domain/planning/work-item.js';
import { cancelFuture } from '../../shared/services/api/session-futures.js';
import { runWorkItem, type WorkerEvent } from '../../shared/services/worker/index.js';
import { onlyIds } from '../support/resume-harness.js';
import { createBackend as slowSampler } from '../support/resume-slow-sampler.js';
import { BASE_MODEL, type TenantClient, WorkerHarness } from '../support/worker-harness.js';

/**
 * cancel_future of a running sample (W9): the API marks its claim and answers `cancelled: true`; the
 * worker's cancel poll sees the mark, stops the sample at its next slice (a sliced backend) or decode
 * step (a backend that batches samples, through the call's stop signal), and commits it cancelled,
 * once. On the local cloud, the worker in-process.
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
