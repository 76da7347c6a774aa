import type { TransactItem } from '../../aws/transact.js';
import { IdempotencyConflictError, ValidationError } from '../../base/errors.js';
import { isLiveCheckpoint } from '../../domain/checkpoint-life.js';
import { listSortKey, parentKey } from '../../domain/listing-keys.js';
import {
  type CheckpointNameRecord,
  type ModelRow,
  registryKey,
  type SeqCounterRecord,
  type TrainingRequestType,
} from '../../domain/records.js';
import { gcEntry, gcEntryPutItem, unsavedGcEntry } from '../checkpoints/gc.js';
import {
  checkpointReplaceItem,
  checkpointReserveItem,
  readCheckpointName,
  staleReservation,
} from '../checkpoints/names.js';
import { publicMarkerDeleteItem } from '../checkpoints/public-markers.js';
import { modelCreateItem, type NewRun, newModelRow } from '../models.js';
import type { SerializedPayload } from '../payloads.js';
import {
  modelNotFound,
  newSeqCounter,
  requireSeqCounter,
  seqCounterAdvanceItem,
  seqCounterUnloadItem,
} from '../seq-counters.js';
import { sessionOpenCheckItem } from '../sessions.js';
import {
  findOriginalFuture,
  type IdempotencyKey,
  type IntakeStore,
  newFutureItems,
  putOnce,
  requireOpenSession,
  runSubmit,
} from './run-intake.js';

/** What a submit answers: the SDK's UntypedAPIFuture. */
export interface FutureAnswer {
  readonly request_id: string;
  readonly model_id?: string;
}

export interface CreateModelIntake extends NewRun {
  readonly requestId: string;
  readonly modelSeqId: number;
  readonly userMetadata?: ModelRow['user_metadata'];
  readonly payload: SerializedPayload;
  /** The session had finished when read: only a retry of a request accepted before is answered (W9). */
  readonly sessionFinished?: boolean;
}

/**
 * create_model: the model row, its seq counter (create_model is seq 1), the future and the
 * idempotency record of `(session, model_seq_id)` in one transaction.
 */
export async function submitCreateModel(input: CreateModelIntake, store: IntakeStore): Promise<FutureAnswer> {
  const idempotency: IdempotencyKey = {
    pk: registryKey.createModelIdem(input.sessionId, input.modelSeqId),
    describe: `model_seq_id ${input.modelSeqId} of session ${input.sessionId}`,
    field: 'model_seq_id',
  };
  return runSubmit<FutureAnswer>(input, store, async (contended) => {
    const retryOnly = contended || input.sessionFinished === true;
    const original = retryOnly ? await findOriginalFuture(store, idempotency, input) : undefined;
    if (original) return { answer: { request_id: original.request_id, model_id: original.model_id } };
    if (retryOnly) await requireOpenSession(store, input.sessionId, input.tenant);
    const model: ModelRow = {
      ...newModelRow(input, 'active'),
      ...(input.userMetadata === undefined ? {} : { user_metadata: input.userMetadata }),
    };
    const counter: SeqCounterRecord = {
      ...newSeqCounter(input, 1),
      // A training run of its session (by_parent, C1).
      parent_key: parentKey.session(input.sessionId),
      list_sort: listSortKey(input.now, input.modelId),
    };
    return {
      answer: { request_id: input.requestId, model_id: input.modelId },
      items: [
        modelCreateItem(store.tables.models, model),
        putOnce(store.tables.registry, counter),
        sessionOpenCheckItem(store.tables.registry, input.sessionId),
        ...newFutureItems(store.tables, {
          idempotencyKey: idempotency.pk,
          requestId: input.requestId,
          tenant: input.tenant,
          modelId: input.modelId,
          seq: 1,
          requestType: 'create_model',
          tokens: 0,
          payload: input.payload,
          now: input.now,
          answersModelId: true,
        }),
      ],
    };
  });
}

export interface TrainingStepIntake {
  readonly requestId: string;
  readonly tenant: string;
  readonly modelId: string;
  readonly seqId: number;
  readonly requestType: Exclude<TrainingRequestType, 'create_model' | 'unload_model'>;
  readonly tokens: number;
  readonly payload: SerializedPayload;
  /** The counter the caller already read (used for the first attempt only). */
  readonly counter: SeqCounterRecord;
  /** save_weights / save_weights_for_sampler: the write-once name reserved in the same transaction. */
  readonly reservation?: CheckpointNameRecord;
  /** save_weights `overwrite`: a committed checkpoint of the name is replaced (C3). */
  readonly overwrite?: boolean;
  /**
   * A save's TTL (C5). Its content's gc entry is written here, due at the earliest the checkpoint can
   * expire (now + ttl; the commit sets `expires_at` from its own, later, time), and not by the
   * commit: the planner budgets a commit's actions from the live index alone (R6), where a TTL is
   * not visible, so a commit must not grow with one. The sweeper moves an early entry to the expiry.
   */
  readonly ttlSeconds?: number;
  readonly now: number;
}

/**
 * A step of a model's training sequence: the next seq from the counter item, conditioned on the
 * values read, so per-model seqs stay contiguous; the client's seq_id must grow (R7).
 */
