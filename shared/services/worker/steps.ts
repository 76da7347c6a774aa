import type { S3Client } from '@aws-sdk/client-s3';
import type { AdamParams, Backend, BackendState, LoraConfigInput } from '../../backend/backend.js';
import { StepUserError } from '../../base/errors.js';
import { requestIdTime } from '../../base/ids.js';
import { logger } from '../../base/logger.js';
import { checkpointContentId, storageKeys } from '../../base/storage-keys.js';
import { listSortKey, parentKey } from '../../domain/listing-keys.js';
import type { WorkItemModel, WorkItemStep } from '../../domain/planning/work-item.js';
import { type FutureError, registryKey, type SamplingSessionRecord } from '../../domain/records.js';
import { issuedPath } from '../../repositories/checkpoints/names.js';
import type { Tables } from '../../repositories/tables.js';
import { loadCheckpointBlob } from './checkpoint-source.js';
import type { CheckpointEffect } from './commit-items.js';
import type { PassBatcher } from './pass-batcher.js';
import * as results from './results.js';
import {
  blobSize,
  discardBlob,
  exportCheckpoint,
  fetchesToFiles,
  importCheckpoint,
  type LocalBlob,
  type PlannedArchive,
  planArchive,
  putArchive,
  putBlob,
} from './state-blobs.js';
import { MalformedPayloadError, parseStepPayload, passInputOf } from './step-payloads.js';
import type { WorkerClients } from './types.js';

/**
 * One model's steps, run in seq order against an in-memory state (R1). The backend never mutates a
 * state, so a step that fails leaves the state as it was: no partial effect (E6).
 */

/** The running state of one model's part of a work item. */
export interface PartState {
  state: BackendState | undefined;
  /** A step replaced the state loaded from `base_state_ref`: it is written under a new key. */
  stateChanged: boolean;
  unloaded: boolean;
  /**
   * Checkpoints saved by earlier steps of this part, by content id; written to S3 before the commit
   * (`putSavedCheckpoints`), their spool files removed when the part ends (`discardSavedCheckpoints`).
   */
  readonly saved: Map<string, SavedCheckpoint>;
}

export interface SavedCheckpoint {
  readonly key: string;
  readonly blob: LocalBlob;
  /** Its tar (C2), written beside it. */
  readonly archive?: PlannedArchive;
}

/** Writes a part's saved checkpoints and their archives (before its commit, E4). */
export async function putSavedCheckpoints(
  s3: S3Client,
  bucket: string,
  saved: ReadonlyMap<string, SavedCheckpoint>,
): Promise<void> {
  await Promise.all(
    [...saved.values()].flatMap((checkpoint) => [
      putBlob(s3, bucket, checkpoint.key, checkpoint.blob),
      ...(checkpoint.archive === undefined
        ? []
        : [putArchive(s3, bucket, checkpoint.archive, checkpoint.blob)]),
    ]),
  );
}

/** Removes the spool files of a part's saved checkpoints (the part committed or failed). */
export async function discardSavedCheckpoints(saved: ReadonlyMap<string, SavedCheckpoint>): Promise<void> {
  await Promise.all([...saved.values()].map((checkpoint) => discardBlob(checkpoint.blob)));
}

export type StepResult =
  | { readonly status: 'completed'; readonly result: unknown }
  | { readonly status: 'failed'; readonly error: FutureError };

export interface StepExecution {
  readonly request_id: string;
  readonly outcome: StepResult;
  readonly checkpoint?: CheckpointEffect;
  readonly sampling_session?: SamplingSessionRecord;
}

export interface StepEnv {
  readonly backend: Backend;
  readonly passes: PassBatcher;
  readonly clients: WorkerClients;
  readonly tables: Tables<'futures' | 'registry'>;
  readonly bucket: string;
  readonly model: WorkItemModel;
  /** The run's id: a save's blob and archive keys are this run's (E3). */
  readonly run: string;
  readonly now: () => number;
}

const userError = (message: string): FutureError => ({ message, category: 'user' });

