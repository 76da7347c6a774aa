import {
  type Action,
  countFutures,
  generateWorkload,
  type TenantScript,
} from '../../test/support/workload.js';

/**
 * The chaos run's workload: the end-to-end suite's seeded multi-tenant scripts (creates, passes,
 * optimizer steps, saves, sampler saves, loads, samples, resends and conflicting resubmits), sized
 * to at least `requests` futures, each model's script ending with a save of its final weights, so
 * the final weights are compared with the sequential oracle's too.
 */

export interface ChaosWorkload {
  readonly scripts: readonly TenantScript[];
  /** Futures the scripts create (every accepted request). */
  readonly futures: number;
  readonly tenants: number;
  readonly models: number;
}

/** Several tenants with several models each; more tenants for larger runs (they submit concurrently). */
function tenantShape(requests: number): number[] {
  const tenants = Math.max(3, Math.min(10, Math.round(requests / 220)));
  return Array.from({ length: tenants }, (_, tenant) => 2 + (tenant % 2));
}

export function finalCheckpointName(model: number): string {
  return `final-${model}`;
}

function withFinalSaves(scripts: readonly TenantScript[]): TenantScript[] {
  return scripts.map((script) => ({
    ...script,
    actions: [
      ...script.actions,
      ...script.models.map((model): Action => ({ kind: 'save', model, name: finalCheckpointName(model) })),
    ],
  }));
}

export function chaosWorkload(requests: number, seed: number): ChaosWorkload {
  const modelsPerTenant = tenantShape(requests);
  const models = modelsPerTenant.reduce((sum, count) => sum + count, 0);
  // About 8% of actions (resends, conflicts) create no future; grow until the count is reached.
  let perTenant = Math.max(1, Math.ceil((requests - 2 * models) / 0.92 / modelsPerTenant.length));
  for (;;) {
    const scripts = withFinalSaves(
      generateWorkload({
        seed,
        modelsPerTenant,
        actionsPerTenant: modelsPerTenant.map(() => perTenant),
      }),
    );
    const futures = countFutures(scripts);
    if (futures >= requests) return { scripts, futures, tenants: modelsPerTenant.length, models };
    perTenant += Math.max(1, Math.ceil((requests - futures) / modelsPerTenant.length));
  }
}
