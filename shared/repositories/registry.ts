import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { getItem } from '../aws/get-item.js';

/** One registry item by key. Strongly consistent unless asked otherwise. */
export function readRegistryItem<T>(
  doc: DynamoDBDocumentClient,
  table: string,
  pk: string,
  consistent = true,
): Promise<T | undefined> {
  return getItem<T>(doc, table, { pk }, consistent);
}

/**
 * The tenant's registry item at `pk`; `notFound()` is thrown when there is none or it is another
 * tenant's (the two look the same, a 404).
 */
export async function requireOwnItem<T extends { readonly tenant: string }>(
  doc: DynamoDBDocumentClient,
  table: string,
  pk: string,
  tenant: string,
  notFound: () => Error,
): Promise<T> {
  const record = await readRegistryItem<T>(doc, table, pk);
  if (record === undefined || record.tenant !== tenant) throw notFound();
  return record;
}
