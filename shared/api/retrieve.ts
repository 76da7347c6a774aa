import { realSleep } from '../aws/backoff.js';
import type { FutureRow } from '../domain/records.js';
import { NotFoundError } from '../errors.js';
import { isRequestId } from '../ids.js';
import { type FutureHead, readFuture, readFutureHead, readFutureResult } from '../repositories/futures.js';
import { encodeForwardBackwardOutput, encodeSampleResponse } from '../wire/results.js';
import { BinaryAnswer, PROTOBUF_CONTENT_TYPE } from './bodies.js';
import type { OperationContext } from './operations.js';
import { inPollSlot } from './quotas.js';
import { parseRequest } from './request-checks.js';
import { retrieveFutureRequest } from './schemas.js';

/** First poll delay; doubles up to the cap, so a long poll costs about 30 reads, not thousands. */
const FIRST_POLL_MS = 50;
const MAX_POLL_MS = 1_000;

export interface TryAgain {
  readonly type: 'try_again';
  readonly request_id: string;
  readonly queue_state: 'active';
}

export interface FailedAnswer {
  readonly error: string;
  readonly category: 'user' | 'server';
}

function notFound(requestId: string): NotFoundError {
  return new NotFoundError(`future ${requestId} not found`, { context: { field: 'request_id' } });
}

/**
 * retrieve_future: holds the poll open until the row turns terminal or `deadline` (ms since the epoch)
 * passes, reading the row with a doubling backoff. Completed: the stored result; failed: `{error,
 * category}` with status 200 (the SDK raises RequestFailedError); still pending: try_again.
 * Unknown ids and other tenants' ids are the same 404. A completed forward, forward_backward or
 * sample answers its protobuf message when the client accepts it (W2); which message comes from
 * the stored row, never from the request.
 */
export async function retrieveFuture(
  ctx: OperationContext & { readonly deadline: number; readonly acceptsProtobuf?: boolean },
  body: unknown,
  sleep: (ms: number) => Promise<void> = realSleep,
): Promise<unknown> {
  const { request_id: requestId } = parseRequest(retrieveFutureRequest, body);
  if (!isRequestId(requestId)) throw notFound(requestId);
  // The first read is strong (the client may ask the moment its submit returned) and reads only the
  // row's head: "not yours" and "unknown" then cost the same, whatever the row holds.
  const head: FutureHead | undefined = await readFutureHead(
    ctx.clients.doc,
    ctx.tables.futures,
    requestId,
    true,
  );
  if (head === undefined || head.tenant !== ctx.tenant) throw notFound(requestId);
  if (head.status === 'pending' && ctx.deadline > Date.now()) {
    // Only a poll that waits holds an invocation: it takes one of the tenant's slots (quotas.ts).
    const ended = await inPollSlot(
      ctx.clients.doc,
      ctx.tables.registry,
      { tenant: ctx.tenant, tunables: ctx.tunables, deadline: ctx.deadline },
      () => waitWhilePending(requestId, ctx, sleep),
    );
    if (!ended) return { type: 'try_again', request_id: requestId, queue_state: 'active' } satisfies TryAgain;
  } else if (head.status === 'pending') {
    return { type: 'try_again', request_id: requestId, queue_state: 'active' } satisfies TryAgain;
  }
  // Terminal rows never change again, so the whole row is read once, strongly, for its outcome.
  const row: FutureRow | undefined = await readFuture(ctx.clients.doc, ctx.tables.futures, requestId, true);
  if (row === undefined) throw notFound(requestId);
  if (row.status === 'failed') {
    return {
      error: row.error?.message ?? 'request failed',
      category: row.error?.category ?? 'server',
    } satisfies FailedAnswer;
  }
  const result = await readFutureResult(ctx.clients.s3, ctx.bucket, row);
  return ctx.acceptsProtobuf === true ? (asProtobuf(row, result) ?? result) : result;
}

/** Polls the row's head with a doubling backoff: true once it is terminal, false at the deadline. */
async function waitWhilePending(
  requestId: string,
  ctx: OperationContext & { readonly deadline: number },
  sleep: (ms: number) => Promise<void>,
): Promise<boolean> {
  let delay = FIRST_POLL_MS;
  for (;;) {
    const left = ctx.deadline - Date.now();
    if (left <= 0) return false;
    await sleep(Math.min(delay, left));
    delay = Math.min(delay * 2, MAX_POLL_MS);
    // Later reads may be eventually consistent: a stale one only delays the answer.
    const head = await readFutureHead(ctx.clients.doc, ctx.tables.futures, requestId);
    if (head !== undefined && head.status !== 'pending') return true;
  }
}

/** The result's protobuf form for the request types the SDK takes as protobuf; undefined for the rest. */
function asProtobuf(row: FutureRow, result: unknown): BinaryAnswer | undefined {
  switch (row.request_type) {
    case 'forward':
    case 'forward_backward':
      return new BinaryAnswer(
        PROTOBUF_CONTENT_TYPE,
        encodeForwardBackwardOutput(result as Parameters<typeof encodeForwardBackwardOutput>[0]),
      );
    case 'sample':
      return new BinaryAnswer(
        PROTOBUF_CONTENT_TYPE,
        encodeSampleResponse(result as Parameters<typeof encodeSampleResponse>[0]),
      );
    default:
      return undefined;
  }
}
