import { createApiKey, createOperatorKey, revokeApiKey } from '../shared/repositories/api-keys.js';
import type { ReadyHook } from './on-ready.js';

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
