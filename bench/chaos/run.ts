import { readFileSync } from 'node:fs';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import { startLocalCloud } from '../../local/cloud/cloud.js';
import { envFor, provisionResources } from '../../local/cloud/resources.js';
import { topology } from '../../shared/base/topology.js';
import { startCloudRuntime } from '../../test/support/runtime.js';
import { runChaos } from './chaos.js';
import { formatReport, writeReport } from './report.js';

/**
 * `npm run chaos [-- --requests N] [--seed S] [--log-level LEVEL] [--backend reference|noisy]`: the
 * chaos run on a local cloud of its own (DynamoDB Local + fauxqs, started and stopped here). Prints
 * the checks, writes `bench/results/chaos.json` (`chaos-noisy.json` on the noisy backend, see
 * `ChaosOptions.backend`), and exits non-zero on any violation.
 */

/** utime + stime of a process, from /proc (Linux), in seconds; 0 elsewhere. */
function processCpuSeconds(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

function flag(args: readonly string[], name: string): string | undefined {
  const index = args.indexOf(name);
  return index >= 0 ? args[index + 1] : undefined;
}

function integer(value: string | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < 0) throw new Error(`${name} must be a non-negative integer`);
  return parsed;
}

async function main(args: readonly string[]): Promise<number> {
  const requests = integer(flag(args, '--requests'), '--requests', 2000);
  const seed = integer(flag(args, '--seed'), '--seed', 20260601);
  const logLevel = flag(args, '--log-level') ?? 'SILENT';
  const backend = flag(args, '--backend') ?? 'reference';
  if (backend !== 'reference' && backend !== 'noisy') throw new Error('--backend must be reference or noisy');
  const say = (line: string) => process.stdout.write(`${line}\n`);

  const cloud = await startLocalCloud();
  const admin = localAwsClients(cloud.endpoints);
  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      for (const client of [admin.dynamo, admin.s3, admin.sqs]) client.destroy();
      await cloud.stop();
    })();
    return stopping;
  };
  process.once('SIGINT', () => void stop().finally(() => process.exit(130)));
  try {
    const names = await provisionResources(topology, `chaos${Date.now().toString(36)}`, admin);
    const env = envFor(topology, names, cloud.endpoints);
    const report = await runChaos(
      {
        env,
        admin,
        names,
        cpuSeconds: () => processCpuSeconds(cloud.dynamodbPid),
        startRuntime: ({ handlers, env: extra }) =>
          startCloudRuntime(
            { env, names },
            {
              env: extra,
              handlers,
            },
          ),
      },
      { requests, seed, logLevel, backend, progress: say },
    );
    say('');
    say(formatReport(report));
    say(`\nwritten: ${writeReport(report, backend === 'noisy' ? 'chaos-noisy.json' : 'chaos.json')}`);
    return report.violations.length === 0 ? 0 : 1;
  } finally {
    await stop();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(
      `chaos run failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exit(2);
  },
);
