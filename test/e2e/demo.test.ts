import { describe, expect, it } from 'vitest';
import { descendantsMatching, isAlive, isDynamoDbLocalJvm, runScript } from '../support/processes.js';
import { waitFor } from '../support/wait.js';

/** `npm run demo` (minus npm): its own local stack, trained over HTTP, then everything stopped. */
describe('npm run demo', () => {
  it('trains over the API with the loss falling, samples from its checkpoint, and exits 0 leaving nothing', async () => {
    const { child, output: printed, exited } = runScript('local/demos/demo.ts');
    try {
      const jvm = await waitFor(
        'the DynamoDB Local of the demo',
        () => descendantsMatching(child.pid ?? -1, isDynamoDbLocalJvm)[0],
        45_000,
        100,
      );
      expect(await exited).toBe(0);
      // Not a TTY here: one plain line per step.
      const losses = [...printed().matchAll(/^ {2}step +\d+\/30 +loss (\d+\.\d+)/gm)].map((m) =>
        Number(m[1]),
      );
      expect(losses).toHaveLength(30);
      expect(losses.at(-1)).toBeLessThan((losses[0] as number) / 2);
      expect(printed()).toMatch(/^ {2}loss +\d+\.\d+ -> \d+\.\d+ over 30 steps/m);
      const path = /Sampler checkpoint saved: (tinker:\/\/\S+\/demo-final)$/m.exec(printed())?.[1];
      expect(path).toBeDefined();
      expect(printed()).toContain(`checkpoint        ${path}`);
      expect(printed()).toMatch(/^ {2}checkpoint blob +s3:\/\/demo-data\/checkpoints\/\S+\.bin$/m);
      expect(printed()).toMatch(/^ {6}trained: "la la la/m);
      expect(printed()).toMatch(/^ {2}API base URL +http:\/\/127\.0\.0\.1:\d+$/m);
      await waitFor('the JVM to exit', () => !isAlive(jvm), 5_000);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 90_000);
});
