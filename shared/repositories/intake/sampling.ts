import {
  registryKey,
  type SampleSequencesRecord,
  type SamplingSessionIdemRecord,
  type SamplingSessionRecord,
} from '../../domain/records.js';
import type { SerializedPayload } from '../payloads.js';
import { sampleSequencesItem } from '../samples/sequences.js';
import { samplingSessionCreateItem } from '../sampling-sessions.js';
import { sessionOpenCheckItem } from '../sessions.js';
import {
  findOriginal,
  findOriginalFuture,
  type IdempotencyKey,
  type IntakeStore,
  newFutureItems,
  putOnce,
  requireOpenSession,
  runIntake,
  runSubmit,
} from './run-intake.js';
import type { FutureAnswer } from './training.js';

export interface SampleIntake {
  readonly requestId: string;
  readonly tenant: string;
  readonly samplingSession: SamplingSessionRecord;
  readonly seqId: number;
  /** The (sampling session, clone) completion log of this sample (W9). */
  readonly sessionLog?: string;
  readonly tokens: number;
  readonly payload: SerializedPayload;
  readonly now: number;
  /** What produced the sequences (W8), written with the future; its `request_id` is `requestId`. */
  readonly sequences: SampleSequencesRecord;
}

/**
 * asample: outside the training sequence (R4), so no seq; the future, the idempotency record of
 * `(sampling session, seq_id)` and the sequences' record (W8) in one transaction.
 */
export async function submitSample(input: SampleIntake, store: IntakeStore): Promise<FutureAnswer> {
  const session = input.samplingSession;
  const idempotency: IdempotencyKey = {
    pk: registryKey.sampleIdem(session.sampling_session_id, input.seqId),
    describe: `seq_id ${input.seqId} of sampling session ${session.sampling_session_id}`,
    field: 'seq_id',
  };
  return runSubmit<FutureAnswer>(input, store, async (contended) => {
    const original = contended ? await findOriginalFuture(store, idempotency, input) : undefined;
    if (original) return { answer: { request_id: original.request_id } };
    if (contended) await requireOpenSession(store, session.session_id, input.tenant);
    return {
      answer: { request_id: input.requestId },
      items: [
        sampleSequencesItem(store.tables.registry, input.sequences),
        sessionOpenCheckItem(store.tables.registry, session.session_id),
        ...newFutureItems(store.tables, {
          idempotencyKey: idempotency.pk,
          requestId: input.requestId,
          tenant: input.tenant,
          modelId: session.model_id,
          requestType: 'sample',
          ...(session.checkpoint_id === undefined ? {} : { checkpointId: session.checkpoint_id }),
          tokens: input.tokens,
          payload: input.payload,
          ...(input.sessionLog === undefined ? {} : { sessionLog: input.sessionLog }),
          now: input.now,
        }),
      ],
    };
  });
}

export interface SamplingSessionIntake {
  /** Unique per attempt; also names the transaction. */
  readonly attemptId: string;
  readonly record: SamplingSessionRecord;
  readonly samplingSessionSeqId: number;
  readonly digest: string;
  /** The session had finished when read: only a retry of a request accepted before is answered (W9). */
  readonly sessionFinished?: boolean;
}

/** create_sampling_session: the record and the idempotency record of `(session, seq id)`, once. */
export async function createSamplingSession(
  input: SamplingSessionIntake,
  store: IntakeStore,
): Promise<{ readonly sampling_session_id: string }> {
  const { record } = input;
  const idempotency: IdempotencyKey = {
    pk: registryKey.samplingSessionIdem(record.session_id, input.samplingSessionSeqId),
    describe: `sampling_session_seq_id ${input.samplingSessionSeqId} of session ${record.session_id}`,
    field: 'sampling_session_seq_id',
  };
  return runIntake(
    {
      requestId: input.attemptId,
      plan: async (contended) => {
        const retry = { tenant: record.tenant, digest: input.digest };
        const retryOnly = contended || input.sessionFinished === true;
        const original = retryOnly
          ? await findOriginal<SamplingSessionIdemRecord>(
              store.clients.doc,
              store.tables.registry,
              idempotency,
              retry,
            )
          : undefined;
        if (original) return { answer: { sampling_session_id: original.sampling_session_id } };
        if (retryOnly) await requireOpenSession(store, record.session_id, record.tenant);
        const idem: SamplingSessionIdemRecord = {
          pk: idempotency.pk,
          tenant: record.tenant,
          sampling_session_id: record.sampling_session_id,
          payload_digest: input.digest,
        };
        return {
          answer: { sampling_session_id: record.sampling_session_id },
          items: [
            samplingSessionCreateItem(store.tables.registry, record),
            putOnce(store.tables.registry, idem),
            sessionOpenCheckItem(store.tables.registry, record.session_id),
          ],
        };
      },
    },
    store,
  );
}
