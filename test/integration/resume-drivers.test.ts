import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import type { Context, SQSEvent } from 'aws-lambda';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createWorkerHandler } from '../../functions/worker/handler.js';
import { config } from '../../shared/base/config.js';
import type { WorkManifest } from '../../shared/domain/planning/work-item.js';
import { requestCut } from '../../shared/services/ops/control-store.js';
import { runWorkItem, type WorkerEvent } from '../../shared/services/worker/index.js';
import { cycle, expectBackToPending, onlyIds, startsOf, uninterrupted } from '../support/resume-harness.js';
import { createBackend as slowSampler } from '../support/resume-slow-sampler.js';
import { waitFor } from '../support/wait.js';
import { BASE_MODEL, type TenantClient, WorkerHarness } from '../support/worker-harness.js';

/**
 * The three cut triggers, each ending in a resumed, exact answer: the Lambda's remaining time under
 * its margin (the handler called with a context whose remaining time drops), SIGTERM in the worker
 * process (`npm run worker`), and the operator's `cut#<pool>` record polled by the runtime.
 */

let h: WorkerHarness;
let t: TenantClient;
let session: string;

beforeAll(async () => {
  h = await WorkerHarness.start();
  t = h.tenant('drivers');
  session = await t.samplingSession({ base_model: BASE_MODEL });
});

afterAll(() => h?.cloud.clients.dynamo.destroy());

const body = (numSamples: number, maxTokens: number, seed: number) => ({
  num_samples: numSamples,
  prompt: { chunks: [{ type: 'encoded_text' as const, tokens: [99, 117, 116] }] },
  sampling_params: { max_tokens: maxTokens, temperature: 0.9, seed },
});

function sqsEvent(body: string): SQSEvent {
  return {
    Records: [
      {
        messageId: 'm-0',
        receiptHandle: 'r-0',
        body,
        attributes: {
          ApproximateReceiveCount: '1',
          SentTimestamp: '0',
          SenderId: 'test',
          ApproximateFirstReceiveTimestamp: '0',
        },
        messageAttributes: {},
        md5OfBody: '',
        eventSource: 'aws:sqs',
        eventSourceARN: 'arn:aws:sqs:us-east-1:000000000000:work',
        awsRegion: 'us-east-1',
      },
    ],
  };
}

async function dispatched(id: string): Promise<WorkManifest> {
  const item = await h.dispatch({ only: onlyIds([id]) });
  expect(item).toBeDefined();
  return (item as { manifest: WorkManifest }).manifest;
}

/** Resumes the cut sample in-process and checks it restored and answers the uninterrupted result. */
async function expectExactResume(id: string, request: ReturnType<typeof body>): Promise<void> {
  const done = await cycle(h, [id], { worker: { sampleSliceTokens: 4 } });
  expect(done?.samples[0]?.outcome).toBe('committed');
  expect(startsOf(done?.events ?? [], id)?.every((start) => start.from === 'restored')).toBe(true);
  expect(await h.answer(t.tenant, id)).toEqual(await uninterrupted(request));
}

