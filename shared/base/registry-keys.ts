/**
 * The key shapes of the `registry` table, declared once. A base module (it imports nothing) so the
 * topology can name keys in its grants and stream filters; the records themselves are typed in
 * domain/records.ts, which re-exports these.
 */

/**
 * The typed prefix of each kind of `registry` item, declared once: the keys below, the pool controls
 * (`shared/services/ops/controls.ts`), the tick lock (`shared/services/scheduler/tick-lock.ts`) and the grants'
 * `dynamodb:LeadingKeys` conditions (`shared/base/topology.ts`) are all built from it, so a grant on one
 * kind can never drift from the keys of that kind. No prefix starts another (a test checks).
 */
export const registryPrefix = {
  apiKey: 'key#',
  operatorKey: 'opkey#',
  tenant: 'tenant#',
  session: 'session#',
  samplingSession: 'ss#',
  seqCounter: 'seq#',
  /** Every idempotency record: training steps, create_model, samples, sampling sessions, unload. */
  idempotency: 'idem#',
  checkpointName: 'ckpt#',
  /** A published checkpoint's listing marker (C4) and a content's pending collection (C3, C5). */
  publicMarker: 'pub#',
  gcEntry: 'gc#',
  sampleClaim: 'claim#',
  /** The sequence ids a sample was issued and what produced them (W8). */
  sampleSequences: 'sample#',
  /** The scheduler's per-pool tick lock. */
  tickLock: 'tick#',
  /** Operator controls, per pool. */
  cutRequest: 'cut#',
  drain: 'drain#',
  /** Quota counters: per-tenant submit windows and open long polls (repositories/quotas.ts). */
  rate: 'rate#',
  polls: 'polls#',
  /** Session futures (W9): a sampling session's completion log, its position counter, its clones. */
  sessionLog: 'sfl#',
  sessionLogCounter: 'sfc#',
  samplerClones: 'sfj#',
  /** A worker process's lease of a work lane (S2). */
  workLane: 'lane#',
} as const;

const p = registryPrefix;

/** `registry` table keys: one typed prefix per record kind. */
export const registryKey = {
  apiKey: (keyHash: string) => `${p.apiKey}${keyHash}`,
  /** Operator keys live apart from tenant keys: no lookup of one kind can ever find the other. */
  operatorKey: (keyHash: string) => `${p.operatorKey}${keyHash}`,
  tenant: (tenant: string) => `${p.tenant}${tenant}`,
  session: (sessionId: string) => `${p.session}${sessionId}`,
  samplingSession: (samplingSessionId: string) => `${p.samplingSession}${samplingSessionId}`,
  /** Per-model seq counter and last client seq_id, kept off the model row (E1). */
  seqCounter: (modelId: string) => `${p.seqCounter}${modelId}`,
  /** Idempotency of training requests: `(model_id, seq_id)`. */
  trainingIdem: (modelId: string, seqId: number) => `${p.idempotency}train#${modelId}#${seqId}`,
  /** Idempotency of create_model: `(session, model_seq_id)`. */
  createModelIdem: (sessionId: string, modelSeqId: number) =>
    `${p.idempotency}create#${sessionId}#${modelSeqId}`,
  /** Idempotency of samples: `(sampling session, seq_id)`. */
  sampleIdem: (samplingSessionId: string, seqId: number) =>
    `${p.idempotency}sample#${samplingSessionId}#${seqId}`,
  /** Idempotency of create_sampling_session: `(session, sampling_session_seq_id)`. */
  samplingSessionIdem: (sessionId: string, seqId: number) => `${p.idempotency}ss#${sessionId}#${seqId}`,
  unloadIdem: (modelId: string) => `${p.idempotency}unload#${modelId}`,
  /** Idempotency of copy_weights: `(session, model_seq_id)`, which also names the copy's run. */
  copyIdem: (sessionId: string, modelSeqId: number) => `${p.idempotency}copy#${sessionId}#${modelSeqId}`,
  /** Write-once checkpoint names (E4). `kind` is `weights` or `sampler`. */
  checkpointName: (modelId: string, kind: 'weights' | 'sampler', name: string) =>
    `${p.checkpointName}${modelId}#${kind}#${name}`,
  /** The listing marker of a published checkpoint: one per name, beside its name record. */
  publicMarker: (modelId: string, kind: 'weights' | 'sampler', name: string) =>
    `${p.publicMarker}${modelId}#${kind}#${name}`,
  gcEntry: (contentId: string) => `${p.gcEntry}${contentId}`,
  /** Per-request sample claim (R4: samples are claimed per request, not per model). */
  sampleClaim: (requestId: string) => `${p.sampleClaim}${requestId}`,
  /** One per asample: its sequence ids' provenance (W8). */
  sampleSequences: (requestId: string) => `${p.sampleSequences}${requestId}`,
  tickLock: (pool: string) => `${p.tickLock}${pool}`,
  cutRequest: (pool: string) => `${p.cutRequest}${pool}`,
  drain: (pool: string) => `${p.drain}${pool}`,
  /** Prefix of a rate counter: one item per window follows (shared/repositories/quotas.ts). */
  rate: (scope: string, subject: string) => `${p.rate}${scope}#${subject}`,
  /** One of a tenant's records of open long polls: record 0, then `#1`, `#2`... (shared/repositories/quotas.ts). */
  polls: (tenant: string, record = 0) =>
    record === 0 ? `${p.polls}${tenant}` : `${p.polls}${tenant}#${record}`,
  /** One position of a (sampling session, clone) completion log (shared/domain/session-log.ts). */
  sessionLogEntry: (logKey: string, paddedPosition: string) => `${p.sessionLog}${logKey}#${paddedPosition}`,
  /** The last position a commit of that log took. */
  sessionLogCounter: (logKey: string) => `${p.sessionLogCounter}${logKey}`,
  /** The last clone id join_sampling_session gave out for a sampling session. */
  samplerClones: (samplingSessionId: string) => `${p.samplerClones}${samplingSessionId}`,
  /** A pool's work lane `lane`, leased by the worker process that consumes its queue (S2). */
  workLane: (pool: string, lane: number) => `${p.workLane}${pool}#${lane}`,
} as const;
