import { type ForwardBackwardInput, passInputFromJson } from '../../backend/pass-input.js';
import type { Tunables } from '../../base/config.js';
import { RetryLaterError, ValidationError } from '../../base/errors.js';
import { deriveId, deriveSeed, mintId, mintRequestId, sha256Hex } from '../../base/ids.js';
import { checkpointContentId } from '../../base/storage-keys.js';
import { listSortKey, ownerKey, parentKey } from '../../domain/listing-keys.js';
import {
  baseModelId,
  type CheckpointKind,
  type CheckpointNameRecord,
  registryKey,
  type SamplingSessionRecord,
  type SeqCounterRecord,
} from '../../domain/records.js';
import { sampleSequenceIds } from '../../domain/sample-sequences.js';
import { cloneOfSeqId, sessionLogKey } from '../../domain/session-log.js';
import { formatCheckpointPath } from '../../domain/tinker-path.js';
import { copyCheckpoint, copyDigest, findCopy } from '../../repositories/checkpoints/copy.js';
import { checkpointNotFound, issuedPath, resolveCheckpoint } from '../../repositories/checkpoints/names.js';
import {
  createSamplingSession as storeSamplingSession,
  submitSample,
} from '../../repositories/intake/sampling.js';
import {
  type FutureAnswer,
  submitCreateModel,
  submitTrainingStep,
  submitUnload,
} from '../../repositories/intake/training.js';
import { requireModel } from '../../repositories/models.js';
import { canonicalJson, serializeBinaryPayload, serializePayload } from '../../repositories/payloads.js';
import { requireSeqCounter } from '../../repositories/seq-counters.js';
import {
  finishSession,
  putSession,
  readOwnSession,
  requireOpen,
  touchSession,
} from '../../repositories/sessions.js';
import { decodeForwardBackwardRequest, encodeStoredPass } from '../../wire/forward-backward-request.js';
import { partLimits } from '../../wire/request-parts.js';
import { ProtobufBody } from './bodies.js';
import {
  clientConfig as buildClientConfig,
  clientDynamicConfig as buildClientDynamicConfig,
  type SupportedModel,
  servedBaseModel,
  servedLimits,
  supportedModels,
} from './capabilities.js';
import type { OperationContext } from './operation-context.js';
import type {
  CheckpointRef,
  CreateModelPayload,
  LoadWeightsPayload,
  OptimStepPayload,
  SamplePayload,
  SaveWeightsForSamplerPayload,
  SaveWeightsPayload,
  UnloadModelPayload,
} from './payloads.js';
import { checkProvenance } from './provenance.js';
import {
  checkForwardInput,
  checkJsonPassParts,
  checkLoraConfig,
  checkModelInput,
  checkPassLimits,
  checkSample,
  checkSampleLimits,
  checkTargetPromptIds,
  parseRequest,
} from './request-checks.js';
import { samplingSessions } from './sampling-session-cache.js';
import * as schemas from './schemas.js';
import { type SdkFeatures, sdkConfigFlags, sdkFeatures } from './sdk-versions.js';

/**
 * The API's operations, one per endpoint: validate everything first (shape, limits, cross-field
 * rules), then read what the request names (404s), and only then write. Each takes the caller's
 * tenant (its OperationContext), never trusting ids in the body to carry it.
 */
export type { OperationContext } from './operation-context.js';

/** The release a request is answered as (W7); absent from the context: the newest. */
function featuresOf(ctx: OperationContext): SdkFeatures {
  return ctx.sdkFeatures ?? sdkFeatures(undefined);
}

export function clientConfig(ctx: OperationContext, body: unknown): ReturnType<typeof buildClientConfig> {
  const { sdk_version: named } = parseRequest(schemas.clientConfigRequest, body);
  // The body's sdk_version names the release here; the HTTP client's header stands in without it.
  const features = named === undefined ? featuresOf(ctx) : sdkFeatures(named);
  return buildClientConfig(ctx.tunables, sdkConfigFlags(features).clientConfig);
}

export { getInfo, getSampler, weightsInfo } from './info.js';

export function clientDynamicConfig(ctx: OperationContext): ReturnType<typeof buildClientDynamicConfig> {
  return buildClientDynamicConfig(sdkConfigFlags(featuresOf(ctx)).dynamicConfig);
}

export function serverCapabilities(): { supported_models: SupportedModel[] } {
  return { supported_models: supportedModels() };
}

