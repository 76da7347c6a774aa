/**
 * The shapes stored in DynamoDB and S3. One file, so the API, scheduler, worker and sweeper agree.
 * See docs/architecture.md#data-model for the walk-through.
 */

import type { PrefixPointer } from './prefix-pointer.js';

/** Requests in a model's training sequence (they take a per-model `seq`, R1). */
export const TRAINING_REQUEST_TYPES = [
  'create_model',
  'forward',
  'forward_backward',
  'optim_step',
  'save_weights',
  'save_weights_for_sampler',
  'load_weights',
  'unload_model',
] as const;
export type TrainingRequestType = (typeof TRAINING_REQUEST_TYPES)[number];
export type RequestType = TrainingRequestType | 'sample';

/**
 * The requests whose completion changes a model's state (weights, moments, accumulated gradient): what
 * a commit adds to the replay log (S4) and what the chaos run's lineage check follows (E3-E5).
 */
export const STATE_CHANGING_REQUEST_TYPES: ReadonlySet<RequestType> = new Set([
  'create_model',
  'forward_backward',
  'optim_step',
  'load_weights',
]);

/** Passes may be fused across models; barriers end a tick's run for their model (R2). */
export const PASS_TYPES: ReadonlySet<RequestType> = new Set(['forward', 'forward_backward']);
export const BARRIER_TYPES: ReadonlySet<RequestType> = new Set(['optim_step', 'load_weights']);

export type FutureStatus = 'pending' | 'completed' | 'failed';
export type ErrorCategory = 'user' | 'server';

export interface FutureError {
  readonly message: string;
  readonly category: ErrorCategory;
}

/** `futures` table item, key `request_id`. */
export interface FutureRow {
  /** Time-ordered, unique per submit attempt (see `mintRequestId`). */
  readonly request_id: string;
  readonly tenant: string;
  /** Training requests: the model. Samples: the checkpoint's model, or `base:<base_model>`. */
  readonly model_id: string;
  /** Per-model, contiguous from 1 (training requests only). */
  readonly seq?: number;
  readonly request_type: RequestType;
  /** Samples: content id of the sampler checkpoint; absent for base-model samples. */
  readonly checkpoint_id?: string;
  readonly status: FutureStatus;
  /** GSI `live` partition (`<pool>#<shard>`); present only while pending, so terminal rows leave the index. */
  readonly live?: string;
  /** Token count used to bound work items (optional for planning). */
  readonly tokens?: number;
  readonly payload_key: string;
  readonly payload_digest: string;
  /** Inline JSON result when small; otherwise `result_key` names the S3 object. */
  /** The result's JSON text (rows written before that hold the value as a map); see readFutureResult. */
  readonly result?: unknown;
  readonly result_key?: string;
  readonly error?: FutureError;
  /** Resumable samples cut by a worker: per sequence, its latest committed prefix (P4a). */
  readonly prefix_ref?: SamplePrefixRef;
  /**
   * The worker run (`mintRunId`) whose commit ended it; absent on rows ended before runs were
   * recorded. Its request's objects under another run's keys are garbage (E3, E5).
   */
  readonly run?: string;
  /** Samples: the key of the (sampling session, clone) completion log its end is written to (W9). */
  readonly session_log?: string;
  /**
   * Samples: runs that failed as the infrastructure's (E2's attempts, per sample); after K of them the
   * next run fails the sample as a server error instead of sampling again.
   */
  readonly attempts?: number;
  readonly created_at: number;
  readonly updated_at: number;
  readonly ttl?: number;
}

/**
 * Where a cut sample resumes (P4a, P6). Each sequence of a sample is its own call in the prefix store
 * (call id `<request_id>#<sample index>`), so each has its own pointer: a multi-cut lineage (one
 * segment per cut) to its latest committed prefix, or null when it has none and starts over. Written
 * only by the worker holding the sample's claim, when it returns the sample to pending at a cut.
 */
export interface SamplePrefixRef {
  /** By sample index; shorter than num_samples when the last sequences have no prefix. */
  readonly sequences: readonly (PrefixPointer | null)[];
  /** Cuts the sample went through so far (for operators; nothing depends on it). */
  readonly cuts: number;
}

