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
