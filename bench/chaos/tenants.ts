import type { AwsClients } from '../../shared/aws/clients.js';
import { FutureFailedError, type TinkerClient } from '../../shared/client/tinker-client.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import { TenantDriver } from '../../test/support/tenant-driver.js';
import type { WorkerHarness } from '../../test/support/worker-harness.js';
import type { TenantScript } from '../../test/support/workload.js';
import { chaosClient, type RetryStats, type SubmitGate } from './client.js';
import type { OracleRecord } from './equivalence.js';

/**
 * The tenants, each the end-to-end suite's TenantDriver over HTTP with an SDK-like retrying client,
 * all at once. A client error is a violation, except one the system's E2 allows: a sample that waits
 * for its sampler checkpoint sees that save end with a server error (a model's attempts exhausted),
 * so, as with the SDK, that sample is never submitted.
 */

export interface TenantsOutcome {
  readonly drivers: readonly TenantDriver[];
  /** Samples not submitted because the save they wait for failed under E2. */
  readonly skipped: number;
  readonly errors: readonly string[];
  readonly retries: RetryStats;
}

const E2_FAILURE = /^Request failed after \d+ attempts$/;

export async function runTenants(input: {
  readonly scripts: readonly TenantScript[];
  readonly apiUrl: string;
  readonly admin: AwsClients;
  readonly registryTable: string;
  readonly record: OracleRecord;
  readonly gate?: SubmitGate;
  readonly onError?: (line: string) => void;
}): Promise<TenantsOutcome> {
  const retries: RetryStats = { retried: {} };
  const drivers = await Promise.all(
    input.scripts.map(async (script) => {
      const client = chaosClient(
        input.apiUrl,
        await createApiKey(input.admin.doc, input.registryTable, script.tenant),
        retries,
        input.gate,
      );
      return new TenantDriver(script, client, input.record as unknown as WorkerHarness);
    }),
  );
  let skipped = 0;
  const errors: string[] = [];
  await Promise.all(
    drivers.map((driver) =>
      driver.run().catch((error: unknown) => {
        if (error instanceof FutureFailedError && error.category === 'server') {
          const message = error.message.slice(error.message.indexOf('): ') + 3);
          if (E2_FAILURE.test(message)) {
            skipped++;
            return;
          }
        }
        const line = `${driver.tenant}: ${error instanceof Error ? error.message : String(error)}`;
        errors.push(line);
        input.onError?.(line);
      }),
    ),
  );
  return { drivers, skipped, errors, retries };
}

/** The tenant client that submitted each request. */
export function clientsByRequest(drivers: readonly TenantDriver[]): (requestId: string) => TinkerClient {
  const byRequest = new Map<string, TinkerClient>();
  for (const driver of drivers) for (const id of driver.requestIds) byRequest.set(id, driver.client);
  return (requestId) => {
    const client = byRequest.get(requestId);
    if (client === undefined) throw new Error(`no tenant client submitted ${requestId}`);
    return client;
  };
}