describe('cut triggers', () => {
  it('the Lambda cuts when its remaining time falls under the margin, and the sample resumes exactly', async () => {
    const request = body(2, 12, 5);
    const id = await t.sample(session, request);
    let remaining = 300_000;
    const events: WorkerEvent[] = [];
    const handler = createWorkerHandler({
      worker: {
        sampleSliceTokens: 2,
        cutPollMs: 0,
        onEvent: (event) => {
          events.push(event);
          // Two slices in, the invocation nears its end: under the 30 s cut margin, above the abandon one.
          if (event.kind === 'sample-slice' && event.tokens.every((n) => n >= 4)) remaining = 20_000;
        },
      },
    });
    const context = { getRemainingTimeInMillis: () => remaining } as unknown as Context;
    expect(await handler(sqsEvent(JSON.stringify(await dispatched(id))), context)).toEqual({
      batchItemFailures: [],
    });
    expect(events.filter((event) => event.kind === 'sample-slice')).toHaveLength(2);
    expect(events.find((event) => event.kind === 'sample-cut')).toMatchObject({
      report: { saved: 2, kept: 0, restart: 0, failed: 0 },
    });
    const ref = await expectBackToPending(h, t.tenant, id);
    expect(ref?.sequences.map((pointer) => pointer?.length)).toEqual([4, 4]);

    // The next invocation, with time to spare, finishes it from the saved prefixes.
    const resumedEvents: WorkerEvent[] = [];
    const next = createWorkerHandler({
      worker: { sampleSliceTokens: 2, cutPollMs: 0, onEvent: (event) => void resumedEvents.push(event) },
    });
    const plenty = { getRemainingTimeInMillis: () => 300_000 } as unknown as Context;
    expect(await next(sqsEvent(JSON.stringify(await dispatched(id))), plenty)).toEqual({
      batchItemFailures: [],
    });
    expect(startsOf(resumedEvents, id)).toEqual([
      { from: 'restored', tokens: 4 },
      { from: 'restored', tokens: 4 },
    ]);
    expect(await h.answer(t.tenant, id)).toEqual(await uninterrupted(request));
  });

  it("the operator's cut#<pool> request cuts a running sample, which resumes exactly", async () => {
    const request = body(1, 30, 17);
    const id = await t.sample(session, request);
    let asked = false;
    const outcome = await runWorkItem(await dispatched(id), {
      // Each slice holds the CPU: the poll's timer only runs because the runtime yields between slices.
      backend: slowSampler({ busyMs: 20 }),
      clients: h.cloud.clients,
      cutPollMs: 50,
      onEvent: async (event) => {
        if (event.kind !== 'sample-slice' || asked) return;
        asked = true;
        await requestCut(h.cloud.clients.doc, config().table('registry'), config().pool, 'resume-test');
      },
    });
    expect(outcome.samples[0]).toMatchObject({ outcome: 'cut', saved: 1 });
    const ref = await expectBackToPending(h, t.tenant, id);
    expect(ref?.sequences[0]?.length).toBeGreaterThanOrEqual(1);
    await expectExactResume(id, request);
  });

  describe('the worker process', () => {
    const children: ChildProcess[] = [];
    afterEach(() => {
      for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
    });

    it('SIGTERM cuts the running sample; the message is done and the sample resumes exactly', async () => {
      const request = body(1, 60, 29);
      const id = await t.sample(session, request);
      const queueUrl = h.cloud.env.WORK_QUEUE_URL as string;
      const manifest = await dispatched(id);
      await h.cloud.clients.sqs.send(
        new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: JSON.stringify(manifest) }),
      );
      const root = fileURLToPath(new URL('../../', import.meta.url));
      const args = ['--backend', 'test/support/resume-slow-sampler.ts', '--wait-seconds', '1'];
      const child = spawn(process.execPath, ['--import', 'tsx', 'bin/worker.ts', ...args], {
        cwd: root,
        env: {
          ...process.env,
          ...h.cloud.env,
          AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
          SLOW_SAMPLE_MS: '150',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.push(child);
      let out = '';
      child.stdout?.on('data', (chunk: Buffer) => (out += chunk.toString()));
      child.stderr?.on('data', (chunk: Buffer) => (out += chunk.toString()));
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));

      await waitFor('three slices', () => out.split('slow sample slice').length > 3, 40_000);
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(out).toContain(`work item ${manifest.work_item_id}: models none; samples 1 cut`);

      const ref = await expectBackToPending(h, t.tenant, id);
      expect(ref?.sequences[0]?.length).toBeGreaterThanOrEqual(3);
      // The message was deleted: the cut sample comes back through the scheduler, not a redelivery.
      const left = await h.cloud.clients.sqs.send(
        new ReceiveMessageCommand({ QueueUrl: queueUrl, WaitTimeSeconds: 0, VisibilityTimeout: 0 }),
      );
      expect(left.Messages ?? []).toEqual([]);
      await expectExactResume(id, request);
    });
  });
});