/** What GSI `live` projects: ids and model/checkpoint keys, nothing else (R6). */
export interface LiveRow {
  readonly request_id: string;
  readonly model_id: string;
  /** Projected so the planner shares a work item fairly across tenants (samples name no model row). */
  readonly tenant?: string;
  readonly seq?: number;
  readonly request_type: RequestType;
  readonly checkpoint_id?: string;
  readonly status: FutureStatus;
  readonly tokens?: number;
}

export type ModelStatus = 'active' | 'unloaded';

/** `models` table item, key `model_id` (E1). Only the scheduler, worker and sweeper write it after creation. */
export interface ModelRow {
  readonly model_id: string;
  readonly tenant: string;
  readonly session_id: string;
  readonly base_model: string;
  readonly lora_config: LoraConfig;
  readonly status: ModelStatus;
  /** Bumped by every claim and every re-plan; claims are conditional on it (E2). */
  readonly epoch: number;
  readonly planned_through: number;
  readonly applied_through: number;
  /**
   * S3 key of the model's last snapshot (S3 of docs/design.md#s1): the state after seq
   * `snapshot_through`; the committed state is it plus the `replay` steps. Absent until create_model commits.
   */
  readonly state_ref?: string;
  /** The seq `state_ref` is the state after; absent on rows written before snapshots (then: `applied_through`). */
  readonly snapshot_through?: number;
  /**
   * The committed steps after the snapshot that changed the state, in seq order: what a worker that
   * does not hold the state replays from their stored payloads to rebuild it (S4). Absent: none.
   */
  readonly replay?: readonly ReplayEntry[];
  /** The worker that holds the committed state in its engine (S1), while `holder_until` is ahead. */
  readonly holder?: ModelHolder;
  readonly holder_until?: number;
  /** Work item id in flight (`<model_id>@<epoch>`); absent when idle (R3). */
  readonly inflight?: string;
  readonly lease_until?: number;
  readonly attempts: number;
  readonly last_completed_at?: number;
  /** The worker run (`mintRunId`) whose commit last advanced the row: how a commit knows it landed (E5). */
  readonly last_run?: string;
  /** Also the `by_tenant` sort key: a tenant's training runs, newest first (C1). */
  readonly created_at: number;
  /** create_model's, as sent (any JSON values; the TrainingRun answer stringifies them, C1). */
  readonly user_metadata?: Readonly<Record<string, unknown>>;
}

/** A committed step to replay over the snapshot (S4): its payload is `payloads/<request_id>.json`. */
export interface ReplayEntry {
  readonly seq: number;
  readonly request_id: string;
  readonly request_type: TrainingRequestType;
}

/** Who holds a model's state (S1): a worker process, and the lane queue routed to it (S2), if any. */
export interface ModelHolder {
  /** The worker process's id (`mintRunId` at its start): unique per process. */
  readonly worker: string;
  /** The work lane it consumes (`WORK_LANE_QUEUE_URLS[lane]`); absent: it takes work from the shared queue only. */
  readonly lane?: number;
}

export interface LoraConfig {
  readonly rank: number;
  readonly seed?: number;
  readonly train_unembed?: boolean;
  readonly train_mlp?: boolean;
  readonly train_attn?: boolean;
}

export { registryKey, registryPrefix } from '../base/registry-keys.js';

export type CheckpointKind = 'weights' | 'sampler';

/** A checkpoint name record: reserved at intake (`pending`), filled by the committing worker. */
export interface CheckpointNameRecord {
  readonly pk: string;
  readonly tenant: string;
  readonly model_id: string;
  readonly kind: CheckpointKind;
  readonly name: string;
  readonly path: string;
  readonly request_id: string;
  readonly status: 'pending' | 'committed';
  /** Derived from the request id, so two workers running the same step name the same content. */
  readonly content_id: string;
  readonly blob_key?: string;
  /**
   * Set by the commit (C1): its time, and the listing keys of `by_owner` (`ckpt#<tenant>`) and
   * `by_parent` (`run#<model_id>`); absent while pending, so only committed names are listed. An
   * unnamed sampler save's record carries `created_at` only: it is reached through its sampling
   * session, never listed.
   */
  readonly created_at?: number;
  readonly owner_key?: string;
  readonly parent_key?: string;
  readonly list_sort?: string;
  /** Epoch ms after which the checkpoint reads as absent (`isLiveCheckpoint`); absent = never (C5). */
  readonly expires_at?: number;
  /** Readable by every tenant (C4); absent = the owner's only. */
  readonly public?: true;
  /** Bytes of the stored checkpoint blob. */
  readonly size_bytes?: number;
  /** Optimizer steps of the model when it was saved (absent on checkpoints saved before W8). */
  readonly weights_version?: number;
  /** S3 key of the checkpoint's tar archive (C2); absent on checkpoints saved before archives. */
  readonly archive_key?: string;
  /**
   * The save's `user_metadata` (SDK releases after 0.25.0), written with the reservation: a save
   * that replaces the name replaces it as a whole, and one without it leaves none (W7).
   */
  readonly user_metadata?: Readonly<Record<string, string>>;
}

