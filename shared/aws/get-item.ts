import { type DynamoDBDocumentClient, GetCommand } from '@aws-sdk/lib-dynamodb';

/** One item by key, strongly consistent unless asked otherwise; undefined when absent. */
export async function getItem<T>(
  doc: DynamoDBDocumentClient,
  table: string,
  key: Readonly<Record<string, string>>,
  consistent = true,
): Promise<T | undefined> {
  const answer = await doc.send(new GetCommand({ TableName: table, Key: key, ConsistentRead: consistent }));
  return answer.Item as T | undefined;
}