export function telemetry(body: unknown): { status: 'accepted' } {
  parseRequest(schemas.telemetryRequest, body);
  return { status: 'accepted' };
}

/** Tags and metadata are kept on the session record, which must stay well under the 400 KB item limit. */
const SESSION_METADATA_MAX_BYTES = 16 * 1024;

/** Also create_model's: its metadata is kept on the model row, answered by GET training_runs (C1). */
function checkMetadataBytes(metadata: Readonly<Record<string, unknown>> | null | undefined): void {
  const metadataBytes = Buffer.byteLength(canonicalJson(metadata ?? {}));
  if (metadataBytes > SESSION_METADATA_MAX_BYTES) {
    throw new ValidationError(
      `user_metadata: ${metadataBytes} bytes exceeds the limit of ${SESSION_METADATA_MAX_BYTES}`,
      {
        status: 413,
        context: { field: 'user_metadata' },
      },
    );
  }
}

export async function createSession(ctx: OperationContext, body: unknown) {
  const request = parseRequest(schemas.createSessionRequest, body);
  checkMetadataBytes(request.user_metadata);
  const sessionId = mintId('session', ctx.now);
  await putSession(ctx.clients.doc, ctx.tables.registry, {
    pk: registryKey.session(sessionId),
    session_id: sessionId,
    tenant: ctx.tenant,
    tags: request.tags,
    ...(request.sdk_version === undefined ? {} : { sdk_version: request.sdk_version }),
    ...(request.user_metadata ? { user_metadata: request.user_metadata } : {}),
    created_at: ctx.now,
    last_seen: ctx.now,
    // The tenant's sessions, newest first (by_owner, C1).
    owner_key: ownerKey.sessions(ctx.tenant),
    list_sort: listSortKey(ctx.now, sessionId),
  });
  return { type: 'create_session' as const, session_id: sessionId };
}

export async function sessionHeartbeat(ctx: OperationContext, body: unknown) {
  const request = parseRequest(schemas.sessionHeartbeatRequest, body);
  await touchSession(ctx.clients.doc, ctx.tables.registry, request.session_id, ctx.tenant, ctx.now);
  return { type: 'session_heartbeat' as const };
}

/** `POST sessions/{session_id}/finish`: the session ends once (first reason wins); its heartbeat then answers 410. */
export async function finishSessionRoute(
  ctx: OperationContext,
  body: unknown,
  params: Readonly<Record<string, string>>,
) {
  const { session_id: sessionId } = parseRequest(schemas.sessionRouteParams, params);
  const request = parseRequest(schemas.finishSessionRequest, body);
  await finishSession(ctx.clients.doc, ctx.tables.registry, sessionId, ctx.tenant, {
    reason: request.reason.type,
    ...(request.detail == null ? {} : { detail: request.detail }),
    now: ctx.now,
  });
  return { type: 'finish_session' as const, session_id: sessionId };
}

export async function createModel(ctx: OperationContext, body: unknown): Promise<FutureAnswer> {
  const request = parseRequest(schemas.createModelRequest, body);
  checkMetadataBytes(request.user_metadata);
  servedBaseModel(request.base_model, 'base_model');
  checkLoraConfig(request.lora_config);
  const session = await readOwnSession(ctx.clients.doc, ctx.tables.registry, request.session_id, ctx.tenant);
  const loraConfig = {
    rank: request.lora_config.rank,
    ...(request.lora_config.seed == null ? {} : { seed: request.lora_config.seed }),
    train_unembed: request.lora_config.train_unembed,
    train_mlp: request.lora_config.train_mlp,
    train_attn: request.lora_config.train_attn,
  };
  const payload: CreateModelPayload = {
    request_type: 'create_model',
    session_id: request.session_id,
    base_model: request.base_model,
    lora_config: loraConfig,
    ...(request.user_metadata ? { user_metadata: request.user_metadata } : {}),
  };
  return submitCreateModel(
    {
      requestId: mintRequestId(ctx.now),
      modelId: mintId('model', ctx.now),
      tenant: ctx.tenant,
      sessionId: request.session_id,
      modelSeqId: request.model_seq_id,
      baseModel: request.base_model,
      loraConfig,
      ...(request.user_metadata ? { userMetadata: request.user_metadata } : {}),
      payload: serializePayload(payload),
      now: ctx.now,
      sessionFinished: session.finished_at !== undefined,
    },
    ctx,
  );
}

