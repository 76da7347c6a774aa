import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import type { AwsClients } from '../../shared/aws/clients.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import type { LoadTarget } from './driver.js';

/** A local stack (or a runtime over a test cloud) as the load driver's target. */
export function stackTarget(stack: {
  readonly apiUrl: string;
  readonly clients: AwsClients;
  readonly futuresTable: string;
  readonly registryTable: string;
  readonly jvmPid?: number;
}): LoadTarget {
  return {
    apiUrl: stack.apiUrl,
    newApiKey: (tenant) => createApiKey(stack.clients.doc, stack.registryTable, tenant),
    pendingFutures: () => pendingFutureCount(stack.clients, stack.futuresTable),
    jvmPid: stack.jvmPid,
  };
}

/** Futures rows still `pending`, by a strongly consistent scan of the whole table (after a run only). */
export async function pendingFutureCount(clients: Pick<AwsClients, 'doc'>, table: string): Promise<number> {
  let count = 0;
  let startKey: Record<string, unknown> | undefined;
  do {
    const page = await clients.doc.send(
      new ScanCommand({
        TableName: table,
        ConsistentRead: true,
        Select: 'COUNT',
        FilterExpression: '#status = :pending',
        ExpressionAttributeNames: { '#status': 'status' },
        ExpressionAttributeValues: { ':pending': 'pending' },
        ExclusiveStartKey: startKey,
      }),
    );
    count += page.Count ?? 0;
    startKey = page.LastEvaluatedKey;
  } while (startKey !== undefined);
  return count;
}
