import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { logger } from '../../../shared/base/logger.js';
import type { FunctionId } from '../../../shared/base/topology.js';
import { type ListenPort, listenOn } from '../port-choice.js';
import {
  type HttpReply,
  INTERNAL_ERROR_REPLY,
  NOT_FOUND_REPLY,
  TIMEOUT_REPLY,
  TOO_LARGE_REPLY,
  toHttpApiEvent,
  toHttpReply,
} from './http-event.js';
import { InvocationTimeoutError, type Invoker } from './invoker.js';

export interface HttpRoute {
  readonly basePath: string;
  readonly functionId: FunctionId;
}

// Lambda's synchronous invocation limit; API Gateway base64-encodes binary bodies, growing them.
const MAX_REQUEST_BYTES = 6 * 1024 * 1024;

export interface HttpTrigger {
  readonly url: string;
  stop(): Promise<void>;
}

/** An HTTP API on 127.0.0.1: each request becomes a format-2.0 event for the route's function. */
export async function startHttpTrigger(
  routes: readonly HttpRoute[],
  invoker: Invoker,
  port: ListenPort = 0,
): Promise<HttpTrigger> {
  // Longest base path first, so `/admin` wins over `/`.
  const ordered = [...routes].sort((a, b) => b.basePath.length - a.basePath.length);
  const server = createServer((request, response) => {
    void serve(request, response, ordered, invoker);
  });
  const boundPort = await listenOn(server, port, '127.0.0.1');
  return { url: `http://127.0.0.1:${boundPort}`, stop: () => close(server) };
}

async function serve(
  request: IncomingMessage,
  response: ServerResponse,
  routes: readonly HttpRoute[],
  invoker: Invoker,
): Promise<void> {
  try {
    const body = await readBody(request);
    if (body === undefined) return write(response, TOO_LARGE_REPLY);
    const event = toHttpApiEvent({
      method: request.method ?? 'GET',
      url: request.url ?? '/',
      headers: request.headers,
      body,
      sourceIp: request.socket.remoteAddress ?? '127.0.0.1',
    });
    const route = routes.find((candidate) => event.rawPath.startsWith(candidate.basePath));
    if (route === undefined) return write(response, NOT_FOUND_REPLY);
    const encodedBytes = event.body === undefined ? 0 : Buffer.byteLength(event.body);
    if (encodedBytes > MAX_REQUEST_BYTES) return write(response, TOO_LARGE_REPLY);
    write(response, await invokeForReply(invoker, route.functionId, event));
  } catch (error) {
    logger.error('local HTTP trigger failed', { error: error as Error });
    if (!response.headersSent) write(response, INTERNAL_ERROR_REPLY);
    else response.destroy();
  }
}

async function invokeForReply(invoker: Invoker, functionId: FunctionId, event: unknown): Promise<HttpReply> {
  try {
    return toHttpReply(await invoker.invoke(functionId, event));
  } catch (error) {
    if (error instanceof InvocationTimeoutError) {
      logger.error('handler timed out', { functionId });
      return TIMEOUT_REPLY;
    }
    logger.error('handler failed', { functionId, error: error as Error });
    return INTERNAL_ERROR_REPLY;
  }
}

/** The whole body, or undefined once it passes the limit (the rest is drained, not buffered). */
async function readBody(request: IncomingMessage): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request) {
    size += (chunk as Buffer).length;
    if (size <= MAX_REQUEST_BYTES) chunks.push(chunk as Buffer);
  }
  return size > MAX_REQUEST_BYTES ? undefined : Buffer.concat(chunks);
}

function write(response: ServerResponse, reply: HttpReply): void {
  const headers: Record<string, string | string[]> = { ...reply.headers };
  if (reply.cookies.length > 0) headers['set-cookie'] = [...reply.cookies];
  headers['content-length'] = String(reply.body.length);
  response.writeHead(reply.statusCode, headers);
  response.end(reply.body);
}

function close(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    // Long polls and keep-alive sockets would otherwise hold `close` open.
    server.closeAllConnections();
  });
}
