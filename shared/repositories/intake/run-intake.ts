import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { backoffDelay, realSleep } from '../../aws/backoff.js';
import type { AwsClients } from '../../aws/clients.js';
import { type TransactItem, transactWrite } from '../../aws/transact.js';
import { IdempotencyConflictError, InfrastructureError, NotFoundError } from '../../base/errors.js';
import { logger } from '../../base/logger.js';
import { storageKeys } from '../../base/storage-keys.js';
import type { IdempotencyRecord } from '../../domain/records.js';
import { type PendingFutureInput, pendingFutureRow } from '../futures.js';
import { deletePayloadQuietly, putPayload, type SerializedPayload } from '../payloads.js';
import { readRegistryItem } from '../registry.js';
import { requireSession } from '../sessions.js';
import type { Tables } from '../tables.js';

/**
 * What an intake writes to, resolved once at the API's edge (`services/api/router.ts`) and passed down: the
 * clients, the three tables a submit's transaction spans and the bucket of payloads.
 */
export interface IntakeStore {
  readonly clients: Pick<AwsClients, 'doc' | 's3'>;
  readonly tables: Tables<'futures' | 'models' | 'registry'>;
  readonly bucket: string;
  /**
   * The submit quota's verdict, checked while the intake reads (services/api/router.ts): an intake awaits it
   * before its first write, so a refused submit still stores nothing.
   */
  readonly admission?: Promise<void>;
}

/**
 * One attempt's decision, made from fresh reads: either the answer is already known (an idempotent
 * retry) or a transaction to try, with the answer it gives when it commits.
 */
export type IntakePlan<T> =
  | { readonly answer: T }
  | { readonly items: readonly TransactItem[]; readonly answer: T };

/** `contended`: the previous attempt lost a condition race, so an idempotency record may exist now. */
export type Planner<T> = (contended: boolean) => Promise<IntakePlan<T>>;

/** Attempts before giving up with a 503 (the SDK retries it); bounded by the ClientRequestToken length. */
const MAX_ATTEMPTS = 40;
const CONTENTION_BACKOFF = { baseMs: 10, capMs: 500, maxRetries: MAX_ATTEMPTS };

/**
 * Runs an intake: plan, write the payload (once, on the first attempt that needs it), then one
 * transaction; a lost race or a TransactionConflict plans again from fresh reads, after a jittered
 * backoff, and is never reported (E5). When nothing will reference the payload (an idempotent retry,
 * a 4xx) it is deleted; when the transaction's outcome is unknown it is kept, because a committed
 * row may point at it (the sweeper collects true orphans).
 */
export async function runIntake<T>(
  options: { readonly requestId: string; readonly payload?: SerializedPayload; readonly plan: Planner<T> },
  store: IntakeStore,
): Promise<T> {
  const { clients, bucket } = store;
  let payloadKey: string | undefined;
  let committed = false;
  let outcomeUnknown = false;
  let contended = false;
  try {
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const plan = await options.plan(contended);
      if (!('items' in plan)) return plan.answer;
      await store.admission;
      if (options.payload !== undefined && payloadKey === undefined) {
        payloadKey = await putPayload(clients.s3, bucket, options.requestId, options.payload);
      }
      outcomeUnknown = true;
      const outcome = await transactWrite(plan.items, `${options.requestId}.${attempt}`, clients.doc);
      outcomeUnknown = false;
      if (outcome.ok) {
        committed = true;
        return plan.answer;
      }
      contended ||= outcome.conditionFailed;
      await realSleep(backoffDelay(attempt, CONTENTION_BACKOFF, Math.random));
    }
    logger.warn('intake gave up under contention', { request_id: options.requestId, attempts: MAX_ATTEMPTS });
    throw new InfrastructureError('too much contention on this model; retry the request', {
      context: { request_id: options.requestId },
    });
  } finally {
    if (payloadKey !== undefined && !committed && !outcomeUnknown)
      await deletePayloadQuietly(clients.s3, bucket, payloadKey);
  }
}

