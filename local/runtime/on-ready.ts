import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AwsClients } from '../../shared/aws/clients.js';
import { writeLocalEnvFile } from '../../shared/base/env-file.js';
import {
  createApiKey,
  createOperatorKey,
  operatorForKey,
  tenantForApiKey,
} from '../../shared/repositories/api-keys.js';
import type { ProvisionedResources } from '../cloud/resources.js';

/** What `npm start` knows once the local stack is up. process.env already points at the local cloud. */
export interface ReadyContext {
  readonly apiUrl: string;
  readonly env: Readonly<Record<string, string>>;
  readonly resources: ProvisionedResources;
  readonly clients: AwsClients;
  /** Where a persistent stack keeps its data (undefined for a throwaway one). */
  readonly dataDir?: string;
}

/** A start-up step that runs after everything is up; it returns lines to print for the developer. */
export type ReadyHook = (context: ReadyContext) => Promise<readonly string[]>;

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

/** A key for the `dev` tenant (kept across restarts), on a line of its own. */
export const printDevelopmentApiKey: ReadyHook = async (context) => {
  const key = await developmentKey(
    context,
    'tenant',
    (candidate) => tenantForApiKey(context.clients.doc, context.resources.tables.registry, candidate),
    () => createApiKey(context.clients.doc, context.resources.tables.registry, DEV_TENANT),
  );
  return [`Development API key (tenant "${DEV_TENANT}"; export TINKER_API_KEY=...):`, key];
};

export const DEV_OPERATOR = 'dev-operator';

/**
 * An operator key for the API's own status page (`<API URL>/status`, served as
 * deployed, whose data needs an operator key), printed on a line of its own after the page's URL.
 */
export const printOperatorKey: ReadyHook = async (context) => {
  const key = await developmentKey(
    context,
    'operator',
    (candidate) => operatorForKey(context.clients.doc, context.resources.tables.registry, candidate),
    () => createOperatorKey(context.clients.doc, context.resources.tables.registry, DEV_OPERATOR),
  );
  const { apiUrl } = context;
  return [
    'Status page as the deployed API serves it (paste this operator key into it once):',
    `${apiUrl}/status`,
    key,
  ];
};

/** Hooks `npm start` (local/runtime/start.ts) runs, in order, once the stack is up. */
export const readyHooks: readonly ReadyHook[] = [printDevelopmentApiKey, printOperatorKey];
