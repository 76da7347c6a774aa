import type { DynamoDBBatchResponse, DynamoDBStreamEvent } from 'aws-lambda';

// Placeholder until the scheduler lands.
export async function handler(
  _event: DynamoDBStreamEvent | Record<string, unknown>,
): Promise<DynamoDBBatchResponse> {
  return { batchItemFailures: [] };
}
