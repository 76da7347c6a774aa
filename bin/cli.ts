#!/usr/bin/env -S AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED=true node --import tsx
import { realpathSync } from 'node:fs';
import { hostname, userInfo } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { awsClients, resetAwsClients } from '../shared/aws/clients.js';
import { type Config, config, resetConfig } from '../shared/base/config.js';
import { LOCAL_ENV_FILE, type ResolvedEnvironment, resolveEnvironment } from '../shared/base/env-file.js';
import { ValidationError } from '../shared/base/errors.js';
import { topology } from '../shared/base/topology.js';
import { createApiKey, createOperatorKey, revokeApiKey } from '../shared/repositories/api-keys.js';
import { requestCut, startDrain, stopDrain } from '../shared/services/ops/control-store.js';
import { renderStatusText } from '../shared/services/ops/format.js';
import { readPoolStatus } from '../shared/services/ops/status-reader.js';

const USAGE = `usage: npx tinker-serverless <command> [options]

commands:
  status                      per-model queue picture of the pool: pending, first barrier, next tick,
                              work item in flight and its lease age, last completion, oldest pending;
                              the depths of the work queue and of both dead-letter queues
  keys create --tenant NAME   create a tenant API key, tml-... (printed once; only its hash is stored)
  keys create --operator NAME create an operator key, tso-..., for the status page at <API URL>/status
                              (its data spans every tenant: tenant keys are refused there, and operator
                              keys are refused by the Tinker API); NAME says who holds it, e.g. an email
  keys revoke KEY             revoke a key of either kind
  cut                         ask the pool's running workers to cut now (save prefixes, commit)
  drain [--reason TEXT]       stop dispatching new work for the pool (work in flight finishes)
  drain --off                 resume dispatching

options:
  --pool NAME        pool to act on (default: POOL from the environment)
  --json             machine-readable output
  --env-file FILE    where the system is: a JSON map of variables, a 'cdk deploy --outputs-file'
                     file, or NAME=value lines. Without it: the process environment when it names
                     the tables (AWS), else .local/env.json written by a running 'npm start'.
`;

export interface CliIo {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  /** The environment to start from (default process.env); the chosen variables are applied to process.env. */
  readonly env?: Readonly<Record<string, string | undefined>>;
}

class UsageError extends ValidationError {
  override readonly name = 'UsageError';
}

/** Where the CLI's variables come from, in order of precedence (see `resolveEnvironment`). */
export function resolveCliEnvironment(
  envFile: string | undefined,
  env: Readonly<Record<string, string | undefined>>,
  localEnvFile = LOCAL_ENV_FILE,
): ResolvedEnvironment {
  return resolveEnvironment({
    envFile,
    env,
    localEnvFile,
    readyVariable: topology.tables.registry.envVar,
    needs:
      `${topology.tables.registry.envVar}, ${topology.tables.futures.envVar}, ${topology.tables.models.envVar}, ` +
      `${queueVariables()}, POOL and LIVE_SHARDS (see the stack's OperatorEnv output)`,
  });
}

/** The queue URLs `status` reads: the work queue's and both dead-letter queues' (for their depths). */
function queueVariables(): string {
  return (['work', 'workDlq', 'streamDlq'] as const)
    .flatMap((id) => topology.queues[id].envVar ?? [])
    .join(', ');
}

function operator(): string {
  try {
    return `${userInfo().username}@${hostname()}`;
  } catch {
    return `uid-unknown@${hostname()}`;
  }
}