/** The stored form of a pass, for both wires: the canonical protobuf encoding (W4). */
interface PassToStore {
  readonly type: 'forward' | 'forward_backward';
  readonly modelId: string;
  readonly seqId: number;
  readonly input: ForwardBackwardInput;
  /** `field` prefix of the input's members in error messages ('' for protobuf bodies). */
  readonly field: string;
  /** The client's zstd body, stored as received when smaller; its canonical form is the fingerprint. */
  readonly compressed?: Uint8Array;
}

/**
 * Values the sparse tensors of one body (either wire) may expand to: they are stored dense (W4), so
 * the expansion counts against the body limit like any decompression (W3), one float32 per 4 bytes.
 */
function maxCsrDenseValues(tunables: Tunables): number {
  return Math.floor(tunables.maxBodyBytes / 4);
}

async function submitPass(ctx: OperationContext, pass: PassToStore): Promise<FutureAnswer> {
  const tokens = checkForwardInput(pass.input, pass.field, ctx.tunables);
  await checkProvenance(ctx, pass.input, pass.field);
  // The counter's read is in flight while the payload is encoded and hashed (a few ms per MB).
  const counterRead = requireSeqCounter(ctx.clients.doc, ctx.tables.registry, pass.modelId, ctx.tenant);
  counterRead.catch(() => undefined);
  // The ids live on the row and in the idempotency key, so the stored form leaves them out: the same
  // step gives the same fingerprint on either wire (and a JSON seq_id above int32 still fits).
  const canonical = encodeStoredPass({
    model_id: '',
    seq_id: 0,
    forward_only: pass.type === 'forward',
    input: pass.input,
  });
  const payload = serializeBinaryPayload(
    canonical,
    // Not when larger: skippable frames or padding would store more than the body limit allows.
    pass.compressed === undefined || pass.compressed.length >= canonical.length
      ? undefined
      : { bytes: pass.compressed, compression: 'zstd' },
  );
  const counter = await counterRead;
  checkPassLimits(pass.input, pass.field, servedLimits(counter.base_model));
  return submitTrainingStep(
    {
      requestId: mintRequestId(ctx.now),
      tenant: ctx.tenant,
      modelId: pass.modelId,
      seqId: pass.seqId,
      requestType: pass.type,
      tokens,
      payload,
      counter,
      now: ctx.now,
    },
    ctx,
  );
}

/** A protobuf `ForwardBackwardRequest` (SDK 0.25; `forward_only` is a forward), or JSON (<= 0.24.1). */
export async function forwardBackward(ctx: OperationContext, body: unknown): Promise<FutureAnswer> {
  if (body instanceof ProtobufBody) {
    const request = decodeForwardBackwardRequest(body.bytes, {
      maxCsrDenseValues: maxCsrDenseValues(ctx.tunables),
      limits: partLimits(ctx.tunables.maxDatums),
    });
    const ids = parseRequest(schemas.protobufPassIds, { model_id: request.model_id, seq_id: request.seq_id });
    return submitPass(ctx, {
      type: request.forward_only ? 'forward' : 'forward_backward',
      modelId: ids.model_id,
      seqId: ids.seq_id,
      input: request.input,
      field: '',
      ...(body.compressed === undefined ? {} : { compressed: body.compressed }),
    });
  }
  checkJsonPassParts(body, 'forward_backward_input', ctx.tunables);
  const request = parseRequest(schemas.forwardBackwardRequest, body);
  return submitJsonPass(ctx, 'forward_backward', request, request.forward_backward_input);
}

export async function forward(ctx: OperationContext, body: unknown): Promise<FutureAnswer> {
  checkJsonPassParts(body, 'forward_input', ctx.tunables);
  const request = parseRequest(schemas.forwardRequest, body);
  return submitJsonPass(ctx, 'forward', request, request.forward_input);
}

/** A JSON pass (SDK <= 0.24.1): its input member is `forward_backward_input` or `forward_input`. */
function submitJsonPass(
  ctx: OperationContext,
  type: 'forward' | 'forward_backward',
  ids: { readonly model_id: string; readonly seq_id: number },
  input: schemas.ForwardBackwardInputBody,
): Promise<FutureAnswer> {
  const field = type === 'forward' ? 'forward_input' : 'forward_backward_input';
  return submitPass(ctx, {
    type,
    modelId: ids.model_id,
    seqId: ids.seq_id,
    input: passInputFromJson(input, field, maxCsrDenseValues(ctx.tunables)),
    field,
  });
}

