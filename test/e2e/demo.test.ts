import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { descendantsMatching, isAlive, isDynamoDbLocalJvm } from '../support/processes.js';
import { waitFor } from '../support/wait.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** `npm run demo` (minus npm): its own local stack, trained over HTTP, then everything stopped. */
describe('npm run demo', () => {
  it('trains over the API with the loss falling, samples from its checkpoint, and exits 0 leaving nothing', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'local/demo.ts'], {
      cwd: ROOT,
      env: { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      const jvm = await waitFor(
        'the DynamoDB Local of the demo',
        () => descendantsMatching(child.pid ?? -1, isDynamoDbLocalJvm)[0],
        45_000,
        100,
      );
      expect(await exited).toBe(0);
      // Not a TTY here: one plain line per step.
      const losses = [...output.matchAll(/^ {2}step +\d+\/30 +loss (\d+\.\d+)/gm)].map((m) => Number(m[1]));
      expect(losses).toHaveLength(30);
      expect(losses.at(-1)).toBeLessThan((losses[0] as number) / 2);
      expect(output).toMatch(/^ {2}loss +\d+\.\d+ -> \d+\.\d+ over 30 steps/m);
      const path = /Sampler checkpoint saved: (tinker:\/\/\S+\/demo-final)$/m.exec(output)?.[1];
      expect(path).toBeDefined();
      expect(output).toContain(`checkpoint        ${path}`);
      expect(output).toMatch(/^ {2}checkpoint blob +s3:\/\/demo-data\/checkpoints\/\S+\.bin$/m);
      expect(output).toMatch(/^ {6}trained: "la la la/m);
      expect(output).toMatch(/^ {2}API base URL +http:\/\/127\.0\.0\.1:\d+$/m);
      await waitFor('the JVM to exit', () => !isAlive(jvm), 5_000);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 90_000);
});
