import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createApiKey, createOperatorKey, revokeApiKey } from '../shared/repositories/api-keys.js';
import type { ReadyHook } from './on-ready.js';

/**
 * API keys from the command line, against whatever the environment points at (the local cloud's
 * env, or AWS with REGISTRY_TABLE set):
 *   npm run keys -- create --tenant NAME     prints a new tenant key, tml-... (shown once; only its hash is stored)
 *   npm run keys -- create --operator NAME   prints a new operator key, tso-..., for the status page's data
 *   npm run keys -- revoke KEY               either kind
 */
export { createApiKey, createOperatorKey, revokeApiKey };

export const DEV_TENANT = 'dev';

/** `npm start` hook: creates a key for the `dev` tenant and prints it on a line of its own. */
export const printDevelopmentApiKey: ReadyHook = async ({ clients }) => {
  const key = await createApiKey(DEV_TENANT, clients);
  return [`Development API key (tenant "${DEV_TENANT}"; export TINKER_API_KEY=...):`, key];
};

export const DEV_OPERATOR = 'dev-operator';

/**
 * `npm start` hook: an operator key for the API's own status page (`<API URL>/status`, served as
 * deployed, whose data needs an operator key), printed on a line of its own after the page's URL.
 */
export const printOperatorKey: ReadyHook = async ({ apiUrl, clients }) => {
  const key = await createOperatorKey(DEV_OPERATOR, clients);
  return [
    'Status page as the deployed API serves it (paste this operator key into it once):',
    `${apiUrl}/status`,
    key,
  ];
};

const USAGE =
  'usage: npm run keys -- create --tenant NAME | npm run keys -- create --operator NAME | npm run keys -- revoke KEY';

async function main(args: readonly string[]): Promise<number> {
  const [command, ...rest] = args;
  if (command === 'create') {
    const [flag, owner, ...extra] = rest;
    if (owner === undefined || extra.length > 0 || (flag !== '--tenant' && flag !== '--operator')) {
      process.stderr.write(`${USAGE}\n`);
      return 2;
    }
    const key = flag === '--tenant' ? await createApiKey(owner) : await createOperatorKey(owner);
    process.stdout.write(`${key}\n`);
    return 0;
  }
  if (command === 'revoke' && rest[0] !== undefined) {
    const found = await revokeApiKey(rest[0]);
    process.stdout.write(found ? 'revoked\n' : 'no such key\n');
    return found ? 0 : 1;
  }
  process.stderr.write(`${USAGE}\n`);
  return 2;
}

function isEntryPoint(): boolean {
  const entry = process.argv[1];
  return entry !== undefined && realpathSync(entry) === realpathSync(fileURLToPath(import.meta.url));
}

if (isEntryPoint()) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: unknown) => {
      process.stderr.write(`keys: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exit(1);
    },
  );
}
