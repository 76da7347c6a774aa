import { fileURLToPath } from 'node:url';
import { GetQueueAttributesCommand, ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runWorkerProcess } from '../../bin/worker.js';
import type { Backend } from '../../shared/backend/backend.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { manifestOf, type WorkManifest } from '../../shared/domain/planning/work-item.js';
import type { LiveRow } from '../../shared/domain/records.js';
import { runWorkItem } from '../../shared/services/worker/index.js';
import { runScript, type ScriptProcess } from '../support/processes.js';
import { cycle, expectBackToPending, onlyIds, startsOf, uninterrupted } from '../support/resume-harness.js';
import { waitFor } from '../support/wait.js';
import {
  BASE_MODEL,
  crossEntropy,
  type TenantClient,
  textDatum,
  WorkerHarness,
} from '../support/worker-harness.js';

/**
 * `npm run worker` runs up to `--max-work-items` work items at once (bin/worker.ts): the sample calls
 * of separate work items are in the backend together (so an engine of protocol version 2 decodes
 * them in shared steps, B1), a duplicate delivery of a model's work item waits for the original
 * (shared/services/worker/admission.ts), and SIGTERM cuts every running work item's samples.
 */

let h: WorkerHarness;
let t: TenantClient;
let session: string;

beforeAll(async () => {
  h = await WorkerHarness.start();
  t = h.tenant('overlap');
  session = await t.samplingSession({ base_model: BASE_MODEL });
});

afterAll(() => h?.cloud.clients.dynamo.destroy());

const queueUrl = () => h.cloud.env.WORK_QUEUE_URL as string;

const send = (manifest: WorkManifest) =>
  h.cloud.clients.sqs.send(
    new SendMessageCommand({ QueueUrl: queueUrl(), MessageBody: JSON.stringify(manifest) }),
  );

const body = (maxTokens: number, seed: number) => ({
  num_samples: 1,
  prompt: { chunks: [{ type: 'encoded_text' as const, tokens: [111, 118, 101, 114] }] },
  sampling_params: { max_tokens: maxTokens, temperature: 0.9, seed },
});

/** Each request dispatched as a work item of its own, named as the scheduler names it (`manifestOf`). */
async function sampleWorkItems(
  requests: readonly ReturnType<typeof body>[],
): Promise<{ id: string; request: ReturnType<typeof body>; manifest: WorkManifest }[]> {
  const items = [];
  for (const request of requests) {
    const id = await t.sample(session, request);
    const dispatched = await h.dispatch({ only: onlyIds([id]) });
    if (dispatched === undefined) throw new Error(`${id} was not dispatched`);
    items.push({ id, request, manifest: manifestOf(dispatched.item) });
  }
  return items;
}

/** The reference backend with slow sample calls and optimizer steps, counting how many run at once. */
function recording(delayMs: number) {
  const inner = new ReferenceBackend();
  const backend = Object.create(inner) as Backend;
  const seen = { samples: 0, maxSamples: 0, optims: 0, maxOptims: 0 };
  const sleep = () => new Promise((resolve) => setTimeout(resolve, delayMs));
  backend.sample = async (sampler, request, options) => {
    seen.samples += 1;
    seen.maxSamples = Math.max(seen.maxSamples, seen.samples);
    try {
      await sleep();
      return await inner.sample(sampler, request, options);
    } finally {
      seen.samples -= 1;
    }
  };
  backend.optimStep = async (state, params) => {
    seen.optims += 1;
    seen.maxOptims = Math.max(seen.maxOptims, seen.optims);
    try {
      await sleep();
      return await inner.optimStep(state, params);
    } finally {
      seen.optims -= 1;
    }
  };
  return { backend, seen };
}

/**
 * Runs the worker process loop until it printed `items` lines; `health` counts its health checks, and
 * those made while `busy()` said a backend call ran.
 */
async function runUntil(
  backend: Backend,
  items: number,
  maxWorkItems?: number,
  busy: () => boolean = () => false,
): Promise<{ lines: string[]; handled: number; health: { checks: number; whileBusy: number } }> {
  const stop = new AbortController();
  const lines: string[] = [];
  const health = { checks: 0, whileBusy: 0 };
  const running = runWorkerProcess({
    healthCheck: async () => {
      health.checks += 1;
      if (busy()) health.whileBusy += 1;
    },
    queueUrl: queueUrl(),
    backend,
    sqs: h.cloud.clients.sqs,
    stop: stop.signal,
    waitTimeSeconds: 1,
    print: (line) => lines.push(line),
    ...(maxWorkItems === undefined ? {} : { maxWorkItems }),
    // One token per call: a sample's calls span its whole generation.
    worker: { clients: h.cloud.clients, sampleSliceTokens: 1, cutPollMs: 0 },
  });
  await waitFor(`${items} work item lines`, () => lines.length >= items, 30_000);
  stop.abort();
  return { lines, handled: await running, health };
}

