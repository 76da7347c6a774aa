import { topology } from '../shared/topology.js';
import { localAwsClients } from './aws-clients.js';
import { type LocalCloud, startLocalCloud } from './cloud.js';
import { readyHooks } from './on-ready.js';
import { envFor, provisionResources } from './resources.js';
import { type LocalRuntime, startLocalRuntime } from './runtime.js';

/**
 * `npm start`: DynamoDB Local + fauxqs, the topology's resources under the prefix `local`, and every
 * handler behind its triggers. Prints the API base URL; Ctrl-C (or SIGTERM) stops everything.
 */
const PREFIX = 'local';

let cloud: LocalCloud | undefined;
let runtime: LocalRuntime | undefined;
let stopping = false;

async function shutdown(exitCode: number): Promise<never> {
  if (stopping) process.exit(exitCode);
  stopping = true;
  try {
    await runtime?.stop();
  } finally {
    await cloud?.stop();
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
  cloud = await startLocalCloud();
  const clients = localAwsClients(cloud.endpoints);
  const resources = await provisionResources(topology, PREFIX, clients);
  const env = envFor(topology, resources, cloud.endpoints);
  const port = process.env.PORT === undefined ? undefined : Number(process.env.PORT);
  runtime = await startLocalRuntime({ topology, env, httpPort: port });
  if (runtime.apiUrl === undefined) throw new Error('no function has an http trigger');
  const extraLines: string[] = [];
  for (const hook of readyHooks) {
    extraLines.push(...(await hook({ apiUrl: runtime.apiUrl, env, resources, clients })));
  }
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  process.stdout.write(
    [
      `tinker-serverless is running locally (DynamoDB Local + fauxqs + handlers), up in ${seconds} s.`,
      'API base URL:',
      runtime.apiUrl,
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
