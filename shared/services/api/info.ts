import { config } from '../../base/config.js';
import { NotFoundError, RetryLaterError } from '../../base/errors.js';
import { formatCheckpointPath, parseCheckpointPath } from '../../domain/tinker-path.js';
import {
  checkpointNotFound,
  resolveCheckpoint,
  staleReservation,
} from '../../repositories/checkpoints/names.js';
import { requireModel } from '../../repositories/models.js';
import { requireSamplingSession } from '../../repositories/sampling-sessions.js';
import {
  type BaseModelLimits,
  baseModelLimits,
  DEFAULT_BASE_MODEL,
  ENGINE_ARCH,
  REFERENCE_ARCH,
} from './capabilities.js';
import type { OperationContext } from './operation-context.js';
import { parseRequest } from './request-checks.js';
import * as schemas from './schemas.js';

/**
 * The read-only endpoints the SDK's clients call besides submits (W6): a model's info (get_info, for
 * `TrainingClient.get_tokenizer`), a checkpoint's LoRA config (weights_info, for
 * `create_training_client_from_state`) and a sampling session (GET samplers/{id}). Each reads one or
 * two small items and stores nothing; another tenant's id answers exactly what an unknown one does.
 */

export interface GetInfoAnswer {
  readonly type: 'get_info';
  readonly model_id: string;
  readonly model_name: string;
  readonly is_lora: true;
  readonly lora_rank: number;
  /** `ModelData` (the SDK ignores fields it does not know): its limits too, while served (B2). */
  readonly model_data: {
    readonly model_name: string;
    readonly arch: string;
    readonly tokenizer_id?: string;
  } & Partial<BaseModelLimits>;
}

export interface WeightsInfoAnswer {
  readonly base_model: string;
  readonly is_lora: true;
  readonly lora_rank: number;
  readonly train_unembed: boolean;
  readonly train_mlp: boolean;
  readonly train_attn: boolean;
}

export interface GetSamplerAnswer {
  readonly sampler_id: string;
  readonly base_model: string;
  readonly model_path?: string;
}

export async function getInfo(ctx: OperationContext, body: unknown): Promise<GetInfoAnswer> {
  const request = parseRequest(schemas.getInfoRequest, body);
  const model = await requireModel(ctx.clients.doc, ctx.tables.models, request.model_id, ctx.tenant);
  // The model's base as configured now (G6); one no longer served still answers, without a tokenizer
  // or limits.
  const base = config().baseModels.find((candidate) => candidate.name === model.base_model);
  const tokenizerId = base?.tokenizer_id;
  return {
    type: 'get_info',
    model_id: model.model_id,
    model_name: model.base_model,
    is_lora: true,
    lora_rank: model.lora_config.rank,
    model_data: {
      // get_tokenizer asserts model_name; without tokenizer_id the SDK guesses an id from it.
      model_name: model.base_model,
      arch: model.base_model === DEFAULT_BASE_MODEL ? REFERENCE_ARCH : ENGINE_ARCH,
      ...(tokenizerId === undefined ? {} : { tokenizer_id: tokenizerId }),
      ...(base === undefined ? {} : baseModelLimits(base)),
    },
  };
}

/**
 * Either kind of checkpoint, in every path form. A checkpoint still being saved answers 408, which the
 * SDK retries (as create_sampling_session does); one whose save failed names nothing, so 404.
 */
export async function weightsInfo(ctx: OperationContext, body: unknown): Promise<WeightsInfoAnswer> {
  const { tinker_path: path } = parseRequest(schemas.weightsInfoRequest, body);
  const field = 'tinker_path';
  const checkpoint = await resolveCheckpoint(
    ctx.clients.doc,
    ctx.tables.registry,
    path,
    'any',
    ctx.tenant,
    field,
    { now: ctx.now, access: 'read' },
  );
  if (checkpoint.status !== 'committed') {
    if (await staleReservation(ctx.clients.doc, ctx.tables.futures, checkpoint))
      throw checkpointNotFound(path, field);
    throw new RetryLaterError(`${field}: checkpoint ${path} is not saved yet; retry shortly`, {
      context: { field },
    });
  }
  // The checkpoint's owner's model: the caller's, or a published one's (C4).
  const model = await requireModel(
    ctx.clients.doc,
    ctx.tables.models,
    checkpoint.model_id,
    checkpoint.tenant,
  ).catch((error) => {
    // The checkpoint's model is its owner's by construction; a missing row still reads as "not found".
    throw error instanceof NotFoundError ? checkpointNotFound(path, field) : error;
  });
  const lora = model.lora_config;
  return {
    base_model: model.base_model,
    is_lora: true,
    lora_rank: lora.rank,
    // create_model stores each flag (schemas.loraConfig defaults them to true); absent reads as true.
    train_unembed: lora.train_unembed ?? true,
    train_mlp: lora.train_mlp ?? true,
    train_attn: lora.train_attn ?? true,
  };
}

export async function getSampler(
  ctx: OperationContext,
  params: Readonly<Record<string, string>>,
): Promise<GetSamplerAnswer> {
  const { sampler_id: samplerId } = parseRequest(schemas.getSamplerParams, params);
  const session = await requireSamplingSession(
    ctx.clients.doc,
    ctx.tables.registry,
    samplerId,
    ctx.tenant,
    'sampler_id',
  );
  return {
    sampler_id: session.sampling_session_id,
    base_model: session.base_model,
    ...(session.model_path === undefined ? {} : { model_path: sdkPath(session.model_path) }),
  };
}

/** A session written before W5 may hold the legacy sampler form: answer the SDK's form of it. */
function sdkPath(stored: string): string {
  const parsed = parseCheckpointPath(stored);
  return parsed === undefined ? stored : formatCheckpointPath(parsed);
}
