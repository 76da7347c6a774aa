import { BatchGetCommand, type DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { InfrastructureError } from '../base/errors.js';
import { type BackoffPolicy, backoffDelay, DEFAULT_BACKOFF, realSleep } from './backoff.js';
import { Limiter } from './limiter.js';

/** BatchGetItem takes at most 100 keys a call (docs/design.md#limits). */
export const BATCH_GET_MAX_KEYS = 100;

export interface BatchGetOptions {
  readonly table: string;
  /** Name of the table's (string) partition key. */
  readonly keyName: string;
  readonly consistent: boolean;
  /** Attribute names to return (the read is charged for the whole item either way). */
  readonly attributes?: readonly string[];
  readonly backoff?: BackoffPolicy;
  /** BatchGetItem calls in flight at once. */
  readonly concurrency?: number;
}

/**
 * Every item of `keys` that exists, by key: BatchGetItem calls of at most 100 distinct keys, answers
 * matched by key (they come unordered), UnprocessedKeys retried with capped, jittered backoff. Keys
 * still unprocessed after the retries fail the read: a partial answer would look like "absent".
 */
export async function batchGetByKey(
  doc: DynamoDBDocumentClient,
  keys: Iterable<string>,
  options: BatchGetOptions,
): Promise<Map<string, Record<string, unknown>>> {
  const distinct = [...new Set(keys)];
  const found = new Map<string, Record<string, unknown>>();
  const limiter = new Limiter(options.concurrency ?? 4);
  const chunks: string[][] = [];
  for (let start = 0; start < distinct.length; start += BATCH_GET_MAX_KEYS) {
    chunks.push(distinct.slice(start, start + BATCH_GET_MAX_KEYS));
  }
  await Promise.all(chunks.map((chunk) => limiter.run(() => readChunk(doc, chunk, options, found))));
  return found;
}

async function readChunk(
  doc: DynamoDBDocumentClient,
  chunk: readonly string[],
  options: BatchGetOptions,
  found: Map<string, Record<string, unknown>>,
): Promise<void> {
  const backoff = options.backoff ?? DEFAULT_BACKOFF;
  const names = options.attributes?.map((_, index) => `#a${index}`);
  const projection =
    options.attributes === undefined
      ? {}
      : {
          ProjectionExpression: names?.join(', '),
          ExpressionAttributeNames: Object.fromEntries(options.attributes.map((name, i) => [`#a${i}`, name])),
        };
  let pending = chunk.map((key) => ({ [options.keyName]: key }));
  for (let retry = 0; ; retry++) {
    const answer = await doc.send(
      new BatchGetCommand({
        RequestItems: {
          [options.table]: { Keys: pending, ConsistentRead: options.consistent, ...projection },
        },
      }),
    );
    for (const item of answer.Responses?.[options.table] ?? []) {
      const key = item[options.keyName];
      if (typeof key === 'string') found.set(key, item);
    }
    pending = (answer.UnprocessedKeys?.[options.table]?.Keys ?? []) as Record<string, string>[];
    if (pending.length === 0) return;
    if (retry >= backoff.maxRetries) {
      throw new InfrastructureError(`${pending.length} keys of ${options.table} still unprocessed`, {
        context: { table: options.table, retries: retry },
      });
    }
    await realSleep(backoffDelay(retry, backoff, Math.random));
  }
}
