import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { observedHandler } from '../../shared/aws/lambda-handler.js';
import { handleApiRequest } from '../../shared/services/api/router.js';

/**
 * API Gateway HTTP API (payload v2) -> the API edge -> its answer. Bodies stay bytes both ways (W3):
 * a binary request arrives base64-encoded and is decoded to bytes, never to text; a binary answer
 * (a protobuf result) goes back base64-encoded with `isBase64Encoded`.
 */
async function handleHttpEvent(
  event: APIGatewayProxyEventV2,
  context?: Pick<Context, 'getRemainingTimeInMillis'>,
): Promise<APIGatewayProxyStructuredResultV2> {
  const body =
    event.body === undefined ? undefined : Buffer.from(event.body, event.isBase64Encoded ? 'base64' : 'utf8');
  const response = await handleApiRequest({
    method: event.requestContext.http.method,
    path: event.rawPath,
    ...(event.rawQueryString ? { query: event.rawQueryString } : {}),
    headers: event.headers ?? {},
    ...(body === undefined ? {} : { body }),
    ...(context ? { remainingMs: context.getRemainingTimeInMillis() } : {}),
  });
  if ('raw' in response) {
    if (typeof response.raw === 'string') {
      return { statusCode: response.status, headers: { ...response.headers }, body: response.raw };
    }
    return {
      statusCode: response.status,
      headers: { ...response.headers },
      body: Buffer.from(response.raw).toString('base64'),
      isBase64Encoded: true,
    };
  }
  return {
    statusCode: response.status,
    headers: { ...response.headers, 'content-type': 'application/json' },
    body: JSON.stringify(response.body),
  };
}

export const handler = observedHandler('api', handleHttpEvent);
