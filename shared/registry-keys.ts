/**
 * The key shapes of the `registry` table, one typed prefix per record kind, declared once. A base
 * module (no imports) so the topology can name keys in its stream filters and grants; the records
 * themselves are typed in domain/records.ts, which re-exports this.
 */
/** `registry` table keys: one typed prefix per record kind. */
export const registryKey = {
  apiKey: (keyHash: string) => `key#${keyHash}`,
  /** Operator keys live apart from tenant keys: no lookup of one kind can ever find the other. */
  operatorKey: (keyHash: string) => `opkey#${keyHash}`,
  tenant: (tenant: string) => `tenant#${tenant}`,
  session: (sessionId: string) => `session#${sessionId}`,
  samplingSession: (samplingSessionId: string) => `ss#${samplingSessionId}`,
  /** Per-model seq counter and last client seq_id, kept off the model row (E1). */
  seqCounter: (modelId: string) => `seq#${modelId}`,
  /** Idempotency of training requests: `(model_id, seq_id)`. */
  trainingIdem: (modelId: string, seqId: number) => `idem#train#${modelId}#${seqId}`,
  /** Idempotency of create_model: `(session, model_seq_id)`. */
  createModelIdem: (sessionId: string, modelSeqId: number) => `idem#create#${sessionId}#${modelSeqId}`,
  /** Idempotency of samples: `(sampling session, seq_id)`. */
  sampleIdem: (samplingSessionId: string, seqId: number) => `idem#sample#${samplingSessionId}#${seqId}`,
  /** Idempotency of create_sampling_session: `(session, sampling_session_seq_id)`. */
  samplingSessionIdem: (sessionId: string, seqId: number) => `idem#ss#${sessionId}#${seqId}`,
  unloadIdem: (modelId: string) => `idem#unload#${modelId}`,
  /** Write-once checkpoint names (E4). `kind` is `weights` or `sampler`. */
  checkpointName: (modelId: string, kind: 'weights' | 'sampler', name: string) =>
    `ckpt#${modelId}#${kind}#${name}`,
  /** Per-request sample claim (R4: samples are claimed per request, not per model). */
  sampleClaim: (requestId: string) => `claim#${requestId}`,
  /** The scheduler's tick lock, one per pool. */
  tickLock: (pool: string) => `tick#${pool}`,
  /** Operator controls (ops/controls.ts): "cut running workers now" and "dispatch nothing new". */
  cut: (pool: string) => `cut#${pool}`,
  drain: (pool: string) => `drain#${pool}`,
} as const;
