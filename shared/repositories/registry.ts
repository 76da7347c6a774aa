import { type DynamoDBDocumentClient, GetCommand } from '@aws-sdk/lib-dynamodb';
import { awsClients } from '../aws/clients.js';
import { config } from '../config.js';

/** One registry item by key. Strongly consistent unless asked otherwise. */
export async function readRegistryItem<T>(
  pk: string,
  doc: DynamoDBDocumentClient = awsClients().doc,
  consistent = true,
): Promise<T | undefined> {
  const answer = await doc.send(
    new GetCommand({ TableName: config().table('registry'), Key: { pk }, ConsistentRead: consistent }),
  );
  return answer.Item as T | undefined;
}
