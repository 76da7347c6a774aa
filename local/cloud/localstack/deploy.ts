import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { readEnvFile, writeLocalEnvFile } from '../../../shared/base/env-file.js';
import {
  configuredEndpoint,
  DEFAULT_LOCALSTACK_ENDPOINT,
  localStackEnv,
  probeLocalStack,
} from './endpoint.js';

/**
 * `npm run deploy:localstack [-- <cdk options>]`: `cdklocal bootstrap` then `cdklocal deploy` of the
 * same stack `npx cdk deploy` deploys, against LocalStack at LOCALSTACK_ENDPOINT / AWS_ENDPOINT_URL
 * (default http://localhost:4566). Offline-safe: AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_S3 both point at
 * LocalStack, so nothing reaches AWS. Tables and the bucket are deleted with the stack
 * (`-c removalPolicy=destroy`); extra options go to `cdk deploy` (e.g. `-c referenceWorker=false`).
 *
 * cdklocal (npm `aws-cdk-local`) is not a dependency: it is run through `npx --yes`, pinned to the
 * project's own aws-cdk CLI version (the registry must be reachable the first time). Set CDKLOCAL to
 * a command to use another (e.g. CDKLOCAL=cdklocal for a global install).
 * Writes `.local/localstack-outputs.json` (the stack outputs) and `.local/localstack-env.json` (what
 * `npx tinker-serverless --env-file` and `npm run worker` need, endpoints included).
 */

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const OUTPUTS_FILE = path.join(ROOT, '.local', 'localstack-outputs.json');
const ENV_FILE = path.join(ROOT, '.local', 'localstack-env.json');
/** LocalStack's default account. */
const ACCOUNT = '000000000000';

function cdklocalCommand(): string[] {
  const custom = process.env.CDKLOCAL;
  if (custom !== undefined && custom !== '') return custom.split(/\s+/);
  const cdk = JSON.parse(
    readFileSync(path.join(ROOT, 'node_modules', 'aws-cdk', 'package.json'), 'utf8'),
  ) as {
    version: string;
  };
  return ['npx', '--yes', '--package', 'aws-cdk-local', '--package', `aws-cdk@${cdk.version}`, 'cdklocal'];
}

function run(command: readonly string[], env: NodeJS.ProcessEnv): void {
  process.stdout.write(`deploy:localstack: ${command.join(' ')}\n`);
  const [file, ...args] = command;
  const result = spawnSync(file!, args, { cwd: ROOT, env, stdio: 'inherit' });
  if (result.status !== 0) {
    throw new Error(`${command.slice(-2).join(' ')} failed (exit ${result.status ?? result.signal})`);
  }
}

async function main(): Promise<number> {
  const endpoint = configuredEndpoint(process.env) ?? DEFAULT_LOCALSTACK_ENDPOINT;
  const probe = await probeLocalStack(endpoint);
  if (!probe.ok) {
    process.stderr.write(
      `deploy:localstack: LocalStack does not answer (${probe.reason}); start it first (it needs LOCALSTACK_AUTH_TOKEN since March 2026, or the last tokenless image localstack/localstack:4.14.0)\n`,
    );
    return 1;
  }
  const overrides = localStackEnv(endpoint, process.env);
  const env = { ...process.env, ...overrides };
  const cdklocal = cdklocalCommand();
  run([...cdklocal, 'bootstrap', `aws://${ACCOUNT}/${overrides.AWS_REGION}`], env);
  run(
    [
      ...cdklocal,
      'deploy',
      '--require-approval',
      'never',
      '--outputs-file',
      OUTPUTS_FILE,
      '-c',
      'removalPolicy=destroy',
      ...process.argv.slice(2),
    ],
    env,
  );
  // The OperatorEnv output: every resource variable, a superset of what `npm run worker` needs.
  const stackEnv = readEnvFile(OUTPUTS_FILE);
  const { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: _, ...endpoints } = overrides;
  writeLocalEnvFile({ ...stackEnv, ...endpoints }, ENV_FILE, false);
  process.stdout.write(
    [
      `deploy:localstack: deployed; outputs in ${path.relative(ROOT, OUTPUTS_FILE)}`,
      `operator CLI: npx tinker-serverless status --env-file ${path.relative(ROOT, ENV_FILE)}`,
      '',
    ].join('\n'),
  );
  return 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`deploy:localstack: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
