import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { DeleteObjectCommand } from '@aws-sdk/client-s3';
import { ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import type { SQSEvent } from 'aws-lambda';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runWorkerProcess } from '../../bin/worker.js';
import { handler } from '../../functions/worker/handler.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { config } from '../../shared/base/config.js';
import { writeLocalEnvFile } from '../../shared/base/env-file.js';
import { manifestFor, type WorkManifest } from '../../shared/domain/planning/work-item.js';
import type { LiveRow, ModelRow } from '../../shared/domain/records.js';
import { runWorkItem, type WorkerEvent } from '../../shared/services/worker/index.js';
import { StateCache } from '../../shared/services/worker/state-cache.js';
import { waitFor } from '../support/wait.js';
import { crossEntropy, textDatum, WorkerHarness } from '../support/worker-harness.js';

let h: WorkerHarness;

beforeAll(async () => {
  h = await WorkerHarness.start();
});

afterAll(() => h?.cloud.clients.dynamo.destroy());

const onlyModel = (modelId: string) => (row: LiveRow) => row.model_id === modelId;

function sqsEvent(...bodies: string[]): SQSEvent {
  return {
    Records: bodies.map((body, index) => ({
      messageId: `m-${index}`,
      receiptHandle: `r-${index}`,
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
    })),
  };
}

/** A model with a create_model, a forward_backward and an optimizer step, dispatched as one work item. */
async function dispatchedModel(
  tenant: string,
): Promise<{ model_id: string; ids: string[]; manifest: WorkManifest }> {
  const t = h.tenant(tenant);
  const m = await t.createModel(4, 1);
  const ids = [
    m.request_id,
    await t.pass('forward_backward', m.model_id, crossEntropy(textDatum('drivers'))),
    await t.optimStep(m.model_id),
  ];
  const dispatched = await h.dispatch({ only: onlyModel(m.model_id) });
  return { model_id: m.model_id, ids, manifest: (dispatched as { manifest: WorkManifest }).manifest };
}

async function expectCommitted(ids: readonly string[]): Promise<void> {
  const [expected, actual] = [await h.oracle(), await h.answers()];
  for (const id of ids) expect(actual.get(id), id).toEqual(expected.get(id));
}

describe('the Lambda driver', () => {
  it('runs a work item and reports no failure; a redelivery is a success that changes nothing', async () => {
    const { ids, manifest } = await dispatchedModel('lambda');
    expect(await handler(sqsEvent(JSON.stringify(manifest)))).toEqual({ batchItemFailures: [] });
    await expectCommitted(ids);
    const before = await h.snapshot();
    expect(await handler(sqsEvent(JSON.stringify(manifest)))).toEqual({ batchItemFailures: [] });
    expect(await h.snapshot()).toEqual(before);
  });

  it('reports messages whose work failed with an infrastructure error, and only those', async () => {
    const t = h.tenant('lambda-broken');
    const m = await t.createModel(4, 1);
    const created = await h.dispatch({ only: onlyModel(m.model_id) });
    // Committed by another process: the driver's own does not hold the state (./state-cache.ts).
    await runWorkItem(created!.manifest, { backend: new ReferenceBackend(), states: new StateCache() });
    const row = (await h.modelRow(m.model_id)) as ModelRow;
    await t.optimStep(m.model_id);
    const broken = await h.dispatch({ only: onlyModel(m.model_id) });
    // The committed state the work item names is gone: an infrastructure error, not the user's.
    await h.cloud.clients.s3.send(new DeleteObjectCommand({ Bucket: config().bucket, Key: row.state_ref }));
    const missingItem = JSON.stringify(manifestFor('wi-does-not-exist'));
    const answer = await handler(sqsEvent(JSON.stringify(broken!.manifest), 'not json', missingItem));
    expect(answer.batchItemFailures.map((failure) => failure.itemIdentifier).sort()).toEqual([
      'm-0',
      'm-1',
      'm-2',
    ]);
    // The failed model was handed back for re-plan at once.
    expect(await h.modelRow(m.model_id)).toMatchObject({ attempts: 1, planned_through: 1 });
    expect((await h.modelRow(m.model_id))?.inflight).toBeUndefined();
  });
});

