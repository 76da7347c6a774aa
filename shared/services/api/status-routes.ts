import type { AwsClients } from '../../aws/clients.js';
import type { Config } from '../../base/config.js';
import { logger } from '../../base/logger.js';
import { readPoolStatus } from '../ops/status-reader.js';
import {
  handleStatusPageRequest,
  loadStatusPageAssets,
  type StatusPageAssets,
  type StatusPageResponse,
} from '../status-page/page.js';
import { checkOperatorKey } from './operator-auth.js';
import { checkOperatorReadQuota } from './quotas.js';

/**
 * The status page behind the API: `GET /status` (the page, no data, no key needed), its assets, and
 * `GET /status/data`, the same per-pool, per-model picture as `tinker-serverless status`, for
 * operator keys only (shared/services/api/operator-auth.ts). The pool is the deployment's (`POOL`).
 */

let assets: StatusPageAssets | undefined;

export interface StatusRouteContext {
  readonly method: string;
  /** Below `/status` (see `statusPageSubpath`). */
  readonly subpath: string;
  readonly apiKey: string | undefined;
  readonly clients: AwsClients;
  /** The api's configuration, read at its edge (`handleApiRequest`): the registry table, the tunables, the status read's names. */
  readonly config: Config;
  readonly now?: () => number;
}

export function handleStatusRoute(context: StatusRouteContext): Promise<StatusPageResponse> {
  // Read once per container: the files ship beside the bundle (topology `bundledAssets`).
  assets ??= loadStatusPageAssets();
  const { clients, config } = context;
  return handleStatusPageRequest(context.method, context.subpath, {
    assets,
    guard: async () => {
      const registry = config.table('registry');
      const check = await checkOperatorKey(clients.doc, registry, context.apiKey, config.tunables);
      if (check.ok) {
        // Counted only once the key is valid: unauthenticated requests never use the operators' budget.
        await checkOperatorReadQuota(clients.doc, registry, config.tunables, context.now?.() ?? Date.now());
        logger.debug('status data read', { operator: check.operator });
        return undefined;
      }
      return { status: check.status, error: check.error };
    },
    readStatus: async () => {
      try {
        return await readPoolStatus({ clients, config, ...(context.now ? { now: context.now } : {}) });
      } catch (error) {
        logger.error('status read failed', {
          error: error instanceof Error ? error.name : typeof error,
          detail: error instanceof Error ? error.message : undefined,
        });
        throw error;
      }
    },
  });
}
