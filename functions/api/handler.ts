import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';

// Placeholder until the Futures API lands: answers health checks so the trigger plumbing can be tested.
export async function handler(event: APIGatewayProxyEventV2): Promise<APIGatewayProxyStructuredResultV2> {
  if (event.rawPath === '/healthz') return { statusCode: 200, body: JSON.stringify({ status: 'ok' }) };
  return { statusCode: 404, body: JSON.stringify({ error: `no route for ${event.rawPath}` }) };
}
