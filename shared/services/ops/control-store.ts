import { DeleteCommand, type DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import { isAwsError, ValidationError } from '../../base/errors.js';
import { readRegistryItem } from '../../repositories/registry.js';
import {
  type CutRequestRecord,
  controlKey,
  cutRequestRecord,
  type DrainRecord,
  drainRecord,
  POOL_PATTERN,
} from './controls.js';

/**
 * Reads and writes of the operator controls (see `controls.ts`). Readers are for the worker runtime
 * (cut) and the scheduler (drain); writers for the operator CLI. Every function takes the document
 * client and the registry table's name, like the repositories.
 */

function checkPool(pool: string): void {
  if (!POOL_PATTERN.test(pool)) {
    throw new ValidationError(`pool must be 1-64 letters, digits, _ . -; got "${pool}"`, {
      context: { field: 'pool' },
    });
  }
}

/**
 * The pool's latest cut request, if any. Eventually consistent by default: workers poll it, and a
 * request seen one poll later is still honoured.
 */
export function readCutRequest(
  doc: DynamoDBDocumentClient,
  table: string,
  pool: string,
  consistent = false,
): Promise<CutRequestRecord | undefined> {
  return readRegistryItem<CutRequestRecord>(doc, table, controlKey.cut(pool), consistent);
}

/** The pool's drain record, or undefined when it dispatches normally. Strongly consistent. */
export function readDrain(
  doc: DynamoDBDocumentClient,
  table: string,
  pool: string,
): Promise<DrainRecord | undefined> {
  return readRegistryItem<DrainRecord>(doc, table, controlKey.drain(pool), true);
}

/** For the scheduler: true while the pool must not dispatch new work. */
export async function isPoolDraining(
  doc: DynamoDBDocumentClient,
  table: string,
  pool: string,
): Promise<boolean> {
  return (await readDrain(doc, table, pool)) !== undefined;
}

/** Asks every worker of the pool to cut now; returns the stored request. */
export async function requestCut(
  doc: DynamoDBDocumentClient,
  table: string,
  pool: string,
  requestedBy: string,
  now: number = Date.now(),
): Promise<CutRequestRecord> {
  checkPool(pool);
  const record = cutRequestRecord(pool, now, requestedBy);
  await doc.send(new PutCommand({ TableName: table, Item: record }));
  return record;
}

/**
 * Starts draining the pool. Draining twice keeps the first record (its `since` is when draining
 * began); the record in force is returned.
 */
export async function startDrain(
  doc: DynamoDBDocumentClient,
  table: string,
  pool: string,
  requestedBy: string,
  options: { readonly reason?: string | undefined; readonly now?: number } = {},
): Promise<DrainRecord> {
  checkPool(pool);
  const record = drainRecord(pool, options.now ?? Date.now(), requestedBy, options.reason);
  try {
    await doc.send(
      new PutCommand({
        TableName: table,
        Item: record,
        ConditionExpression: 'attribute_not_exists(pk)',
      }),
    );
    return record;
  } catch (error) {
    if (!isAwsError(error, 'ConditionalCheckFailedException')) throw error;
    // Already draining. If a concurrent `drain --off` removed it meanwhile, drain again.
    return (await readDrain(doc, table, pool)) ?? startDrain(doc, table, pool, requestedBy, options);
  }
}

/** Stops draining; false when the pool was not draining. */
export async function stopDrain(doc: DynamoDBDocumentClient, table: string, pool: string): Promise<boolean> {
  checkPool(pool);
  const answer = await doc.send(
    new DeleteCommand({
      TableName: table,
      Key: { pk: controlKey.drain(pool) },
      ReturnValues: 'ALL_OLD',
    }),
  );
  return answer.Attributes !== undefined;
}
