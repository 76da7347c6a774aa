import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  createApiKey,
  createOperatorKey,
  operatorForKey,
  revokeApiKey,
  tenantForApiKey,
} from '../shared/repositories/api-keys.js';
import { writeLocalEnvFile } from './env-file.js';
import type { ReadyContext, ReadyHook } from './on-ready.js';

/**
 * API keys: the `npm start` hooks that print a development key and an operator key. From the command
 * line, keys are made by the operator CLI (`npm run keys -- ...` is `tinker-serverless keys ...`, see
 * cli.ts), which finds the system as every operator command does:
 *   npm run keys -- create --tenant NAME     prints a new tenant key, tml-... (shown once; only its hash is stored)
 *   npm run keys -- create --operator NAME   prints a new operator key, tso-..., for the status page's data
 *   npm run keys -- revoke KEY               either kind
 */
export { createApiKey, createOperatorKey, revokeApiKey };

export const DEV_TENANT = 'dev';

/** A persistent stack's development keys, beside its data, so a restart prints the same ones. */
const DEV_KEYS_FILE = 'dev-keys.json';

type DevKeyName = 'tenant' | 'operator';

/**
 * The development key kept in the data directory while it still authenticates (not revoked, its
 * record kept), else a new one, which is kept from then on. A throwaway stack mints one every start.
 */
async function developmentKey(
  { dataDir }: ReadyContext,
  name: DevKeyName,
  owner: (key: string) => Promise<string | undefined>,
  create: () => Promise<string>,
): Promise<string> {
  if (dataDir === undefined) return create();
  const file = join(dataDir, DEV_KEYS_FILE);
  const kept: Partial<Record<DevKeyName, string>> = existsSync(file)
    ? (JSON.parse(readFileSync(file, 'utf8')) as Partial<Record<DevKeyName, string>>)
    : {};
  const previous = kept[name];
  if (previous !== undefined && (await owner(previous)) !== undefined) return previous;
  const key = await create();
  // Private like the env file: these keys open the local stack.
  writeLocalEnvFile({ ...kept, [name]: key }, file, false);
  return key;
}

/** `npm start` hook: a key for the `dev` tenant (kept across restarts), on a line of its own. */
export const printDevelopmentApiKey: ReadyHook = async (context) => {
  const key = await developmentKey(
    context,
    'tenant',
    (candidate) => tenantForApiKey(candidate, context.clients.doc),
    () => createApiKey(DEV_TENANT, context.clients),
  );
  return [`Development API key (tenant "${DEV_TENANT}"; export TINKER_API_KEY=...):`, key];
};

export const DEV_OPERATOR = 'dev-operator';

/**
 * `npm start` hook: an operator key for the API's own status page (`<API URL>/status`, served as
 * deployed, whose data needs an operator key), printed on a line of its own after the page's URL.
 */
export const printOperatorKey: ReadyHook = async (context) => {
  const key = await developmentKey(
    context,
    'operator',
    (candidate) => operatorForKey(candidate, context.clients.doc),
    () => createOperatorKey(DEV_OPERATOR, context.clients),
  );
  const { apiUrl } = context;
  return [
    'Status page as the deployed API serves it (paste this operator key into it once):',
    `${apiUrl}/status`,
    key,
  ];
};
