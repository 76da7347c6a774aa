import type { AwsClients } from '../shared/aws/clients.js';
import { createApiKey, createOperatorKey } from '../shared/repositories/api-keys.js';
import type { ProvisionedResources } from './resources.js';

/** What `npm start` knows once the local stack is up. process.env already points at the local cloud. */
export interface ReadyContext {
  readonly apiUrl: string;
  readonly env: Readonly<Record<string, string>>;
  readonly resources: ProvisionedResources;
  readonly clients: AwsClients;
}

/** A start-up step that runs after everything is up; it returns lines to print for the developer. */
export type ReadyHook = (context: ReadyContext) => Promise<readonly string[]>;

export const DEV_TENANT = 'dev';

/** Creates a key for the `dev` tenant and prints it on a line of its own. */
export const printDevelopmentApiKey: ReadyHook = async ({ clients }) => {
  const key = await createApiKey(DEV_TENANT, clients);
  return [`Development API key (tenant "${DEV_TENANT}"; export TINKER_API_KEY=...):`, key];
};

export const DEV_OPERATOR = 'dev-operator';

/**
 * An operator key for the API's own status page (`<API URL>/status`, served as deployed, whose data
 * needs an operator key), printed on a line of its own after the page's URL. Keys made from the
 * command line come from the operator CLI (`tinker-serverless keys`, bin/cli.ts).
 */
export const printOperatorKey: ReadyHook = async ({ apiUrl, clients }) => {
  const key = await createOperatorKey(DEV_OPERATOR, clients);
  return [
    'Status page as the deployed API serves it (paste this operator key into it once):',
    `${apiUrl}/status`,
    key,
  ];
};

/** Hooks `npm start` (local/start.ts) runs, in order, once the stack is up. */
export const readyHooks: readonly ReadyHook[] = [printDevelopmentApiKey, printOperatorKey];
