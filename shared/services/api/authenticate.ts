import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { Tunables } from '../../base/config.js';
import {
  apiKeyHash,
  type KeyKind,
  keyKind,
  operatorForKey,
  tenantForApiKey,
} from '../../repositories/api-keys.js';
import { KeyCache } from './key-cache.js';

/**
 * Who a key is, as the API's edge asks it: through this container's `KeyCache` for
 * API_KEY_CACHE_SECONDS (a Lambda container serves one request at a time, so the cache is the
 * container's). Keyed by the registry table and the key's hash: the key itself is never held.
 */
const keys = new KeyCache();

type CacheTunables = Pick<Tunables, 'apiKeyCacheSeconds'>;

function cached(
  kind: KeyKind,
  table: string,
  key: string,
  tunables: CacheTunables,
  read: () => Promise<string | undefined>,
): Promise<string | undefined> {
  // A malformed key or one of the other kind is refused without a read, and never kept.
  if (keyKind(key) !== kind) return Promise.resolve(undefined);
  return keys.lookup(
    `${table}\u0000${kind}\u0000${apiKeyHash(key)}`,
    tunables.apiKeyCacheSeconds * 1000,
    read,
  );
}

/** The tenant of a live tenant key (`tml-...`); undefined for anything else. */
export function tenantOfKey(
  doc: DynamoDBDocumentClient,
  table: string,
  key: string,
  tunables: CacheTunables,
): Promise<string | undefined> {
  return cached('tenant', table, key, tunables, () => tenantForApiKey(doc, table, key));
}

/** The operator holding a live operator key (`tso-...`); undefined for anything else. */
export function operatorOfKey(
  doc: DynamoDBDocumentClient,
  table: string,
  key: string,
  tunables: CacheTunables,
): Promise<string | undefined> {
  return cached('operator', table, key, tunables, () => operatorForKey(doc, table, key));
}
