import type { TestProject } from 'vitest/node';
import { configuredEndpoint, probeLocalStack } from './endpoint.js';

/** Hands LocalStack's single endpoint to the suites as their "local cloud" (see test/support/cloud.ts). */
export default async function setup(project: TestProject): Promise<void> {
  const endpoint = configuredEndpoint(process.env);
  if (endpoint === undefined)
    throw new Error('LOCALSTACK_ENDPOINT (or AWS_ENDPOINT_URL) must name LocalStack');
  const probe = await probeLocalStack(endpoint);
  if (!probe.ok) throw new Error(`LocalStack does not answer: ${probe.reason}`);
  project.provide('localCloud', { dynamodb: endpoint, s3: endpoint, sqs: endpoint });
}