describe('the worker process runs work items side by side', () => {
  const overlap = async (maxWorkItems?: number) => {
    // Longer than a 1 s poll: turns come while the samples run.
    const items = await sampleWorkItems([body(24, 3), body(24, 4)]);
    for (const { manifest } of items) await send(manifest);
    const { backend, seen } = recording(60);
    const { lines, handled, health } = await runUntil(backend, 2, maxWorkItems, () => seen.samples > 0);
    expect(handled).toBe(2);
    // The engine is pinged before a receive only while nothing runs: a ping waits behind the running
    // work items' requests, and past its timeout would restart the engine under them.
    expect(health.checks).toBeGreaterThan(0);
    expect(health.whileBusy).toBe(0);
    for (const { id, request, manifest } of items) {
      expect(lines.join('\n')).toContain(
        `work item ${manifest.work_item_id}: models none; samples 1 committed`,
      );
      expect(await h.answer(t.tenant, id)).toEqual(await uninterrupted(request));
    }
    return seen.maxSamples;
  };

  it('with --max-work-items 1, one work item at a time: one sample call in the backend at once', async () => {
    expect(await overlap(1)).toBe(1);
  });

  it('by default, the sample calls of two work items are in the backend at once', async () => {
    expect(await overlap()).toBeGreaterThanOrEqual(2);
  });

  it("runs a duplicate delivery of a model's work item after the original, which finds it committed", async () => {
    const m = await t.createModel(4, 1);
    const ids = [
      m.request_id,
      await t.pass('forward_backward', m.model_id, crossEntropy(textDatum('overlap'))),
      await t.optimStep(m.model_id),
    ];
    const dispatched = await h.dispatch({ only: (row: LiveRow) => row.model_id === m.model_id });
    if (dispatched === undefined) throw new Error('nothing dispatched');
    const manifest = manifestOf(dispatched.item);
    await send(manifest);
    await send(manifest);
    const { backend, seen } = recording(300);
    const { lines } = await runUntil(backend, 2);
    // Never two optimizer steps of the model at once: the second delivery ran after the commit.
    expect(seen.maxOptims).toBe(1);
    expect(lines.map((line) => / models 1 (\w+);/.exec(line)?.[1])).toEqual(['committed', 'not_inflight']);
    const [expected, actual] = [await h.oracle(), await h.answers()];
    for (const id of ids) expect(actual.get(id), id).toEqual(expected.get(id));
  });
});

