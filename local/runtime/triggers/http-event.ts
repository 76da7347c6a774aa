import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';

/** What the HTTP server read from one request. */
export interface RawHttpRequest {
  readonly method: string;
  /** Path and query as sent, e.g. `/api/v1/x?a=1`. */
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
  readonly sourceIp: string;
}

export interface HttpReply {
  readonly statusCode: number;
  readonly headers: Record<string, string>;
  readonly cookies: readonly string[];
  readonly body: Buffer;
}

// API Gateway HTTP APIs pass these bodies as text; anything else (and any body with a
// Content-Encoding, such as the SDK's zstd) arrives base64-encoded.
const TEXT_CONTENT =
  /^(text\/|application\/(json|xml|javascript|x-www-form-urlencoded)\b|[^;]*\+(json|xml)\b)/i;

export function isTextContent(contentType: string | undefined): boolean {
  return contentType !== undefined && TEXT_CONTENT.test(contentType.trim());
}

/** Builds the payload-format-2.0 event API Gateway would hand the function for this request. */
export function toHttpApiEvent(request: RawHttpRequest, now: Date = new Date()): APIGatewayProxyEventV2 {
  const queryAt = request.url.indexOf('?');
  const rawPath = queryAt === -1 ? request.url : request.url.slice(0, queryAt);
  const rawQueryString = queryAt === -1 ? '' : request.url.slice(queryAt + 1);

  const headers: Record<string, string> = {};
  let cookies: string[] | undefined;
  for (const [name, value] of Object.entries(request.headers)) {
    if (value === undefined) continue;
    const lower = name.toLowerCase();
    if (lower === 'cookie') {
      cookies = (Array.isArray(value) ? value : [value])
        .flatMap((line) => line.split(/;\s*/))
        .filter(Boolean);
      continue;
    }
    headers[lower] = Array.isArray(value) ? value.join(',') : value;
  }

  const event: APIGatewayProxyEventV2 = {
    version: '2.0',
    routeKey: '$default',
    rawPath,
    rawQueryString,
    headers,
    requestContext: {
      accountId: '000000000000',
      apiId: 'local',
      domainName: headers.host ?? 'localhost',
      domainPrefix: (headers.host ?? 'localhost').split('.')[0] ?? 'localhost',
      http: {
        method: request.method.toUpperCase(),
        path: rawPath,
        protocol: 'HTTP/1.1',
        sourceIp: request.sourceIp,
        userAgent: headers['user-agent'] ?? '',
      },
      requestId: randomUUID(),
      routeKey: '$default',
      stage: '$default',
      time: now.toISOString(),
      timeEpoch: now.getTime(),
    },
    isBase64Encoded: false,
  };
  if (cookies !== undefined) event.cookies = cookies;
  const query = queryParameters(rawQueryString);
  if (query !== undefined) event.queryStringParameters = query;
  if (request.body.length > 0) {
    const encoded = headers['content-encoding'] !== undefined && headers['content-encoding'] !== 'identity';
    const text = isTextContent(headers['content-type']) && !encoded;
    event.body = text ? request.body.toString('utf8') : request.body.toString('base64');
    event.isBase64Encoded = !text;
  }
  return event;
}

/** Repeated parameters are joined with commas, as API Gateway does. */
function queryParameters(rawQueryString: string): Record<string, string> | undefined {
  if (rawQueryString === '') return undefined;
  const joined: Record<string, string> = {};
  for (const [key, value] of new URLSearchParams(rawQueryString)) {
    joined[key] = key in joined ? `${joined[key]},${value}` : value;
  }
  return joined;
}

/**
 * Interprets a handler's result as API Gateway does for format 2.0: a structured result is used as
 * given; anything else (a string, an object without statusCode) becomes a 200 JSON answer.
 */
export function toHttpReply(result: unknown): HttpReply {
  if (isStructuredResult(result)) {
    const body = result.body ?? '';
    return {
      statusCode: result.statusCode ?? 200,
      headers: Object.fromEntries(
        Object.entries(result.headers ?? {}).map(([name, value]) => [name.toLowerCase(), String(value)]),
      ),
      cookies: result.cookies ?? [],
      body: result.isBase64Encoded === true ? Buffer.from(body, 'base64') : Buffer.from(body, 'utf8'),
    };
  }
  const body = typeof result === 'string' ? result : (JSON.stringify(result) ?? '');
  return {
    statusCode: 200,
    headers: { 'content-type': 'application/json' },
    cookies: [],
    body: Buffer.from(body),
  };
}

function isStructuredResult(result: unknown): result is APIGatewayProxyStructuredResultV2 {
  return typeof result === 'object' && result !== null && 'statusCode' in result;
}

/** API Gateway's own answers when the integration fails. */
export const INTERNAL_ERROR_REPLY: HttpReply = jsonReply(500, { message: 'Internal Server Error' });
export const TIMEOUT_REPLY: HttpReply = jsonReply(503, { message: 'Service Unavailable' });
export const TOO_LARGE_REPLY: HttpReply = jsonReply(413, { message: 'Request Entity Too Large' });
export const NOT_FOUND_REPLY: HttpReply = jsonReply(404, { message: 'Not Found' });

function jsonReply(statusCode: number, body: unknown): HttpReply {
  return {
    statusCode,
    headers: { 'content-type': 'application/json' },
    cookies: [],
    body: Buffer.from(JSON.stringify(body)),
  };
}
