import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { runCli } from '../../bin/cli.js';
import { TinkerClient } from '../../shared/client/tinker-client.js';
import type { PoolQueueStatus } from '../../shared/services/ops/queue-status.js';
import { type RunningScript, runScript } from '../support/processes.js';
import { waitFor } from '../support/wait.js';

/**
 * Hardening finding 5: `npm start` keeps its data. A stack on a data folder takes a model and a
 * request that cannot run (the pool drains), stops, starts again on the same folder: the printed key
 * is the same and still authenticates, the model and the pending request are there, and lifting the
 * drain completes the request.
 */
const dir = mkdtempSync(path.join(tmpdir(), 'tinker-persist-'));
const envFile = path.join(dir, 'env.json');
let running: RunningScript | undefined;

async function start(): Promise<{ url: string; key: string }> {
  running = runScript('local/runtime/start.ts', { ...process.env, TINKER_LOCAL_DIR: dir });
  const stack = running;
  await waitFor(
    'the ready banner',
    () => {
      if (stack.child.exitCode !== null) throw new Error(`npm start exited early:\n${stack.output()}`);
      return stack.output().includes('Press Ctrl-C to stop.');
    },
    60_000,
    100,
  );
  const url = /^export TINKER_BASE_URL=(\S+)$/m.exec(stack.output())?.[1];
  const key = /^export TINKER_API_KEY=(\S+)$/m.exec(stack.output())?.[1];
  if (url === undefined || key === undefined) throw new Error(`no URL or key in:\n${stack.output()}`);
  expect(stack.output()).toContain(`Data kept across restarts in ${path.join(dir, 'data')}`);
  return { url, key };
}

async function stop(): Promise<void> {
  const stack = running;
  running = undefined;
  stack?.child.kill('SIGINT');
  expect(await stack?.exited).toBe(0);
}

async function cli(...args: string[]): Promise<string> {
  let out = '';
  const code = await runCli([...args, '--env-file', envFile], {
    stdout: (text) => (out += text),
    stderr: (text) => (out += text),
    env: {},
  });
  expect(code, out).toBe(0);
  return out;
}

async function pendingOf(modelId: string): Promise<{ draining: boolean; pending: number | undefined }> {
  const status = JSON.parse(await cli('status', '--json')) as PoolQueueStatus;
  const model = status.models.find((row) => row.model_id === modelId);
  return { draining: status.draining !== undefined, pending: model?.pending };
}

const bytes = (text: string) => [...Buffer.from(text)];

describe('npm start keeps its data across restarts', () => {
  afterEach(() => {
    if (running?.child.exitCode === null) running.child.kill('SIGKILL');
    running = undefined;
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('keeps the key, the model and a pending request, which completes after the restart', async () => {
    const first = await start();
    const client = new TinkerClient({ baseUrl: first.url, apiKey: first.key });
    const session = await client.createSession();
    const created = await client.createModel({
      session_id: session.session_id,
      model_seq_id: 0,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 4 },
    });
    const { model_id: modelId } = await client.waitFor<{ model_id: string }>(created.request_id, {
      timeoutMs: 30_000,
    });
    await cli('drain', '--reason', 'restart test');
    const all = bytes('persist me');
    const submitted = await client.forwardBackward({
      model_id: modelId,
      seq_id: 1,
      forward_backward_input: {
        data: [
          {
            model_input: { chunks: [{ type: 'encoded_text', tokens: all.slice(0, -1) }] },
            loss_fn_inputs: {
              target_tokens: { data: all.slice(1), dtype: 'int64', shape: [all.length - 1] },
            },
          },
        ],
        loss_fn: 'cross_entropy',
      },
    });
    expect(await pendingOf(modelId)).toEqual({ draining: true, pending: 1 });
    await stop();

    const second = await start();
    expect(second.key).toBe(first.key);
    const again = new TinkerClient({ baseUrl: second.url, apiKey: first.key });
    expect(await again.getInfo(modelId)).toMatchObject({ model_id: modelId, lora_rank: 4 });
    expect(await pendingOf(modelId)).toEqual({ draining: true, pending: 1 });

    await cli('drain', '--off');
    const result = await again.waitFor<{ metrics: Record<string, number> }>(submitted.request_id, {
      timeoutMs: 30_000,
    });
    expect(result.metrics['loss:sum']).toBeGreaterThan(0);
    await stop();
  }, 240_000);
});
