import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { awsClients } from '../aws/clients.js';
import { getItem } from '../aws/get-item.js';
import { config } from '../config.js';

/** One registry item by key. Strongly consistent unless asked otherwise. */
export function readRegistryItem<T>(
  pk: string,
  doc: DynamoDBDocumentClient = awsClients().doc,
  consistent = true,
): Promise<T | undefined> {
  return getItem<T>(doc, config().table('registry'), { pk }, consistent);
}
