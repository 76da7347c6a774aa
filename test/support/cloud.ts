import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import type { CloudEndpoints } from '../../local/cloud/cloud.js';
import { envFor, type ProvisionedResources, provisionResources } from '../../local/cloud/resources.js';
import { type AwsClients, resetAwsClients } from '../../shared/aws/clients.js';
import { resetConfig } from '../../shared/base/config.js';
import { topology } from '../../shared/base/topology.js';
import type { ApiDeps } from '../../shared/services/api/deps.js';

export interface TestCloud {
  /** Unique per call; every table, the bucket and the queues are named `<prefix>-<name>`. */
  readonly prefix: string;
  readonly endpoints: CloudEndpoints;
  /** Variables a function gets (resource names, settings, endpoints, region, dummy credentials). */
  readonly env: Record<string, string>;
  readonly names: ProvisionedResources;
  /** Writes `env` into process.env and drops the cached config and SDK clients. */
  applyEnv(): void;
  /** Clients bound to this cloud by explicit endpoints (they do not depend on process.env). */
  readonly clients: AwsClients;
}

/** What the API's edge resolves from this cloud's environment, for tests that call operations directly. */
export function apiDeps(cloud: Pick<TestCloud, 'clients' | 'names'>): ApiDeps {
  return { clients: cloud.clients, tables: cloud.names.tables, bucket: cloud.names.bucket };
}

/** The endpoints the `cloud` project's globalSetup provided. */
export function testCloudEndpoints(): CloudEndpoints {
  const endpoints = inject('localCloud');
  if (endpoints === undefined) {
    throw new Error(
      'No local cloud in this run: cloud tests belong under test/integration or test/e2e, whose vitest ' +
        'project starts one in globalSetup (test/support/global-setup.ts).',
    );
  }
  return endpoints;
}

/** A short, lowercase, unique prefix (bucket names allow only [a-z0-9-]). */
function uniquePrefix(): string {
  return `t${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
}

/** Provisions a fresh set of the topology's resources on the shared local cloud. Call in `beforeAll`. */
export async function setupTestCloud(): Promise<TestCloud> {
  const endpoints = testCloudEndpoints();
  const prefix = uniquePrefix();
  const clients = localAwsClients(endpoints);
  const names = await provisionResources(topology, prefix, clients);
  const env = { ...envFor(topology, names, endpoints), POWERTOOLS_LOG_LEVEL: 'WARN' };
  return {
    prefix,
    endpoints,
    env,
    names,
    clients,
    applyEnv: () => {
      Object.assign(process.env, env);
      resetConfig();
      resetAwsClients();
    },
  };
}
