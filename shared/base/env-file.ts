import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { STACK_ENV_OUTPUTS } from './stack-outputs.js';

/**
 * Where operator tools find the system to talk to. `npm start` writes the local stack's environment
 * to `.local/env.json` (a flat map of variable -> value: resource names, endpoints, dummy credentials,
 * plus TINKER_BASE_URL and TINKER_STATUS_URL) and removes it on exit; the CLI reads it, or any file
 * given with `--env-file`:
 * - a flat JSON map of variables (like `.local/env.json`);
 * - a `cdk deploy --outputs-file` JSON: the stack's `OperatorEnv` output (every resource's variable)
 *   is used, or `WorkerEnv` from a stack deployed before `OperatorEnv` existed;
 * - a dotenv-style file of `NAME=value` lines.
 */

/**
 * The checkout this module belongs to: the nearest folder above it holding `package.json`, so the
 * compiled entry points (`npm run build`, `dist/shared/base/env-file.js`) find the same `.local/` as the
 * sources run through tsx do.
 */
export const PROJECT_ROOT = findProjectRoot(path.dirname(fileURLToPath(import.meta.url)));

function findProjectRoot(start: string): string {
  for (let dir = start; ; dir = path.dirname(dir)) {
    if (existsSync(path.join(dir, 'package.json'))) return dir;
    if (path.dirname(dir) === dir) return path.resolve(start, '../..');
  }
}

/** Where `npm start` keeps what outlives it: this env file and, unless throwaway, its data (`data/`). */
export const LOCAL_DIR = path.join(PROJECT_ROOT, '.local');

export const LOCAL_ENV_FILE = path.join(LOCAL_DIR, 'env.json');

/** Names the process that wrote the file, so a reader can tell a stale file from a running stack. */
export const WRITER_PID_VARIABLE = 'TINKER_LOCAL_PID';

/** Which of a stack's environment outputs a reader takes, in order of preference. */
export type EnvOutputPreference = readonly string[];

/** The operator CLI: every resource (`OperatorEnv`), or `WorkerEnv` from an older stack. */
export const OPERATOR_ENV_OUTPUTS: EnvOutputPreference = [
  STACK_ENV_OUTPUTS.operator,
  STACK_ENV_OUTPUTS.worker,
];

/** `npm run worker`: exactly the worker's variables (`WorkerEnv`), or the operator's superset. */
export const WORKER_ENV_OUTPUTS: EnvOutputPreference = [STACK_ENV_OUTPUTS.worker, STACK_ENV_OUTPUTS.operator];

export type EnvMap = Record<string, string>;

/** `markWriter`: record this process's pid, so readers can tell whether the writer still runs. */
export function writeLocalEnvFile(env: Readonly<EnvMap>, file = LOCAL_ENV_FILE, markWriter = true): void {
  mkdirSync(path.dirname(file), { recursive: true });
  const content: EnvMap = markWriter ? { ...env, [WRITER_PID_VARIABLE]: String(process.pid) } : { ...env };
  // Dummy local credentials only, but keep the file private like any env file.
  writeFileSync(file, `${JSON.stringify(content, null, 2)}\n`, { mode: 0o600 });
}

/** Removes the file if this process wrote it (a newer `npm start` may have replaced it). */
export function removeLocalEnvFile(file = LOCAL_ENV_FILE): void {
  if (!existsSync(file)) return;
  try {
    if (parseEnvFile(readFileSync(file, 'utf8'))[WRITER_PID_VARIABLE] !== String(process.pid)) return;
  } catch {
    return;
  }
  rmSync(file, { force: true });
}

export function readEnvFile(file: string, outputs = OPERATOR_ENV_OUTPUTS): EnvMap {
  return parseEnvFile(readFileSync(file, 'utf8'), file, outputs);
}

