import { type DynamoDBDocumentClient, GetCommand } from '@aws-sdk/lib-dynamodb';

/**
 * One item by key, strongly consistent unless asked otherwise; undefined when absent. `attributes`
 * reads only those (each named through a placeholder, so reserved words such as `status` are fine).
 */
export async function getItem<T>(
  doc: DynamoDBDocumentClient,
  table: string,
  key: Readonly<Record<string, string>>,
  consistent = true,
  attributes?: readonly string[],
): Promise<T | undefined> {
  const projection =
    attributes === undefined
      ? {}
      : {
          ProjectionExpression: attributes.map((_, index) => `#a${index}`).join(', '),
          ExpressionAttributeNames: Object.fromEntries(attributes.map((name, index) => [`#a${index}`, name])),
        };
  const answer = await doc.send(
    new GetCommand({ TableName: table, Key: key, ConsistentRead: consistent, ...projection }),
  );
  return answer.Item as T | undefined;
}
