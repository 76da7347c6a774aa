import { removeLocalEnvFile, writeLocalEnvFile } from './env-file.js';
import { printDevelopmentApiKey, readyHooks } from './on-ready.js';
import { clientExportLines, type LocalStack, startLocalStack } from './stack.js';
import { type StatusPageServer, startStatusPage } from './status-page/server.js';

/**
 * `npm start`: DynamoDB Local + fauxqs, the topology's resources under the prefix `local`, and every
 * handler behind its triggers. Prints the API base URL; Ctrl-C (or SIGTERM) stops everything.
 */
const PREFIX = 'local';

let stack: LocalStack | undefined;
let statusPage: StatusPageServer | undefined;
let stopping = false;

async function shutdown(exitCode: number): Promise<never> {
  if (stopping) process.exit(exitCode);
  stopping = true;
  try {
    removeLocalEnvFile();
    await statusPage?.stop();
  } finally {
    await stack?.stop();
  }
  process.exit(exitCode);
}

function onSignal(signal: NodeJS.Signals): void {
  // A second Ctrl-C exits at once; the JVM's watchdog still stops DynamoDB Local.
  if (stopping) process.exit(130);
  process.stdout.write(`\n${signal}: stopping the local stack...\n`);
  void shutdown(0);
}

async function main(): Promise<void> {
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const started = performance.now();
  const port = process.env.PORT === undefined ? undefined : Number(process.env.PORT);
  stack = await startLocalStack({ prefix: PREFIX, httpPort: port });
  const { apiUrl, env, resources, clients } = stack;
  // The operator's view (own port) and the env file the CLI (`npx tinker-serverless status`) reads.
  const statusPort = process.env.STATUS_PORT === undefined ? undefined : Number(process.env.STATUS_PORT);
  statusPage = await startStatusPage({ port: statusPort });
  writeLocalEnvFile({ ...env, TINKER_BASE_URL: apiUrl, TINKER_STATUS_URL: statusPage.url });
  const extraLines: string[] = ['Queue status page:', statusPage.url];
  let developmentKey: string | undefined;
  for (const hook of readyHooks) {
    const lines = await hook({ apiUrl, env, resources, clients });
    extraLines.push(...lines);
    // That hook's last line is the key itself (see local/on-ready.ts).
    if (hook === printDevelopmentApiKey) developmentKey = lines.at(-1);
  }
  if (developmentKey !== undefined) {
    extraLines.push('Point any Tinker client at it:', ...clientExportLines(apiUrl, developmentKey));
  }
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  process.stdout.write(
    [
      `tinker-serverless is running locally (DynamoDB Local + fauxqs + handlers), up in ${seconds} s.`,
      'API base URL:',
      apiUrl,
      ...extraLines,
      'Press Ctrl-C to stop.',
      '',
    ].join('\n'),
  );
}

main().catch(async (error: unknown) => {
  // One line for the developer (e.g. "needs Java 17+"); the stack only when asked for.
  process.stderr.write(`npm start failed: ${error instanceof Error ? error.message : String(error)}\n`);
  if (process.env.DEBUG !== undefined && error instanceof Error) process.stderr.write(`${error.stack}\n`);
  await shutdown(1);
});