export function parseEnvFile(text: string, name = 'env file', outputs = OPERATOR_ENV_OUTPUTS): EnvMap {
  const trimmed = text.trim();
  if (trimmed.startsWith('{')) return fromJson(JSON.parse(trimmed) as unknown, name, outputs);
  const env: EnvMap = {};
  for (const [index, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const match = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
    if (match === null) throw new Error(`${name}:${index + 1}: expected NAME=value`);
    env[match[1]!] = unquote(match[2]!);
  }
  return env;
}

function fromJson(value: unknown, name: string, preference: EnvOutputPreference): EnvMap {
  if (!isRecord(value)) throw new Error(`${name}: expected a JSON object`);
  const entries = Object.entries(value);
  if (entries.every(([, item]) => typeof item === 'string')) return value as EnvMap;
  // `cdk deploy --outputs-file`: { "<stack name>": { "<output>": "<value>", ... } }
  const stacks = entries.flatMap(([, item]) =>
    isRecord(item) && preference.some((output) => typeof item[output] === 'string') ? [item] : [],
  );
  if (stacks.length !== 1) {
    throw new Error(
      `${name}: neither a flat map of variables nor CDK outputs with one stack's ${preference.join(' or ')} output`,
    );
  }
  const outputs = stacks[0]!;
  const output = preference.find((candidate) => typeof outputs[candidate] === 'string')!;
  return fromJson(JSON.parse(outputs[output] as string) as unknown, `${name} (${output})`, preference);
}

/** Where a tool's variables came from, and what they are (empty when the environment had them). */
export interface ResolvedEnvironment {
  readonly source: string;
  readonly variables: EnvMap;
  /** They are a running `npm start`'s (its env file names its writer). */
  readonly localStack: boolean;
}

export interface ResolveOptions {
  /** `--env-file`, when given: it wins. */
  readonly envFile: string | undefined;
  readonly env: Readonly<Record<string, string | undefined>>;
  /** A variable whose presence in `env` means the environment is already set up. */
  readonly readyVariable: string;
  /** What to set when nothing is found, for the error message. */
  readonly needs: string;
  readonly outputs?: EnvOutputPreference;
  readonly localEnvFile?: string;
}

/** A tool's variables, in order of precedence: `--env-file`, the environment, a running `npm start`'s file. */
export function resolveEnvironment(options: ResolveOptions): ResolvedEnvironment {
  const { envFile, env, outputs = OPERATOR_ENV_OUTPUTS, localEnvFile = LOCAL_ENV_FILE } = options;
  if (envFile !== undefined) {
    const variables = readEnvFile(envFile, outputs);
    return { source: envFile, variables, localStack: variables[WRITER_PID_VARIABLE] !== undefined };
  }
  if (env[options.readyVariable] !== undefined) {
    return { source: 'environment', variables: {}, localStack: env[WRITER_PID_VARIABLE] !== undefined };
  }
  if (existsSync(localEnvFile)) {
    const variables = readEnvFile(localEnvFile, outputs);
    const pid = Number(variables[WRITER_PID_VARIABLE]);
    if (Number.isInteger(pid) && !isAlive(pid)) {
      throw new Error(
        `${localEnvFile} was written by an 'npm start' that is no longer running (pid ${pid}); start it again or pass --env-file`,
      );
    }
    return { source: localEnvFile, variables, localStack: true };
  }
  throw new Error(
    `nowhere to connect to: run 'npm start' (it writes ${localEnvFile}), pass --env-file FILE, or set ${options.needs}`,
  );
}

/** The pid of a still-running process that wrote `file`, if any (a stale or absent file: undefined). */
export function runningWriter(file: string): number | undefined {
  if (!existsSync(file)) return undefined;
  try {
    const pid = Number(parseEnvFile(readFileSync(file, 'utf8'))[WRITER_PID_VARIABLE]);
    return Number.isInteger(pid) && pid !== process.pid && isAlive(pid) ? pid : undefined;
  } catch {
    return undefined;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: alive, owned by someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function unquote(value: string): string {
  const quoted = /^(['"])(.*)\1$/.exec(value);
  return quoted === null ? value : quoted[2]!;
}
