import type { AwsClients } from '../shared/aws/clients.js';
import { printDevelopmentApiKey, printOperatorKey } from './keys.js';
import type { ProvisionedResources } from './resources.js';

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

/** Hooks `npm start` (local/start.ts) runs, in order, once the stack is up. */
export const readyHooks: readonly ReadyHook[] = [printDevelopmentApiKey, printOperatorKey];