/**
 * Runs one step. Fail steps record their error and read nothing. A `StepUserError` fails only this
 * step; a malformed stored payload fails it as a server error (re-running cannot help); any other
 * error is an infrastructure error and is thrown, failing the model's part.
 */
export async function executeStep(step: WorkItemStep, part: PartState, env: StepEnv): Promise<StepExecution> {
  if (step.fail !== undefined)
    return { request_id: step.request_id, outcome: { status: 'failed', error: step.fail } };
  try {
    if (part.unloaded) throw new StepUserError(`Model ${env.model.model_id} is unloaded`);
    return await runStep(step, part, env);
  } catch (error) {
    if (error instanceof StepUserError) {
      return {
        request_id: step.request_id,
        outcome: { status: 'failed', error: userError(error.message) },
        ...releaseOnFailure(step),
      };
    }
    if (error instanceof MalformedPayloadError) {
      return {
        request_id: step.request_id,
        outcome: { status: 'failed', error: { message: error.message, category: 'server' } },
      };
    }
    throw error;
  }
}

/** A failed save frees the name it reserved at intake, so the name is never left half-made. */
function releaseOnFailure(step: WorkItemStep): { checkpoint?: CheckpointEffect } {
  if (step.request_type !== 'save_weights' && step.request_type !== 'save_weights_for_sampler') return {};
  try {
    const parsed = parseStepPayload(step.request_type, step.request_id, step.payload);
    return { checkpoint: { action: 'release', pk: parsed.checkpoint.pk } };
  } catch {
    return {};
  }
}

/**
 * A checkpoint's tar (from a reference blob, or an engine's PEFT adapter tar), or none when the
 * backend's blob is neither: the save still succeeds, without `archive_key`. Planned from the blob's
 * headers (`checkpointArchivePlan`): the tar is assembled as it is uploaded.
 */
async function archiveOf(
  blob: LocalBlob,
  requestId: string,
  modelId: string,
  contentId: string,
  run: string,
): Promise<PlannedArchive | undefined> {
  const submitted = requestIdTime(requestId);
  try {
    const plan = await planArchive(blob, Number.isFinite(submitted) ? submitted : 0);
    return { key: storageKeys.archive(modelId, contentId, run), plan };
  } catch (error) {
    logger.warn('checkpoint saved without an archive', {
      content_id: contentId,
      error: error instanceof Error ? error.message : String(error),
    });
    return undefined;
  }
}

function requireState(part: PartState, modelId: string): BackendState {
  if (part.state === undefined) {
    throw new StepUserError(`Model ${modelId} has no weights: its create_model did not succeed`);
  }
  return part.state;
}

function completed(step: WorkItemStep, result: unknown, extra: Partial<StepExecution> = {}): StepExecution {
  return { request_id: step.request_id, outcome: { status: 'completed', result }, ...extra };
}

