import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import { handleApiRequest } from '../../shared/api/router.js';

/** API Gateway HTTP API (payload v2) -> the API edge -> JSON answer (or the status page's own). */
export async function handler(
  event: APIGatewayProxyEventV2,
  context?: Pick<Context, 'getRemainingTimeInMillis'>,
): Promise<APIGatewayProxyStructuredResultV2> {
  const body =
    event.body === undefined
      ? undefined
      : event.isBase64Encoded
        ? Buffer.from(event.body, 'base64').toString('utf8')
        : event.body;
  const response = await handleApiRequest({
    method: event.requestContext.http.method,
    path: event.rawPath,
    headers: event.headers ?? {},
    ...(body === undefined ? {} : { body }),
    ...(context ? { remainingMs: context.getRemainingTimeInMillis() } : {}),
  });
  if ('raw' in response) {
    return { statusCode: response.status, headers: { ...response.headers }, body: response.raw };
  }
  return {
    statusCode: response.status,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(response.body),
  };
}
