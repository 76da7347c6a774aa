import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import {
  descendantsMatching,
  isAlive,
  isDynamoDbLocalJvm,
  pgrep,
  runScript,
  type ScriptProcess,
} from '../support/processes.js';
import { waitFor } from '../support/wait.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const JVM_MARKER = 'DynamoDBLocal';

type StartProcess = ScriptProcess;

/** Runs local/runtime/start.ts the way `npm start` does, minus npm: one node process to signal. */
function startStack(env: NodeJS.ProcessEnv = process.env): { child: StartProcess; output: () => string } {
  // Throwaway: the suite never touches the developer's .local/data.
  return runScript('local/runtime/start.ts', { ...env, TINKER_LOCAL_THROWAWAY: '1' });
}

function exitOf(child: StartProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  }
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
}

async function untilReady(stack: {
  child: StartProcess;
  output: () => string;
}): Promise<{ url: string; jvm: number }> {
  const url = await waitFor(
    'the API base URL',
    () => {
      if (stack.child.exitCode !== null) throw new Error(`npm start exited early:\n${stack.output()}`);
      return /^(http:\/\/127\.0\.0\.1:\d+)$/m.exec(stack.output())?.[1];
    },
    45_000,
    100,
  );
  const [jvm] = descendantsMatching(stack.child.pid ?? -1, isDynamoDbLocalJvm);
  if (jvm === undefined) throw new Error('no DynamoDB Local JVM under the started process');
  return { url, jvm };
}

describe('npm start', () => {
  let running: StartProcess | undefined;
  afterEach(() => {
    // A failed assertion must not leave the stack behind (the JVM's watchdog follows its parent).
    if (running?.exitCode === null) running.kill('SIGKILL');
    running = undefined;
  });

  it('serves the API, and on Ctrl-C (SIGINT) stops cleanly leaving no DynamoDB Local', async () => {
    const stack = startStack();
    running = stack.child;
    const { url, jvm } = await untilReady(stack);
    expect(stack.output()).toMatch(/Ctrl-C/);
    expect(pgrep(JVM_MARKER)).toContain(jvm);
    const answer = await fetch(`${url}/healthz`);
    expect(answer.status).toBeLessThan(500);

    stack.child.kill('SIGINT');
    expect(await exitOf(stack.child)).toEqual({ code: 0, signal: null });
    await waitFor('the JVM to exit', () => !isAlive(jvm), 5_000);
    expect(pgrep(JVM_MARKER)).not.toContain(jvm);
  });

  it('leaves no DynamoDB Local when its node process is killed outright (SIGKILL)', async () => {
    // Only the cloud: the watchdog is what is under test, and importing the handlers would add nothing.
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/support/fixtures/cloud-only.ts'], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    running = child;
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const jvm = Number(await waitFor('the JVM pid', () => /^jvm (\d+)$/m.exec(output)?.[1], 45_000, 100));
    expect(descendantsMatching(child.pid ?? -1, isDynamoDbLocalJvm)).toEqual([jvm]);
    child.kill('SIGKILL');
    await exitOf(child);
    // The watchdog checks its parent twice a second, then stops the JVM.
    await waitFor('the watchdog to stop the JVM', () => !isAlive(jvm), 10_000, 100);
    expect(pgrep(JVM_MARKER)).not.toContain(jvm);
  });

  it('fails with one line naming Java 17+ when java is not on PATH', async () => {
    const stack = startStack({ ...process.env, PATH: '/nonexistent' });
    running = stack.child;
    expect((await exitOf(stack.child)).code).toBe(1);
    const lines = stack.output().trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/Java 17\+.*apt-get install openjdk-17-jre-headless/);
  });
});