describe('the worker process', () => {
  const children: ChildProcess[] = [];
  afterEach(() => {
    for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
  });

  const queueUrl = () => h.cloud.env.WORK_QUEUE_URL as string;
  const send = (manifest: WorkManifest) =>
    h.cloud.clients.sqs.send(
      new SendMessageCommand({ QueueUrl: queueUrl(), MessageBody: JSON.stringify(manifest) }),
    );
  const receiveNow = async () =>
    (
      await h.cloud.clients.sqs.send(
        new ReceiveMessageCommand({ QueueUrl: queueUrl(), WaitTimeSeconds: 0, VisibilityTimeout: 0 }),
      )
    ).Messages ?? [];

  it('long-polls, keeps the message invisible while a step runs, deletes it when done, prints one line', async () => {
    const { ids, manifest } = await dispatchedModel('process');
    await send(manifest);
    const stop = new AbortController();
    const lines: string[] = [];
    let open!: () => void;
    const opened = new Promise<void>((resolve) => (open = resolve));
    let paused = false;
    const running = runWorkerProcess({
      queueUrl: queueUrl(),
      backend: new ReferenceBackend(),
      sqs: h.cloud.clients.sqs,
      stop: stop.signal,
      waitTimeSeconds: 1,
      visibilityTimeoutSeconds: 1,
      extendEveryMs: 250,
      print: (line) => lines.push(line),
      worker: {
        clients: h.cloud.clients,
        onEvent: async (event: WorkerEvent) => {
          if (event.kind !== 'step-done' || paused) return;
          paused = true;
          await opened;
        },
      },
    });
    await waitFor('the worker to start the item', () => paused);
    // Three visibility timeouts pass; the extension keeps the message from any other consumer.
    for (let i = 0; i < 6; i++) {
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(await receiveNow()).toEqual([]);
    }
    open();
    await waitFor('the work item line', () => lines.length === 1);
    stop.abort();
    expect(await running).toBe(1);
    expect(lines[0]).toMatch(
      new RegExp(`work item ${manifest.work_item_id}: models 1 committed; samples none; \\d+ ms$`),
    );
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(await receiveNow()).toEqual([]);
    await expectCommitted(ids);
  });

  it('takes no work item while its health check fails, and takes it once the check passes', async () => {
    const { ids, manifest } = await dispatchedModel('health');
    await send(manifest);
    const stop = new AbortController();
    const lines: string[] = [];
    let checks = 0;
    let healthy = false;
    const running = runWorkerProcess({
      queueUrl: queueUrl(),
      backend: new ReferenceBackend(),
      sqs: h.cloud.clients.sqs,
      stop: stop.signal,
      waitTimeSeconds: 1,
      print: (line) => lines.push(line),
      worker: { clients: h.cloud.clients },
      healthCheck: async () => {
        checks += 1;
        if (!healthy) throw new Error('the engine is down');
      },
    });
    await waitFor('two failed health checks', () => checks >= 2);
    // The message is still on the queue for a healthy worker.
    expect(await receiveNow()).toHaveLength(1);
    expect(lines).toEqual([]);
    healthy = true;
    await waitFor('the work item line', () => lines.length === 1);
    stop.abort();
    expect(await running).toBe(1);
    await expectCommitted(ids);
  });

  function spawnWorker(
    args: string[],
    env: Record<string, string> = {},
  ): { child: ChildProcess; out: () => string } {
    const root = fileURLToPath(new URL('../../', import.meta.url));
    const child = spawn(process.execPath, ['--import', 'tsx', 'bin/worker.ts', ...args], {
      cwd: root,
      env: {
        ...process.env,
        ...h.cloud.env,
        AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    return { child, out: () => output };
  }

  const exitCode = (child: ChildProcess) =>
    new Promise<number | null>((resolve) => {
      if (child.exitCode !== null) resolve(child.exitCode);
      else child.on('exit', (code) => resolve(code));
    });

  it('npm run worker: runs queued work, and SIGTERM stops it with exit code 0', async () => {
    const { ids, manifest } = await dispatchedModel('spawned');
    await send(manifest);
    const { child, out } = spawnWorker(['--wait-seconds', '2']);
    await waitFor(
      'the work item line',
      () => out().includes(`work item ${manifest.work_item_id}: models 1 committed`),
      30_000,
    );
    const started = Date.now();
    child.kill('SIGTERM');
    expect(await exitCode(child)).toBe(0);
    // The poll in flight (2 s here) finishes first, so no message is taken by a process that is leaving.
    expect(Date.now() - started).toBeLessThan(8_000);
    expect(out()).toMatch(/SIGTERM: no new work items/);
    await expectCommitted(ids);
  });

  it("npm run worker --env-file with npm start's file: takes its variables, and runs under the worker's grants", async () => {
    const { ids, manifest } = await dispatchedModel('env-file');
    await send(manifest);
    const dir = mkdtempSync(path.join(tmpdir(), 'tinker-worker-env-'));
    const envFile = path.join(dir, 'env.json');
    // As `npm start` writes it: the stack's variables and the pid of its (running) writer.
    writeLocalEnvFile(h.cloud.env, envFile);
    try {
      const { child, out } = spawnWorker(['--wait-seconds', '1', '--env-file', envFile], {
        // The file wins over the environment.
        WORK_QUEUE_URL: 'http://127.0.0.1:1/000000000000/nowhere',
      });
      await waitFor(
        'the work item line',
        () => out().includes(`work item ${manifest.work_item_id}: models 1 committed`),
        30_000,
      );
      expect(out()).toContain(`polling ${h.cloud.env.WORK_QUEUE_URL}`);
      expect(out()).toContain("is the local stack's: calls are checked against the worker's grants");
      child.kill('SIGTERM');
      expect(await exitCode(child)).toBe(0);
      await expectCommitted(ids);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('SIGTERM during a long step: abandons after the grace period without committing; another worker finishes it', async () => {
    const { model_id, ids, manifest } = await dispatchedModel('graceful');
    await send(manifest);
    const backendModule = fileURLToPath(new URL('../support/worker-slow-backend.ts', import.meta.url));
    const { child, out } = spawnWorker(
      ['--backend', backendModule, '--grace-seconds', '1', '--wait-seconds', '2'],
      {
        SLOW_OPTIM_MS: '4000',
      },
    );
    await waitFor('the slow step to start', () => out().includes('slow optim_step started'), 30_000).catch(
      (error) => {
        throw new Error(`${error}: ${out()}`);
      },
    );
    child.kill('SIGTERM');
    expect(await exitCode(child)).toBe(0);
    expect(out()).toMatch(/left for redelivery/);
    const row = (await h.modelRow(model_id)) as ModelRow;
    expect(row.inflight).toBe(`${model_id}@${row.epoch}`);
    for (const id of ids) expect((await h.future(id))?.status).toBe('pending');
    // The abandoned message is visible again at once; the next worker continues the same work item.
    const [message] = await waitFor('the message to come back', async () => {
      const messages = await receiveNow();
      return messages.length > 0 ? messages : undefined;
    });
    const outcome = await runWorkItem(JSON.parse(message?.Body ?? '{}') as WorkManifest, {
      backend: new ReferenceBackend(),
    });
    expect(outcome.models.map((m) => m.outcome)).toEqual(['committed']);
    await expectCommitted(ids);
  });
});
