import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';

// Placeholder until the worker runtime lands.
export async function handler(_event: SQSEvent): Promise<SQSBatchResponse> {
  return { batchItemFailures: [] };
}