async function runStep(step: WorkItemStep, part: PartState, env: StepEnv): Promise<StepExecution> {
  const { backend, model } = env;
  const modelId = model.model_id;
  switch (step.request_type) {
    case 'create_model': {
      const payload = parseStepPayload('create_model', step.request_id, step.payload);
      part.state = await backend.createModel({
        base_model: payload.base_model,
        lora_config: payload.lora_config as unknown as LoraConfigInput,
      });
      part.stateChanged = true;
      return completed(step, results.createModelResult(modelId));
    }
    case 'forward':
    case 'forward_backward': {
      const outcome = await env.passes.run({
        type: step.request_type,
        state: requireState(part, modelId),
        input: passInputOf(step.request_id, step.request_type, step.payload),
      });
      if (!outcome.ok) throw outcome.error;
      if (step.request_type === 'forward_backward') {
        part.state = outcome.state;
        part.stateChanged = true;
      }
      return completed(step, results.passResult(outcome.result));
    }
    case 'optim_step': {
      const payload = parseStepPayload('optim_step', step.request_id, step.payload);
      const outcome = await backend.optimStep(requireState(part, modelId), payload.adam_params as AdamParams);
      part.state = outcome.state;
      part.stateChanged = true;
      return completed(step, results.optimStepResult(outcome.result));
    }
    case 'save_weights':
    case 'save_weights_for_sampler': {
      const payload = parseStepPayload(step.request_type, step.request_id, step.payload);
      if (payload.checkpoint.model_id !== modelId) {
        throw new MalformedPayloadError(step.request_id, 'the checkpoint names another model');
      }
      const kind = step.request_type === 'save_weights' ? 'training' : 'sampler';
      const state = requireState(part, modelId);
      const contentId = checkpointContentId(step.request_id);
      // Under this run's keys (E3): another run of the same save may export other bytes.
      const key = storageKeys.checkpoint(modelId, contentId, env.run);
      const blob = await exportCheckpoint(backend, state, kind);
      // The archive is built once, here, from the exported blob (C2): the route only presigns it. Its
      // mtimes are the save's submit time (its request id's), so it depends on the blob alone.
      // (archiveOf never throws: the blob's spool file is the part's from here.)
      const archive = await archiveOf(blob, step.request_id, modelId, contentId, env.run);
      part.saved.set(contentId, { key, blob, ...(archive === undefined ? {} : { archive }) });
      const session = 'sampling_session' in payload ? payload.sampling_session : undefined;
      const checkpoint: CheckpointEffect = {
        action: 'commit',
        pk: payload.checkpoint.pk,
        model_id: modelId,
        content_id: contentId,
        blob_key: key,
        ...(archive === undefined ? {} : { archive_key: archive.key }),
        size_bytes: blobSize(blob),
        weights_version: state.weights_version,
        ...(payload.ttl_seconds === undefined ? {} : { ttl_seconds: payload.ttl_seconds }),
        // Named saves are listed (C1); an unnamed sampler save is reached through its sampling session.
        ...(session === undefined
          ? {
              listing: {
                tenant: model.tenant,
                model_id: modelId,
                kind: payload.checkpoint.kind,
                name: payload.checkpoint.name,
              },
            }
          : {}),
      };
      // From the name, not the payload's `path`: a payload stored before W5 carries the legacy form.
      const path = issuedPath(payload.checkpoint);
      if (step.request_type === 'save_weights') {
        return completed(step, results.saveWeightsResult(path), { checkpoint });
      }
      if (session === undefined) {
        return completed(step, results.saveWeightsForSamplerResult({ path }), {
          checkpoint,
        });
      }
      const createdAt = env.now();
      const record: SamplingSessionRecord = {
        pk: registryKey.samplingSession(session.sampling_session_id),
        sampling_session_id: session.sampling_session_id,
        tenant: model.tenant,
        session_id: session.session_id,
        model_id: modelId,
        base_model: session.base_model,
        checkpoint_id: contentId,
        model_path: path,
        created_at: createdAt,
        parent_key: parentKey.session(session.session_id),
        list_sort: listSortKey(createdAt, session.sampling_session_id),
      };
      return completed(
        step,
        results.saveWeightsForSamplerResult({ sampling_session_id: session.sampling_session_id }),
        { checkpoint, sampling_session: record },
      );
    }
    case 'load_weights': {
      const payload = parseStepPayload('load_weights', step.request_id, step.payload);
      const saved = new Map([...part.saved].map(([id, checkpoint]) => [id, checkpoint.blob]));
      const blob = await loadCheckpointBlob(payload.checkpoint, saved, {
        ...env,
        asFile: await fetchesToFiles(backend),
        tenant: env.model.tenant,
        now: env.now(),
      });
      try {
        part.state = await importCheckpoint(backend, requireState(part, modelId), blob, {
          optimizer: payload.optimizer,
        });
      } finally {
        if (saved.get(payload.checkpoint.content_id) !== blob) await discardBlob(blob);
      }
      part.stateChanged = true;
      return completed(step, results.loadWeightsResult(issuedPath(payload.checkpoint)));
    }
    case 'unload_model':
      parseStepPayload('unload_model', step.request_id, step.payload);
      part.unloaded = true;
      return completed(step, results.unloadModelResult(modelId));
  }
}