export async function optimStep(ctx: OperationContext, body: unknown): Promise<FutureAnswer> {
  const request = parseRequest(schemas.optimStepRequest, body);
  const counter = await requireSeqCounter(ctx.clients.doc, ctx.tables.registry, request.model_id, ctx.tenant);
  const payload: OptimStepPayload = {
    request_type: 'optim_step',
    seq_id: request.seq_id,
    adam_params: request.adam_params,
  };
  return submitTrainingStep(
    {
      requestId: mintRequestId(ctx.now),
      tenant: ctx.tenant,
      modelId: request.model_id,
      seqId: request.seq_id,
      requestType: 'optim_step',
      tokens: 0,
      payload: serializePayload(payload),
      counter,
      now: ctx.now,
    },
    ctx,
  );
}

function checkpointRef(modelId: string, kind: CheckpointKind, name: string): CheckpointRef {
  return {
    pk: registryKey.checkpointName(modelId, kind, name),
    model_id: modelId,
    kind,
    name,
    path: formatCheckpointPath({ modelId, kind, name }),
  };
}

function reservation(
  ref: CheckpointRef,
  tenant: string,
  requestId: string,
  userMetadata: Readonly<Record<string, string>> | undefined,
): CheckpointNameRecord {
  return {
    pk: ref.pk,
    tenant,
    model_id: ref.model_id,
    kind: ref.kind,
    name: ref.name,
    path: ref.path,
    request_id: requestId,
    status: 'pending',
    content_id: checkpointContentId(requestId),
    // The reservation is put whole, so an overwrite without metadata leaves none (W7).
    ...(userMetadata === undefined ? {} : { user_metadata: userMetadata }),
  };
}

/** A save's `user_metadata`, checked for size as session metadata is; absent when not given. */
function checkpointMetadata(
  metadata: Readonly<Record<string, string>> | null | undefined,
): Readonly<Record<string, string>> | undefined {
  checkMetadataBytes(metadata);
  return metadata ?? undefined;
}

export async function saveWeights(ctx: OperationContext, body: unknown): Promise<FutureAnswer> {
  const request = parseRequest(schemas.saveWeightsRequest, body);
  const userMetadata = checkpointMetadata(request.user_metadata);
  const counter = await requireSeqCounter(ctx.clients.doc, ctx.tables.registry, request.model_id, ctx.tenant);
  const requestId = mintRequestId(ctx.now);
  const ref = checkpointRef(request.model_id, 'weights', request.path);
  const payload: SaveWeightsPayload = {
    request_type: 'save_weights',
    seq_id: request.seq_id,
    checkpoint: ref,
    ...(request.ttl_seconds == null ? {} : { ttl_seconds: request.ttl_seconds }),
    ...(userMetadata === undefined ? {} : { user_metadata: userMetadata }),
  };
  return submitTrainingStep(
    {
      requestId,
      tenant: ctx.tenant,
      modelId: request.model_id,
      seqId: request.seq_id,
      requestType: 'save_weights',
      tokens: 0,
      payload: serializePayload(payload),
      counter,
      reservation: reservation(ref, ctx.tenant, requestId, userMetadata),
      overwrite: request.overwrite === true,
      ...(request.ttl_seconds == null ? {} : { ttlSeconds: request.ttl_seconds }),
      now: ctx.now,
    },
    ctx,
  );
}

/**
 * Named: reserves `tinker://<model>/sampler_weights/<name>`. Unnamed (`sampling_session_seq_id`): the sampling session
 * id is derived from (model, seq_id), so a retry names the same one; it also names the anonymous
 * checkpoint, and the worker writes the sampling session record when the save commits.
 */