/** Runs one CLI command; resolves with the exit code (0 ok, 1 failed, 2 usage). */
export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (error) {
    io.stderr(`${error instanceof Error ? error.message : String(error)}\n\n${USAGE}`);
    return 2;
  }
  const { values, positionals } = parsed;
  const [command, ...rest] = positionals;
  if (values.help === true || command === undefined || command === 'help') {
    (command === undefined && values.help !== true ? io.stderr : io.stdout)(USAGE);
    return command === undefined && values.help !== true ? 2 : 0;
  }
  try {
    const { variables } = resolveCliEnvironment(values['env-file'], io.env ?? process.env);
    Object.assign(process.env, variables);
    resetConfig();
    resetAwsClients();
    // The CLI's edge: one command per process, so its configuration and clients are read once here.
    const settings = config();
    const { doc } = awsClients();
    const pool = values.pool ?? settings.pool;
    const print = (human: string, machine: unknown) =>
      io.stdout(values.json === true ? `${JSON.stringify(machine, null, 2)}\n` : human);

    switch (command) {
      case 'status': {
        expectNoArguments(rest);
        const status = await readPoolStatus({ pool, clients: awsClients(), config: settings });
        print(renderStatusText(status), status);
        return 0;
      }
      case 'keys':
        return await keys(rest, values, print, settings);
      case 'cut': {
        expectNoArguments(rest);
        const record = await requestCut(doc, settings.table('registry'), pool, operator());
        print(
          `cut requested for pool ${pool} at ${new Date(record.requested_at).toISOString()}; running workers cut at their next poll\n`,
          record,
        );
        return 0;
      }
      case 'drain': {
        expectNoArguments(rest);
        if (values.off === true) {
          const wasDraining = await stopDrain(doc, settings.table('registry'), pool);
          print(wasDraining ? `pool ${pool} dispatches again\n` : `pool ${pool} was not draining\n`, {
            pool,
            draining: false,
            was_draining: wasDraining,
          });
          return 0;
        }
        const record = await startDrain(doc, settings.table('registry'), pool, operator(), {
          reason: values.reason,
        });
        print(
          `pool ${pool} is draining since ${new Date(record.since).toISOString()}: nothing new is dispatched; 'drain --off' resumes\n`,
          { ...record, draining: true },
        );
        return 0;
      }
      default:
        throw new UsageError(`unknown command "${command}"`);
    }
  } catch (error) {
    if (error instanceof UsageError) {
      io.stderr(`${error.message}\n\n${USAGE}`);
      return 2;
    }
    io.stderr(`tinker-serverless ${command}: ${error instanceof Error ? error.message : String(error)}\n`);
    return 1;
  }
}

function parse(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    allowPositionals: true,
    strict: true,
    options: {
      pool: { type: 'string' },
      json: { type: 'boolean' },
      'env-file': { type: 'string' },
      tenant: { type: 'string' },
      operator: { type: 'string' },
      reason: { type: 'string' },
      off: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
}

function expectNoArguments(rest: readonly string[]): void {
  if (rest.length > 0) throw new UsageError(`unexpected argument "${rest[0]}"`);
}

async function keys(
  rest: readonly string[],
  owner: { readonly tenant?: string | undefined; readonly operator?: string | undefined },
  print: (human: string, machine: unknown) => void,
  settings: Config,
): Promise<number> {
  const [action, key, ...extra] = rest;
  const { tenant, operator } = owner;
  const registry = () => settings.table('registry');
  if (action === 'create' && key === undefined && (tenant === undefined) !== (operator === undefined)) {
    if (tenant !== undefined) {
      const created = await createApiKey(awsClients().doc, registry(), tenant);
      print(`${created}\n`, { tenant, key: created });
    } else if (operator !== undefined) {
      const created = await createOperatorKey(awsClients().doc, registry(), operator);
      print(`${created}\n`, { operator, key: created });
    }
    return 0;
  }
  if (action === 'revoke' && key !== undefined && extra.length === 0) {
    const found = await revokeApiKey(awsClients().doc, registry(), key);
    print(found ? 'revoked\n' : 'no such key\n', { revoked: found });
    return found ? 0 : 1;
  }
  throw new UsageError(
    'keys: expected "keys create --tenant NAME", "keys create --operator NAME" or "keys revoke KEY"',
  );
}

function isEntryPoint(): boolean {
  const entry = process.argv[1];
  return entry !== undefined && realpathSync(entry) === realpathSync(fileURLToPath(import.meta.url));
}

if (isEntryPoint()) {
  runCli(process.argv.slice(2), {
    stdout: (text) => process.stdout.write(text),
    stderr: (text) => process.stderr.write(text),
  }).then(
    // Exit once the output is flushed: idle keep-alive sockets of the SDK would hold the process open.
    (code) => process.stdout.write('', () => process.exit(code)),
    (error: unknown) => {
      process.stderr.write(`tinker-serverless: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exit(1);
    },
  );
}
