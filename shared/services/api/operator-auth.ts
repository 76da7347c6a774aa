import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { Tunables } from '../../base/config.js';
import { logger } from '../../base/logger.js';
import { keyKind } from '../../repositories/api-keys.js';
import { operatorOfKey, tenantOfKey } from './authenticate.js';

/**
 * Who may read the operator views (the status page's data): holders of an operator key (`tso-...`,
 * `tinker-serverless keys create --operator NAME`), sent as `X-API-Key` like tenant keys. Every
 * refusal says what is wrong: 401 when no valid key was sent, 403 when a valid tenant key was (it
 * authenticates, but the views span every tenant).
 */

export type OperatorCheck =
  | { readonly ok: true; readonly operator: string }
  | { readonly ok: false; readonly status: 401 | 403; readonly error: string };

const HOW_TO_GET_ONE = 'create one with: npx tinker-serverless keys create --operator NAME';

function refuse(status: 401 | 403, error: string, reason: string, tenant?: string): OperatorCheck {
  // The reason and the tenant, never the key.
  logger.warn('operator view refused', { status, reason, ...(tenant === undefined ? {} : { tenant }) });
  return { ok: false, status, error };
}

export async function checkOperatorKey(
  doc: DynamoDBDocumentClient,
  table: string,
  apiKey: string | undefined,
  tunables: Pick<Tunables, 'apiKeyCacheSeconds'>,
): Promise<OperatorCheck> {
  if (apiKey === undefined || apiKey === '') {
    return refuse(
      401,
      `missing X-API-Key header: the queue status spans every tenant and needs an operator key (${HOW_TO_GET_ONE})`,
      'missing',
    );
  }
  switch (keyKind(apiKey)) {
    case 'operator': {
      const operator = await operatorOfKey(doc, table, apiKey, tunables);
      if (operator === undefined)
        return refuse(401, 'invalid or revoked operator key', 'unknown-operator-key');
      return { ok: true, operator };
    }
    case 'tenant': {
      const tenant = await tenantOfKey(doc, table, apiKey, tunables);
      if (tenant === undefined) {
        return refuse(
          401,
          'invalid or revoked API key; the queue status needs an operator key (tso-...)',
          'unknown-tenant-key',
        );
      }
      return refuse(
        403,
        'this is a tenant API key: the queue status spans every tenant and needs an operator key (tso-...)',
        'tenant-key',
        tenant,
      );
    }
    default:
      return refuse(
        401,
        'X-API-Key is not an API key: operator keys look like tso- followed by 43 characters',
        'malformed',
      );
  }
}