describe('SIGTERM while two work items run', () => {
  const children: ScriptProcess[] = [];
  afterEach(() => {
    for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
  });

  function spawnWorker(args: string[], env: Record<string, string> = {}) {
    const running = runScript('bin/worker.ts', { ...process.env, ...h.cloud.env, ...env }, args);
    children.push(running.child);
    return { child: running.child, out: running.output, exited: running.exited };
  }

  it('cuts the samples of both, deletes both messages, and each resumes exactly once', async () => {
    const items = await sampleWorkItems([body(60, 41), body(60, 43)]);
    const ids = items.map((item) => item.id);
    for (const { manifest } of items) await send(manifest);
    const { child, out, exited } = spawnWorker(
      ['--backend', 'test/support/resume-slow-sampler.ts', '--wait-seconds', '1'],
      { SLOW_SAMPLE_MS: '150' },
    );
    const slices = (seed: number) => out().split(`slow sample slice seed=${seed}\n`).length - 1;
    await waitFor('both work items sampling', () => slices(41) >= 3 && slices(43) >= 3, 40_000).catch(
      (error: unknown) => {
        throw new Error(`${String(error)}\n${out()}`);
      },
    );
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(out()).toContain('up to 4 work items at once');
    for (const { manifest } of items) {
      expect(out()).toContain(`work item ${manifest.work_item_id}: models none; samples 1 cut`);
    }
    expect(out()).toContain('worker stopped after 2 work items');
    for (const id of ids) {
      const ref = await expectBackToPending(h, t.tenant, id);
      expect(ref?.sequences[0]?.length).toBeGreaterThanOrEqual(3);
    }
    // Both messages were deleted: the cut samples come back through the scheduler, not redeliveries.
    const left = await h.cloud.clients.sqs.send(
      new ReceiveMessageCommand({ QueueUrl: queueUrl(), WaitTimeSeconds: 0, VisibilityTimeout: 0 }),
    );
    expect(left.Messages ?? []).toEqual([]);
    // Another worker resumes both in one work item from their saved prefixes, with the uninterrupted answers.
    const done = await cycle(h, ids, { worker: { sampleSliceTokens: 4 } });
    expect(done?.samples.map((sample) => sample.outcome)).toEqual(['committed', 'committed']);
    for (const { id, request } of items) {
      expect(startsOf(done?.events ?? [], id)?.every((start) => start.from === 'restored')).toBe(true);
      expect(await h.answer(t.tenant, id)).toEqual(await uninterrupted(request));
    }
    // Nothing is left to run: each was answered once.
    expect(await h.dispatch({ only: onlyIds(ids) })).toBeUndefined();
  });

  it('abandons every running work item at the grace deadline and gives back the one waiting for its turn', async () => {
    const items = [];
    for (const tenant of ['abandon-a', 'abandon-b']) {
      const m = await h.tenant(tenant).createModel(4, 1);
      const ids = [m.request_id, await h.tenant(tenant).optimStep(m.model_id)];
      const dispatched = await h.dispatch({ only: (row: LiveRow) => row.model_id === m.model_id });
      if (dispatched === undefined) throw new Error('nothing dispatched');
      items.push({ model_id: m.model_id, ids, manifest: manifestOf(dispatched.item) });
    }
    const [a, b] = items as [(typeof items)[0], (typeof items)[0]];
    // The second delivery of a's work item waits for a's model (it never runs here).
    for (const manifest of [a.manifest, b.manifest, a.manifest]) await send(manifest);
    const backendModule = fileURLToPath(new URL('../support/worker-slow-backend.ts', import.meta.url));
    const { child, out, exited } = spawnWorker(
      ['--backend', backendModule, '--grace-seconds', '1', '--wait-seconds', '1'],
      { SLOW_OPTIM_MS: '3000' },
    );
    await waitFor(
      'both slow steps to start',
      () => out().split('slow optim_step started').length > 2,
      30_000,
    );
    await waitFor('all three messages taken', async () => {
      const answer = await h.cloud.clients.sqs.send(
        new GetQueueAttributesCommand({
          QueueUrl: queueUrl(),
          AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
        }),
      );
      const attributes = answer.Attributes ?? {};
      return (
        attributes.ApproximateNumberOfMessages === '0' &&
        attributes.ApproximateNumberOfMessagesNotVisible === '3'
      );
    });
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(out().match(/left for redelivery/g)).toHaveLength(2);
    expect(out()).toContain('worker stopped after 2 work items');
    for (const { model_id, ids } of items) {
      const row = await h.modelRow(model_id);
      expect(row?.inflight).toBe(`${model_id}@${row?.epoch}`);
      for (const id of ids) expect((await h.future(id))?.status).toBe('pending');
    }
    // All three messages are visible again at once; the next worker continues both work items.
    const bodies: string[] = [];
    await waitFor('the three messages to come back', async () => {
      const answer = await h.cloud.clients.sqs.send(
        new ReceiveMessageCommand({ QueueUrl: queueUrl(), MaxNumberOfMessages: 10, WaitTimeSeconds: 0 }),
      );
      for (const message of answer.Messages ?? []) bodies.push(message.Body ?? '');
      return bodies.length >= 3;
    });
    expect(bodies.map((text) => (JSON.parse(text) as WorkManifest).work_item_id).sort()).toEqual(
      [a.manifest.work_item_id, a.manifest.work_item_id, b.manifest.work_item_id].sort(),
    );
    for (const { manifest } of items) {
      const outcome = await runWorkItem(manifest, { backend: new ReferenceBackend() });
      expect(outcome.models.map((model) => model.outcome)).toEqual(['committed']);
    }
    const [expected, actual] = [await h.oracle(), await h.answers()];
    for (const id of items.flatMap((item) => item.ids)) expect(actual.get(id), id).toEqual(expected.get(id));
  });

  it('refuses a --max-work-items that is not a positive integer', async () => {
    const { out, exited } = spawnWorker(['--max-work-items', '0']);
    expect(await exited).toBe(1);
    expect(out()).toContain('--max-work-items must be a positive integer');
  });
});