export async function saveWeightsForSampler(ctx: OperationContext, body: unknown): Promise<FutureAnswer> {
  const request = parseRequest(schemas.saveWeightsForSamplerRequest, body);
  const userMetadata = checkpointMetadata(request.user_metadata);
  if (userMetadata !== undefined && request.path == null) {
    // An unnamed save is reached through its sampling session and never listed: nothing would answer it.
    throw new ValidationError(
      'user_metadata: kept only on named saves (give path, not sampling_session_seq_id)',
      {
        context: { field: 'user_metadata' },
      },
    );
  }
  const counter: SeqCounterRecord = await requireSeqCounter(
    ctx.clients.doc,
    ctx.tables.registry,
    request.model_id,
    ctx.tenant,
  );
  const requestId = mintRequestId(ctx.now);
  let payload: SaveWeightsForSamplerPayload;
  if (request.path != null) {
    payload = {
      request_type: 'save_weights_for_sampler',
      seq_id: request.seq_id,
      checkpoint: checkpointRef(request.model_id, 'sampler', request.path),
      ...(request.ttl_seconds == null ? {} : { ttl_seconds: request.ttl_seconds }),
      ...(userMetadata === undefined ? {} : { user_metadata: userMetadata }),
    };
  } else {
    const samplingSessionId = deriveId('sampling', request.model_id, request.seq_id);
    payload = {
      request_type: 'save_weights_for_sampler',
      seq_id: request.seq_id,
      checkpoint: checkpointRef(request.model_id, 'sampler', samplingSessionId),
      sampling_session: {
        sampling_session_id: samplingSessionId,
        session_id: counter.session_id,
        sampling_session_seq_id: request.sampling_session_seq_id ?? 0,
        base_model: counter.base_model,
      },
      ...(request.ttl_seconds == null ? {} : { ttl_seconds: request.ttl_seconds }),
    };
  }
  return submitTrainingStep(
    {
      requestId,
      tenant: ctx.tenant,
      modelId: request.model_id,
      seqId: request.seq_id,
      requestType: 'save_weights_for_sampler',
      tokens: 0,
      payload: serializePayload(payload),
      counter,
      reservation: reservation(payload.checkpoint, ctx.tenant, requestId, payload.user_metadata),
      ...(payload.ttl_seconds === undefined ? {} : { ttlSeconds: payload.ttl_seconds }),
      now: ctx.now,
    },
    ctx,
  );
}

/**
 * copy_weights: answered directly with the copy's path (no future). The source must be committed (else
 * 408, which the SDK retries); an unknown, another tenant's unpublished or expired one is a 404 (C6).
 * Access tokens for other tenants' weights are not offered: publishing (C4) is how a checkpoint is shared.
 */
export async function copyWeights(ctx: OperationContext, body: unknown): Promise<{ tinker_path: string }> {
  const request = parseRequest(schemas.copyWeightsRequest, body);
  if (request.weights_access_token != null) {
    throw new ValidationError(
      'weights_access_token: access tokens are not offered; the owner publishes a checkpoint to share it',
      { context: { field: 'weights_access_token' } },
    );
  }
  const session = await readOwnSession(ctx.clients.doc, ctx.tables.registry, request.session_id, ctx.tenant);
  const key = { sessionId: request.session_id, modelSeqId: request.model_seq_id };
  const digest = copyDigest(request);
  // A retry answers the original copy, even after the finish or the source's deletion (R7, W9).
  const settled = await findCopy(ctx, key, { tenant: ctx.tenant, digest });
  if (settled?.landed) return { tinker_path: settled.record.tinker_path };
  // A copy settled before the finish is finished after it; a new one is refused.
  if (settled === undefined) requireOpen(session);
  const source = await readableSavedCheckpoint(ctx, request.source_path, 'any', 'source_path');
  // The checkpoint's run: the caller's, or the tenant's that published it (C4).
  const owner = await requireModel(ctx.clients.doc, ctx.tables.models, source.model_id, source.tenant);
  return copyCheckpoint(
    {
      source,
      tenant: ctx.tenant,
      sessionId: request.session_id,
      modelId: deriveId('model', 'copy', request.session_id, request.model_seq_id),
      modelSeqId: request.model_seq_id,
      requestId: mintRequestId(ctx.now),
      digest,
      ...(settled === undefined ? {} : { settled: settled.record }),
      baseModel: owner.base_model,
      loraConfig: owner.lora_config,
      ...(request.ttl_seconds == null ? {} : { ttlSeconds: request.ttl_seconds }),
      now: ctx.now,
    },
    ctx,
  );
}