/**
 * `registry` item `gc#<content_id>`: a checkpoint's content the sweeper collects once `due` (C3, C5).
 * Written with a TTL'd commit or `PUT .../ttl` (due = the expiry), by a delete or an overwrite (due =
 * then). In GSI `by_owner`'s `gc` partition, sorted by due time (`gcSortKey`), so the sweeper finds
 * what is due with one Query and never a scan.
 */
export interface GcEntryRecord {
  readonly pk: string;
  readonly owner_key: 'gc';
  readonly list_sort: string;
  readonly due: number;
  readonly content_id: string;
  /** The name record this content was saved under; removed only while it still names this content. */
  readonly name_pk: string;
  /** Blob and archive keys to delete. */
  readonly blob_keys: readonly string[];
}

/**
 * `registry` item `pub#<model_id>#<kind>#<name>`: a published checkpoint's marker in GSI `by_owner`'s
 * `public` partition (same `list_sort` as the name record), so listings of what a tenant may read
 * find every published checkpoint with one Query (C4). The name record's `public` decides access;
 * the marker only lists.
 */
export interface PublicMarkerRecord {
  readonly pk: string;
  readonly owner_key: 'public';
  readonly list_sort: string;
  readonly name_pk: string;
  readonly content_id: string;
  readonly tenant: string;
  readonly model_id: string;
  readonly kind: CheckpointKind;
  readonly name: string;
}

/** `registry` item `claim#<request_id>`: a sample is claimed per request, not per model (R4). */
export interface SampleClaimRecord {
  readonly pk: string;
  readonly request_id: string;
  /** The id of the work item that holds the claim. */
  readonly claim_token: string;
  readonly work_item_id: string;
  /** Renewed by the worker while it samples; an ended lease lets the next tick claim it again. */
  readonly lease_until: number;
  readonly ttl: number;
  /** When cancel_future asked the running sample to end cancelled (W9); absent: not asked. */
  readonly cancel_requested?: number;
  /**
   * Dispatches since the claim was last deleted (commit, cut, release): each past the first is a run
   * whose worker vanished with the claim (E2's attempts, per sample). Absent on claims written before.
   */
  readonly claims?: number;
}

/** Idempotency record: the original future and the digest of the payload that created it (R7). */
export interface IdempotencyRecord {
  readonly pk: string;
  readonly tenant: string;
  readonly request_id: string;
  readonly payload_digest: string;
  /** create_model: the model the original request created (answered again to a retry). */
  readonly model_id?: string;
  readonly created_at?: number;
}

/**
 * `registry` item `seq#<model_id>`: the model's seq counter and what intake checks, so a submit reads
 * one small item and never the model row the scheduler claims (E1). Written with the model at
 * create_model; `seq` is the last seq allocated (create_model is seq 1), `last_seq_id` the client's
 * last accepted seq_id (R7), `unloaded` set by the unload_model submit (later submits answer 404).
 */
export interface SeqCounterRecord {
  readonly pk: string;
  readonly model_id: string;
  readonly tenant: string;
  readonly session_id: string;
  readonly base_model: string;
  readonly seq: number;
  readonly last_seq_id: number;
  readonly unloaded?: boolean;
  /** When the model's last training request was submitted: a training run's last request time (C1). */
  readonly updated_at: number;
  /** `by_parent` `session#<session_id>` and `list_sort`: the training runs of a session (C1). */
  readonly parent_key?: string;
  readonly list_sort?: string;
}

