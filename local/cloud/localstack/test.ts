import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { configuredEndpoint, probeLocalStack } from './endpoint.js';

/**
 * `npm run test:localstack`: the integration suite against LocalStack instead of the local cloud.
 * The endpoint comes from LOCALSTACK_ENDPOINT or AWS_ENDPOINT_URL; when none is set, or none answers
 * its health check within 1.5 s, the run is skipped with one line and exits 0. Extra arguments go to
 * vitest (e.g. a file filter).
 */

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

async function main(): Promise<number> {
  const endpoint = configuredEndpoint(process.env);
  if (endpoint === undefined) {
    process.stdout.write(
      'test:localstack: skipped: no LocalStack endpoint set (LOCALSTACK_ENDPOINT or AWS_ENDPOINT_URL, e.g. http://localhost:4566)\n',
    );
    return 0;
  }
  const probe = await probeLocalStack(endpoint);
  if (!probe.ok) {
    process.stdout.write(`test:localstack: skipped: LocalStack does not answer (${probe.reason})\n`);
    return 0;
  }
  process.stdout.write(
    `test:localstack: LocalStack ${probe.version ?? '(version unknown)'} at ${endpoint}: running the integration suite\n`,
  );
  const run = spawnSync(
    process.execPath,
    [
      fileURLToPath(new URL('../../../node_modules/vitest/vitest.mjs', import.meta.url)),
      'run',
      '--config',
      'local/cloud/localstack/vitest.config.ts',
      ...process.argv.slice(2),
    ],
    { cwd: ROOT, stdio: 'inherit', env: { ...process.env, LOCALSTACK_ENDPOINT: endpoint } },
  );
  return run.status ?? 1;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`test:localstack: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