/** The checkpoint may still be pending: an earlier step of a sequence may be the one saving it. */
export async function loadWeights(ctx: OperationContext, body: unknown): Promise<FutureAnswer> {
  const request = parseRequest(schemas.loadWeightsRequest, body);
  const counter = await requireSeqCounter(ctx.clients.doc, ctx.tables.registry, request.model_id, ctx.tenant);
  const checkpoint = await readableCheckpoint(ctx, request.path, 'weights', 'path');
  const payload: LoadWeightsPayload = {
    request_type: 'load_weights',
    seq_id: request.seq_id,
    checkpoint: {
      ...checkpointRef(checkpoint.model_id, checkpoint.kind, checkpoint.name),
      content_id: checkpoint.content_id,
    },
    optimizer: request.optimizer,
  };
  return submitTrainingStep(
    {
      requestId: mintRequestId(ctx.now),
      tenant: ctx.tenant,
      modelId: request.model_id,
      seqId: request.seq_id,
      requestType: 'load_weights',
      tokens: 0,
      payload: serializePayload(payload),
      counter,
      now: ctx.now,
    },
    ctx,
  );
}

export async function unloadModel(ctx: OperationContext, body: unknown): Promise<FutureAnswer> {
  const request = parseRequest(schemas.unloadModelRequest, body);
  const counter = await requireSeqCounter(ctx.clients.doc, ctx.tables.registry, request.model_id, ctx.tenant);
  const payload: UnloadModelPayload = { request_type: 'unload_model' };
  return submitUnload(
    {
      requestId: mintRequestId(ctx.now),
      tenant: ctx.tenant,
      modelId: request.model_id,
      payload: serializePayload(payload),
      counter,
      now: ctx.now,
    },
    ctx,
  );
}

/**
 * From a sampler checkpoint (`model_path`) or a bare base model. A checkpoint that exists but is not
 * committed yet answers 408, which the SDK retries.
 */
export async function createSamplingSession(ctx: OperationContext, body: unknown) {
  const request = parseRequest(schemas.createSamplingSessionRequest, body);
  const session = await readOwnSession(ctx.clients.doc, ctx.tables.registry, request.session_id, ctx.tenant);
  const samplingSessionId = mintId('sampling', ctx.now);
  let target: Pick<SamplingSessionRecord, 'model_id' | 'base_model' | 'checkpoint_id' | 'model_path'>;
  if (request.model_path) {
    const checkpoint = await readableSavedCheckpoint(ctx, request.model_path, 'sampler', 'model_path');
    // The checkpoint's owner: the caller, or the tenant that published it (C4).
    const owner = await requireSeqCounter(
      ctx.clients.doc,
      ctx.tables.registry,
      checkpoint.model_id,
      checkpoint.tenant,
    );
    if (request.base_model && request.base_model !== owner.base_model) {
      throw new ValidationError(
        `base_model: ${request.model_path} was trained from ${owner.base_model}, not ${request.base_model}`,
        { context: { field: 'base_model' } },
      );
    }
    target = {
      model_id: checkpoint.model_id,
      base_model: owner.base_model,
      checkpoint_id: checkpoint.content_id,
      // The SDK's form even when the client named a legacy path (W5): GET samplers/{id} answers it.
      model_path: issuedPath(checkpoint),
    };
  } else {
    const baseModel = servedBaseModel(request.base_model as string, 'base_model').name;
    target = { model_id: baseModelId(baseModel), base_model: baseModel };
  }
  return storeSamplingSession(
    {
      attemptId: mintRequestId(ctx.now),
      record: {
        pk: registryKey.samplingSession(samplingSessionId),
        sampling_session_id: samplingSessionId,
        tenant: ctx.tenant,
        session_id: request.session_id,
        ...target,
        created_at: ctx.now,
        // A sampler of its session (by_parent, C1).
        parent_key: parentKey.session(request.session_id),
        list_sort: listSortKey(ctx.now, samplingSessionId),
      },
      samplingSessionSeqId: request.sampling_session_seq_id,
      digest: sha256Hex(canonicalJson({ model_path: request.model_path, base_model: request.base_model })),
      sessionFinished: session.finished_at !== undefined,
    },
    ctx,
  ).then((answer) => ({ type: 'create_sampling_session' as const, ...answer }));
}

/** The asample answer (W8): the future, and one sequence id per sample in the order of the sequences. */
export interface SampleAnswer extends FutureAnswer {
  /** Left out for SDK releases up to 0.25.0, which got the bare future (W7). */
  readonly sample_sequence_ids?: string[];
}