export async function submitTrainingStep(
  input: TrainingStepIntake,
  store: IntakeStore,
): Promise<FutureAnswer> {
  const idempotency: IdempotencyKey = {
    pk: registryKey.trainingIdem(input.modelId, input.seqId),
    describe: `seq_id ${input.seqId} of model ${input.modelId}`,
    field: 'seq_id',
  };
  const answer: FutureAnswer = { request_id: input.requestId, model_id: input.modelId };
  const readCounter = counterReader(input, store);
  return runSubmit<FutureAnswer>(input, store, async (contended) => {
    const counter = await readCounter();
    if (input.seqId <= counter.last_seq_id) {
      const original = await findOriginalFuture(store, idempotency, input);
      if (original === undefined) {
        throw new IdempotencyConflictError(
          `seq_id ${input.seqId} is out of order: model ${input.modelId} already accepted seq_id ${counter.last_seq_id}`,
          { context: { field: 'seq_id' } },
        );
      }
      return { answer: { request_id: original.request_id, model_id: input.modelId } };
    }
    if (counter.unloaded) throw modelNotFound(input.modelId, 'is unloaded');
    if (contended) await requireOpenSession(store, counter.session_id, input.tenant);
    const reservation =
      input.reservation &&
      (await reserveName(input.reservation, input.modelId, input.overwrite === true, input.now, store));
    const seq = counter.seq + 1;
    const items: TransactItem[] = [
      ...newFutureItems(store.tables, {
        idempotencyKey: idempotency.pk,
        requestId: input.requestId,
        tenant: input.tenant,
        modelId: input.modelId,
        seq,
        requestType: input.requestType,
        tokens: input.tokens,
        payload: input.payload,
        now: input.now,
      }),
      seqCounterAdvanceItem(store.tables.registry, counter, {
        modelId: input.modelId,
        tenant: input.tenant,
        seq,
        seqId: input.seqId,
        now: input.now,
      }),
      sessionOpenCheckItem(store.tables.registry, counter.session_id),
    ];
    if (reservation) items.push(...reservation);
    if (input.reservation && input.ttlSeconds !== undefined) {
      const due = input.now + input.ttlSeconds * 1000;
      items.push(gcEntryPutItem(store.tables.registry, unsavedGcEntry(input.reservation, due)));
    }
    return { answer, items };
  });
}

/**
 * The model's seq counter for each attempt of a submit: the one the caller already read serves the
 * first attempt, and every later attempt (after a lost race) reads it again.
 */
function counterReader(
  input: { readonly counter: SeqCounterRecord; readonly modelId: string; readonly tenant: string },
  store: IntakeStore,
): () => Promise<SeqCounterRecord> {
  let first: SeqCounterRecord | undefined = input.counter;
  return async () => {
    const counter =
      first ??
      (await requireSeqCounter(store.clients.doc, store.tables.registry, input.modelId, input.tenant));
    first = undefined;
    return counter;
  };
}

/**
 * The name's reservation (`checkpointReserveItem`), or a 400 when the name is taken. A committed
 * name is replaced when the save asks to `overwrite` it, and so is one that has expired (it reads as
 * absent, C5): the reservation takes the record over, the old content gets a gc entry due now and
 * loses its public marker, all in the submit's transaction (C3).
 */
async function reserveName(
  reservation: CheckpointNameRecord,
  modelId: string,
  overwrite: boolean,
  now: number,
  store: IntakeStore,
): Promise<TransactItem[]> {
  const { clients, tables } = store;
  const existing = await readCheckpointName(clients.doc, tables.registry, reservation.pk);
  if (existing === undefined) return [checkpointReserveItem(tables.registry, reservation)];
  if (await staleReservation(clients.doc, tables.futures, existing)) {
    return [checkpointReserveItem(tables.registry, reservation, existing.request_id)];
  }
  const expired = existing.status === 'committed' && !isLiveCheckpoint(existing, now);
  if (existing.status === 'committed' && (overwrite || expired)) {
    return [
      checkpointReplaceItem(tables.registry, reservation, existing),
      gcEntryPutItem(tables.registry, gcEntry(existing, now)),
      publicMarkerDeleteItem(tables.registry, existing),
    ];
  }
  throw new ValidationError(
    `path: checkpoint name "${reservation.name}" is already used for model ${modelId} (names are write-once${
      reservation.kind === 'weights' ? '; save_weights with overwrite=true replaces it' : ''
    })`,
    { context: { field: 'path' } },
  );
}

export interface UnloadIntake {
  readonly requestId: string;
  readonly tenant: string;
  readonly modelId: string;
  readonly payload: SerializedPayload;
  readonly counter: SeqCounterRecord;
  readonly now: number;
}

/** unload_model: once per model; the last seq of its sequence. A repeat answers the original future. */
export async function submitUnload(input: UnloadIntake, store: IntakeStore): Promise<FutureAnswer> {
  const idempotency: IdempotencyKey = {
    pk: registryKey.unloadIdem(input.modelId),
    describe: `unload of model ${input.modelId}`,
    field: 'model_id',
  };
  const readCounter = counterReader(input, store);
  return runSubmit<FutureAnswer>(input, store, async () => {
    const counter = await readCounter();
    if (counter.unloaded) {
      const original = await findOriginalFuture(store, idempotency, input);
      if (original === undefined) throw modelNotFound(input.modelId, 'is unloaded');
      return { answer: { request_id: original.request_id, model_id: input.modelId } };
    }
    const seq = counter.seq + 1;
    return {
      answer: { request_id: input.requestId, model_id: input.modelId },
      items: [
        ...newFutureItems(store.tables, {
          idempotencyKey: idempotency.pk,
          requestId: input.requestId,
          tenant: input.tenant,
          modelId: input.modelId,
          seq,
          requestType: 'unload_model',
          tokens: 0,
          payload: input.payload,
          now: input.now,
        }),
        seqCounterUnloadItem(store.tables.registry, counter, {
          modelId: input.modelId,
          tenant: input.tenant,
          seq,
          now: input.now,
        }),
      ],
    };
  });
}