/**
 * On a re-plan after a lost race: the submit's session may have finished since (its check item,
 * `sessionOpenCheckItem`, is what failed), and then the submit is refused as one that read it so (410, W9).
 */
export async function requireOpenSession(
  store: IntakeStore,
  sessionId: string,
  tenant: string,
): Promise<void> {
  await requireSession(store.clients.doc, store.tables.registry, sessionId, tenant);
}

/** An idempotency record's key, and how a 4xx names it: `describe`, and the request's `field` (R7). */
export interface IdempotencyKey {
  readonly pk: string;
  readonly describe: string;
  readonly field: string;
}

/**
 * The idempotency record a retry names, checked against the retry: another tenant's record is a 404,
 * a different payload digest a non-retryable 400 (R7). Undefined when there is none.
 */
export async function findOriginal<R extends { readonly tenant: string; readonly payload_digest: string }>(
  doc: DynamoDBDocumentClient,
  table: string,
  key: IdempotencyKey,
  retry: { readonly tenant: string; readonly digest: string },
): Promise<R | undefined> {
  const { describe, field } = key;
  const record = await readRegistryItem<R>(doc, table, key.pk);
  if (record === undefined) return undefined;
  if (record.tenant !== retry.tenant)
    throw new NotFoundError(`${describe} not found`, { context: { field } });
  if (record.payload_digest !== retry.digest) {
    throw new IdempotencyConflictError(`${describe} was already used with a different payload`, {
      context: { field },
    });
  }
  return record;
}

/** Put of a registry item that may exist at most once (idempotency records, counters, names). */
export function putOnce(table: string, item: { readonly pk: string }): TransactItem {
  return {
    Put: {
      TableName: table,
      Item: { ...item },
      ConditionExpression: 'attribute_not_exists(pk)',
    },
  };
}

/** The pending future every submit creates, and the idempotency record its retries find (R7). */
export interface NewFuture extends Omit<PendingFutureInput, 'payloadKey' | 'payloadDigest'> {
  readonly idempotencyKey: string;
  readonly payload: SerializedPayload;
  /** Recorded on the idempotency record when a retry must answer it (create_model). */
  readonly answersModelId?: boolean;
}

/** The two transaction items of `NewFuture`: the row (written once) and its idempotency record. */
export function newFutureItems(tables: Tables<'futures' | 'registry'>, future: NewFuture): TransactItem[] {
  const { idempotencyKey, payload, answersModelId, ...fields } = future;
  const row = pendingFutureRow({
    ...fields,
    payloadKey: storageKeys.payload(future.requestId),
    payloadDigest: payload.digest,
  });
  const idem: IdempotencyRecord = {
    pk: idempotencyKey,
    tenant: future.tenant,
    request_id: future.requestId,
    payload_digest: payload.digest,
    ...(answersModelId ? { model_id: future.modelId } : {}),
    created_at: future.now,
  };
  return [
    {
      Put: {
        TableName: tables.futures,
        Item: row,
        ConditionExpression: 'attribute_not_exists(request_id)',
      },
    },
    putOnce(tables.registry, idem),
  ];
}

/** A submit's request: what its intake writes and what a retry of it is checked against. */
export interface SubmitRequest {
  readonly requestId: string;
  readonly tenant: string;
  readonly payload: SerializedPayload;
}

/** `runIntake` of a submit: the payload written is the request's. */
export function runSubmit<T>(request: SubmitRequest, store: IntakeStore, plan: Planner<T>): Promise<T> {
  return runIntake({ requestId: request.requestId, payload: request.payload, plan }, store);
}

/** `findOriginal` for a submit's idempotency record, checked against this retry's tenant and payload. */
export function findOriginalFuture(
  store: Pick<IntakeStore, 'clients' | 'tables'>,
  key: IdempotencyKey,
  retry: Pick<SubmitRequest, 'tenant' | 'payload'>,
): Promise<IdempotencyRecord | undefined> {
  return findOriginal<IdempotencyRecord>(store.clients.doc, store.tables.registry, key, {
    tenant: retry.tenant,
    digest: retry.payload.digest,
  });
}