export async function asample(ctx: OperationContext, body: unknown): Promise<SampleAnswer> {
  const request = parseRequest(schemas.sampleRequest, body);
  const tokens = checkSample(request, ctx.tunables);
  const promptTokens = checkModelInput(request.prompt, 'prompt');
  const targetIds =
    request.target_prompt_logprobs == null
      ? undefined
      : checkTargetPromptIds(request.target_prompt_logprobs, promptTokens);
  // Read once per container: the record never changes (./sampling-session-cache.ts).
  const session = await samplingSessions.require(
    ctx.clients.doc,
    ctx.tables.registry,
    request.sampling_session_id,
    ctx.tenant,
  );
  checkSampleLimits(request, promptTokens, targetIds, servedLimits(session.base_model));
  // A session on a checkpoint deleted, expired or unpublished since it was made names nothing (C3-C5).
  let weightsVersion: number | undefined;
  if (session.checkpoint_id !== undefined && session.model_path !== undefined) {
    const checkpoint = await readableCheckpoint(ctx, session.model_path, 'sampler', 'sampling_session_id');
    if (checkpoint.content_id !== session.checkpoint_id) {
      throw checkpointNotFound(session.model_path, 'sampling_session_id');
    }
    weightsVersion = checkpoint.weights_version;
  }
  const payload: SamplePayload = {
    request_type: 'sample',
    sampling_session_id: session.sampling_session_id,
    seq_id: request.seq_id,
    base_model: session.base_model,
    ...(session.checkpoint_id === undefined
      ? {}
      : {
          checkpoint: {
            model_id: session.model_id,
            content_id: session.checkpoint_id,
            ...(session.model_path === undefined ? {} : { path: session.model_path }),
          },
        }),
    num_samples: request.num_samples,
    prompt: request.prompt,
    sampling_params: {
      ...request.sampling_params,
      seed: request.sampling_params.seed ?? deriveSeed(session.sampling_session_id, request.seq_id),
    },
    prompt_logprobs: request.prompt_logprobs ?? false,
    topk_prompt_logprobs: request.topk_prompt_logprobs,
    ...(request.topk_sample_logprobs > 0 ? { topk_sample_logprobs: request.topk_sample_logprobs } : {}),
    ...(request.prompt_alt_tokens_k > 0 ? { prompt_alt_tokens_k: request.prompt_alt_tokens_k } : {}),
    ...(targetIds === undefined ? {} : { target_prompt_logprobs: targetIds }),
  };
  const requestId = mintRequestId(ctx.now);
  const answer = await submitSample(
    {
      requestId,
      tenant: ctx.tenant,
      samplingSession: session,
      seqId: request.seq_id,
      sessionLog: sessionLogKey(session.sampling_session_id, cloneOfSeqId(request.seq_id)),
      tokens,
      payload: serializePayload(payload),
      now: ctx.now,
      sequences: {
        pk: registryKey.sampleSequences(requestId),
        tenant: ctx.tenant,
        request_id: requestId,
        sampling_session_id: session.sampling_session_id,
        base_model: session.base_model,
        ...(session.model_path === undefined ? {} : { model_path: session.model_path }),
        ...(weightsVersion === undefined ? {} : { weights_version: weightsVersion }),
        num_samples: request.num_samples,
        prompt_tokens: promptTokens,
        max_tokens: request.sampling_params.max_tokens,
        created_at: ctx.now,
      },
    },
    ctx,
  );
  if (ctx.sdkFeatures?.sampleSequenceIds === false) return answer;
  // A retry answers the original request, and so the original's ids.
  return { ...answer, sample_sequence_ids: sampleSequenceIds(answer.request_id, request.num_samples) };
}

/** A live checkpoint this tenant may read (its own or a published one, C4), saved or still saving. */
function readableCheckpoint(
  ctx: OperationContext,
  path: string,
  kind: Parameters<typeof resolveCheckpoint>[3],
  field: string,
): ReturnType<typeof resolveCheckpoint> {
  return resolveCheckpoint(ctx.clients.doc, ctx.tables.registry, path, kind, ctx.tenant, field, {
    now: ctx.now,
    access: 'read',
  });
}

/** `readableCheckpoint`, committed: one still saving is a retry-later naming `field`. */
async function readableSavedCheckpoint(
  ctx: OperationContext,
  path: string,
  kind: Parameters<typeof resolveCheckpoint>[3],
  field: string,
): Promise<Awaited<ReturnType<typeof resolveCheckpoint>>> {
  const checkpoint = await readableCheckpoint(ctx, path, kind, field);
  if (checkpoint.status !== 'committed') {
    throw new RetryLaterError(`${field}: checkpoint ${path} is not saved yet; retry shortly`, {
      context: { field },
    });
  }
  return checkpoint;
}