/** `registry` item `key#<sha256 of the key>`: the key itself is never stored. */
export interface ApiKeyRecord {
  readonly pk: string;
  readonly tenant: string;
  readonly created_at: number;
  readonly revoked_at?: number;
}

/** `registry` item `opkey#<sha256 of the key>`: an operator's key (cross-tenant, read-only views). */
export interface OperatorKeyRecord {
  readonly pk: string;
  /** Who holds it, e.g. `alice@example.com`: named in logs, never the key itself. */
  readonly operator: string;
  readonly created_at: number;
  readonly revoked_at?: number;
}

/** `registry` item `session#<session_id>`. */
export interface SessionRecord {
  readonly pk: string;
  readonly session_id: string;
  readonly tenant: string;
  readonly tags: readonly string[];
  readonly sdk_version?: string;
  readonly user_metadata?: Readonly<Record<string, unknown>>;
  readonly created_at: number;
  readonly last_seen: number;
  /**
   * Set once by `POST sessions/{id}/finish` (the first reason wins): the session has ended, its
   * heartbeat answers 410 and it takes no new models or sampling sessions.
   */
  readonly finished_at?: number;
  readonly finish_reason?: 'success' | 'errored' | 'interrupted';
  readonly finish_detail?: string;
  /** `by_owner` `session#<tenant>` and `list_sort`: the tenant's sessions, newest first (C1). */
  readonly owner_key?: string;
  readonly list_sort?: string;
}

/**
 * `registry` item `ss#<sampling_session_id>`: what its samples run on. `model_id` is the checkpoint's
 * model or `base:<base_model>`; `checkpoint_id` the sampler checkpoint's content id (absent for base).
 * Written by create_sampling_session, or by the worker when an unnamed save_weights_for_sampler commits.
 */
export interface SamplingSessionRecord {
  readonly pk: string;
  readonly sampling_session_id: string;
  readonly tenant: string;
  readonly session_id: string;
  readonly model_id: string;
  readonly base_model: string;
  readonly checkpoint_id?: string;
  readonly model_path?: string;
  readonly created_at: number;
  /** `by_parent` `session#<session_id>` and `list_sort`: the sampler ids of a session (C1). */
  readonly parent_key?: string;
  readonly list_sort?: string;
}

/**
 * `registry` item `sample#<request_id>`, written with the sample's future (W8): what produced the
 * sequences whose ids (`<request_id>:<index>`, shared/domain/sample-sequences.ts) the asample answered,
 * so a provenance span can be checked against its tenant and traced to its sampler weights.
 */
export interface SampleSequencesRecord {
  readonly pk: string;
  readonly tenant: string;
  readonly request_id: string;
  readonly sampling_session_id: string;
  readonly base_model: string;
  /** The sampler checkpoint's path and its training weights version; absent for the bare base model. */
  readonly model_path?: string;
  readonly weights_version?: number;
  readonly num_samples: number;
  readonly prompt_tokens: number;
  readonly max_tokens: number;
  readonly created_at: number;
}

/** Idempotency of create_sampling_session, `idem#ss#<session>#<sampling_session_seq_id>`. */
export interface SamplingSessionIdemRecord {
  readonly pk: string;
  readonly tenant: string;
  readonly sampling_session_id: string;
  readonly payload_digest: string;
}

/**
 * Idempotency of copy_weights, `idem#copy#<session>#<model_seq_id>`, put before the blob is copied:
 * the digest of the request's parameters, the copy's path and the blob it copies from and to, so a
 * retry or a twin finishes the same copy (R7) and a refused request copies nothing.
 */
export interface CopyIdemRecord {
  readonly pk: string;
  readonly tenant: string;
  readonly payload_digest: string;
  readonly tinker_path: string;
  /** The copy's name record key, present once the copy landed. */
  readonly name_pk: string;
  readonly content_id: string;
  readonly blob_key: string;
  readonly source_blob_key: string;
  readonly created_at: number;
}

/** Model id under which samples of a bare base model are planned (R4: always eligible). */
export function baseModelId(baseModel: string): string {
  return `base:${baseModel}`;
}
