import type { LocalStack } from '../../runtime/stack.js';

/**
 * What every demo script shares: its output lines, and the way it runs: the stack it started is
 * stopped on Ctrl-C (exit 130) or a failure (exit 1, the message on stderr), and a main that ends
 * normally exits 0.
 */

export const say = (line = '') => process.stdout.write(`${line}\n`);
export const seconds = (since: number) => `${((performance.now() - since) / 1000).toFixed(1)} s`;

/** `main` hands the stack it starts to `keep`, so it is stopped whichever way the demo ends. */
export function runDemo(
  name: string,
  main: (keep: (stack: LocalStack) => LocalStack) => Promise<void>,
): void {
  let stack: LocalStack | undefined;
  const onSignal = (signal: NodeJS.Signals): void => {
    process.stdout.write(`\n${signal}: stopping the local stack...\n`);
    void (stack?.stop() ?? Promise.resolve()).finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  main((started) => (stack = started)).then(
    () => process.exit(0),
    async (error: unknown) => {
      process.stderr.write(`\n${name} failed: ${error instanceof Error ? error.message : String(error)}\n`);
      if (process.env.DEBUG !== undefined && error instanceof Error) process.stderr.write(`${error.stack}\n`);
      await stack?.stop().catch(() => undefined);
      process.exit(1);
    },
  );
}
