import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { STACK_ENV_OUTPUTS } from '../shared/stack-outputs.js';

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

const PROJECT_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export const LOCAL_ENV_FILE = path.join(PROJECT_ROOT, '.local', 'env.json');

/** Names the process that wrote the file, so a reader can tell a stale file from a running stack. */
export const WRITER_PID_VARIABLE = 'TINKER_LOCAL_PID';

/** Stack outputs holding a JSON map of variables, the operator's first. */
const ENV_OUTPUTS = [STACK_ENV_OUTPUTS.operator, STACK_ENV_OUTPUTS.worker] as const;

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

export function readEnvFile(file: string): EnvMap {
  return parseEnvFile(readFileSync(file, 'utf8'), file);
}

export function parseEnvFile(text: string, name = 'env file'): EnvMap {
  const trimmed = text.trim();
  if (trimmed.startsWith('{')) return fromJson(JSON.parse(trimmed) as unknown, name);
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

function fromJson(value: unknown, name: string): EnvMap {
  if (!isRecord(value)) throw new Error(`${name}: expected a JSON object`);
  const entries = Object.entries(value);
  if (entries.every(([, item]) => typeof item === 'string')) return value as EnvMap;
  // `cdk deploy --outputs-file`: { "<stack name>": { "<output>": "<value>", ... } }
  const stacks = entries.flatMap(([, item]) =>
    isRecord(item) && ENV_OUTPUTS.some((output) => typeof item[output] === 'string') ? [item] : [],
  );
  if (stacks.length !== 1) {
    throw new Error(
      `${name}: neither a flat map of variables nor CDK outputs with one stack's ${ENV_OUTPUTS.join(' or ')} output`,
    );
  }
  const outputs = stacks[0]!;
  const output = ENV_OUTPUTS.find((candidate) => typeof outputs[candidate] === 'string')!;
  return fromJson(JSON.parse(outputs[output] as string) as unknown, `${name} (${output})`);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function unquote(value: string): string {
  const quoted = /^(['"])(.*)\1$/.exec(value);
  return quoted === null ? value : quoted[2]!;
}
