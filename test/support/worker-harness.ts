import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { GetCommand, ScanCommand } from '@aws-sdk/lib-dynamodb';
import type { Backend, BackendState, SamplingParams } from '../../shared/backend/backend.js';
import { toSampleResult } from '../../shared/backend/backend.js';
import {
  type DatumJson,
  type ForwardBackwardInputJson,
  modelInputFromJson,
  passInputFromJson,
} from '../../shared/backend/pass-input.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { BASE_MODELS_VAR, config, resetConfig } from '../../shared/base/config.js';
import { StepUserError } from '../../shared/base/errors.js';
import { deriveId, deriveSeed, mintRequestId } from '../../shared/base/ids.js';
import { logger } from '../../shared/base/logger.js';
import {
  assembleWorkItem,
  payloadsToRead,
  type SampleClaimed,
} from '../../shared/domain/planning/assemble.js';
import { claimFor, type ModelClaim, replanFor } from '../../shared/domain/planning/claim.js';
import { DEFAULT_PLAN_LIMITS, type PlanLimits } from '../../shared/domain/planning/limits.js';
import { plan } from '../../shared/domain/planning/planner.js';
import { manifestFor, type WorkItem, type WorkManifest } from '../../shared/domain/planning/work-item.js';
import type { FutureRow, LiveRow, ModelRow } from '../../shared/domain/records.js';
import { scanLiveIndex } from '../../shared/repositories/live-index.js';
import { claimModel, readModelRow, readModels, replanModel } from '../../shared/repositories/models.js';
import { readStoredPayload } from '../../shared/repositories/payloads.js';
import { claimSample, readLiveSampleClaims } from '../../shared/repositories/samples/claims.js';
import { resolveTables } from '../../shared/repositories/tables.js';
import * as ops from '../../shared/services/api/operations.js';
import { retrieveFuture } from '../../shared/services/api/retrieve.js';
import { writeWorkItem } from '../../shared/services/scheduler/dispatch.js';
import { passResult } from '../../shared/services/worker/results.js';
import { apiDeps, setupTestCloud, type TestCloud } from './cloud.js';

/**
 * The worker's integration suites: requests submitted through the API's own operations (so rows and
 * payloads are exactly what intake writes), a stand-in for the scheduler built from the planner's pure
 * parts and the repositories' own reads and claims (scan the live index, read model rows strongly,
 * plan, claim, read payloads, assemble, write the work item), the sweeper's re-plan write, and the sequential oracle of R1: the same
 * requests run one by one, in submit order, directly on the reference backend.
 */

export const BASE_MODEL = 'reference/byte-lm';
const LEASE_MS = 60_000;

export const bytesOf = (text: string) => [...Buffer.from(text, 'utf8')];

export function textDatum(text: string, weights?: number[]): DatumJson {
  const all = bytesOf(text);
  const tokens = all.slice(0, -1);
  return {
    model_input: { chunks: [{ type: 'encoded_text', tokens }] },
    loss_fn_inputs: {
      target_tokens: { data: all.slice(1), dtype: 'int64', shape: [tokens.length] },
      ...(weights ? { weights: { data: weights, dtype: 'float32', shape: [weights.length] } } : {}),
    },
  };
}

export const crossEntropy = (...data: DatumJson[]): ForwardBackwardInputJson => ({
  data,
  loss_fn: 'cross_entropy',
});

/** What the API answers for a future: the result, or `{error, category}`. */
export type Answer = unknown;

type Submission =
  | { kind: 'create_model'; request_id: string; model_id: string; rank: number; seed?: number }
  | {
      kind: 'forward' | 'forward_backward';
      request_id: string;
      model_id: string;
      input: ForwardBackwardInputJson;
    }
  | { kind: 'optim_step'; request_id: string; model_id: string; adam: Record<string, number> }
  | { kind: 'save_weights'; request_id: string; model_id: string; path: string }
  | {
      kind: 'save_weights_for_sampler';
      request_id: string;
      model_id: string;
      path?: string;
      sampling_session_id?: string;
    }
  | { kind: 'load_weights'; request_id: string; model_id: string; path: string; optimizer: boolean }
  | { kind: 'unload_model'; request_id: string; model_id: string }
  | { kind: 'sample'; request_id: string; sampling_session_id: string; body: SampleBody };

interface SampleBody {
  readonly num_samples: number;
  readonly prompt: { chunks: { type: 'encoded_text'; tokens: number[] }[] };
  readonly sampling_params: Record<string, unknown> & { max_tokens: number; seed?: number };
  readonly prompt_logprobs?: boolean;
}

/** A tenant's client over the API's operations, recording what it submits for the oracle. */
export class TenantClient {
  readonly submissions: Submission[];
  #sessionId: string | undefined;
  #modelSeq = 0;
  #seqIds = new Map<string, number>();
  #samplingSeq = 0;
  #sampleSeq = new Map<string, number>();

  constructor(
    readonly tenant: string,
    private readonly harness: WorkerHarness,
  ) {
    this.submissions = harness.submissions;
  }

  ctx(): ops.OperationContext {
    return {
      tenant: this.tenant,
      now: Date.now(),
      ...apiDeps(this.harness.cloud),
      tunables: config().tunables,
    };
  }

  async session(): Promise<string> {
    this.#sessionId ??= (await ops.createSession(this.ctx(), { tags: [] })).session_id;
    return this.#sessionId;
  }

  #nextSeq(modelId: string): number {
    const next = (this.#seqIds.get(modelId) ?? 0) + 1;
    this.#seqIds.set(modelId, next);
    return next;
  }

  async createModel(rank = 4, seed = 3): Promise<{ request_id: string; model_id: string }> {
    const answer = await ops.createModel(this.ctx(), {
      session_id: await this.session(),
      model_seq_id: this.#modelSeq++,
      base_model: this.harness.baseModel,
      lora_config: { rank, seed },
    });
    const modelId = answer.model_id as string;
    this.submissions.push({
      kind: 'create_model',
      request_id: answer.request_id,
      model_id: modelId,
      rank,
      seed,
    });
    return { request_id: answer.request_id, model_id: modelId };
  }

  async pass(
    kind: 'forward' | 'forward_backward',
    modelId: string,
    input: ForwardBackwardInputJson,
  ): Promise<string> {
    const body = { model_id: modelId, seq_id: this.#nextSeq(modelId) };
    const answer =
      kind === 'forward'
        ? await ops.forward(this.ctx(), { ...body, forward_input: input })
        : await ops.forwardBackward(this.ctx(), { ...body, forward_backward_input: input });
    this.submissions.push({ kind, request_id: answer.request_id, model_id: modelId, input });
    return answer.request_id;
  }

  async optimStep(modelId: string, adam: Record<string, number> = { learning_rate: 0.05 }): Promise<string> {
    const answer = await ops.optimStep(this.ctx(), {
      model_id: modelId,
      seq_id: this.#nextSeq(modelId),
      adam_params: adam,
    });
    this.submissions.push({ kind: 'optim_step', request_id: answer.request_id, model_id: modelId, adam });
    return answer.request_id;
  }

  async saveWeights(modelId: string, name: string): Promise<string> {
    const answer = await ops.saveWeights(this.ctx(), {
      model_id: modelId,
      seq_id: this.#nextSeq(modelId),
      path: name,
    });
    this.submissions.push({
      kind: 'save_weights',
      request_id: answer.request_id,
      model_id: modelId,
      path: `tinker://${modelId}/weights/${name}`,
    });
    return answer.request_id;
  }

  /** Named when `name` is given, else unnamed (the commit creates the sampling session). */
  async saveForSampler(modelId: string, name?: string): Promise<string> {
    const seqId = this.#nextSeq(modelId);
    const body =
      name === undefined
        ? { model_id: modelId, seq_id: seqId, sampling_session_seq_id: this.#samplingSeq++ }
        : { model_id: modelId, seq_id: seqId, path: name };
    const answer = await ops.saveWeightsForSampler(this.ctx(), body);
    this.submissions.push({
      kind: 'save_weights_for_sampler',
      request_id: answer.request_id,
      model_id: modelId,
      ...(name === undefined
        ? { sampling_session_id: deriveId('sampling', modelId, seqId) }
        : { path: `tinker://${modelId}/sampler_weights/${name}` }),
    });
    return answer.request_id;
  }

  async loadWeights(modelId: string, path: string, optimizer = false): Promise<string> {
    const answer = await ops.loadWeights(this.ctx(), {
      model_id: modelId,
      seq_id: this.#nextSeq(modelId),
      path,
      optimizer,
    });
    this.submissions.push({
      kind: 'load_weights',
      request_id: answer.request_id,
      model_id: modelId,
      path,
      optimizer,
    });
    return answer.request_id;
  }

  async unload(modelId: string): Promise<string> {
    const answer = await ops.unloadModel(this.ctx(), { model_id: modelId });
    this.submissions.push({ kind: 'unload_model', request_id: answer.request_id, model_id: modelId });
    return answer.request_id;
  }

  async samplingSession(target: { base_model: string } | { model_path: string }): Promise<string> {
    const answer = await ops.createSamplingSession(this.ctx(), {
      session_id: await this.session(),
      sampling_session_seq_id: this.#samplingSeq++,
      ...target,
    });
    this.harness.samplingTargets.set(
      answer.sampling_session_id,
      'model_path' in target ? target.model_path : null,
    );
    return answer.sampling_session_id;
  }

  async sample(samplingSessionId: string, body: SampleBody): Promise<string> {
    const seqId = this.#sampleSeq.get(samplingSessionId) ?? 0;
    this.#sampleSeq.set(samplingSessionId, seqId + 1);
    const answer = await ops.asample(this.ctx(), {
      sampling_session_id: samplingSessionId,
      seq_id: seqId,
      ...body,
    });
    const seed = body.sampling_params.seed ?? deriveSeed(samplingSessionId, seqId);
    this.submissions.push({
      kind: 'sample',
      request_id: answer.request_id,
      sampling_session_id: samplingSessionId,
      body: { ...body, sampling_params: { ...body.sampling_params, seed } },
    });
    return answer.request_id;
  }
}

export interface DispatchOptions {
  /** Only these rows are planned (tests share one cloud). */
  readonly only?: (row: LiveRow) => boolean;
  readonly limits?: Partial<PlanLimits>;
}

export class WorkerHarness {
  readonly submissions: Submission[] = [];
  /** Sampling sessions created through the API: the sampler checkpoint path, or null for the base model. */
  readonly samplingTargets = new Map<string, string | null>();
  readonly backend = new ReferenceBackend();
  #items = 0;

  private constructor(
    readonly cloud: TestCloud,
    /** The base model every tenant's models and base samplers use (an engine's model, or the reference one). */
    readonly baseModel: string,
  ) {}

  /**
   * `baseModel`: served as the pool's only base model (BASE_MODELS), for a harness on an engine.
   * `vocabulary`: the vocabulary BASE_MODELS declares for it, which intake checks token ids against (B2).
   */
  static async start(
    options: { readonly baseModel?: string; readonly vocabulary?: number } = {},
  ): Promise<WorkerHarness> {
    const cloud = await setupTestCloud();
    cloud.applyEnv();
    if (options.baseModel === undefined && options.vocabulary === undefined)
      delete process.env[BASE_MODELS_VAR];
    else {
      process.env[BASE_MODELS_VAR] = JSON.stringify([
        {
          name: options.baseModel ?? BASE_MODEL,
          ...(options.vocabulary === undefined ? {} : { vocab_size: options.vocabulary }),
        },
      ]);
    }
    resetConfig();
    logger.setLogLevel('WARN');
    return new WorkerHarness(cloud, options.baseModel ?? BASE_MODEL);
  }

  tenant(name: string): TenantClient {
    return new TenantClient(name, this);
  }

  /** The scheduler's tick, from the planner's parts: at most one work item, written to S3. */
  async dispatch(
    options: DispatchOptions = {},
  ): Promise<{ item: WorkItem; manifest: WorkManifest } | undefined> {
    const { doc, s3 } = this.cloud.clients;
    const { pool, liveShards } = config();
    const tables = resolveTables(['futures', 'models', 'registry']);
    const live = await scanLiveIndex(doc, tables.futures, pool, liveShards);
    const rows = live.rows.filter((row) => options.only?.(row) ?? true);
    const now = Date.now();
    const models = await readModels(doc, tables.models, new Set(rows.map((row) => row.model_id)));
    const sampleClaims = await readLiveSampleClaims(
      doc,
      tables.registry,
      rows.filter((row) => row.request_type === 'sample').map((row) => row.request_id),
      now,
    );
    const planned = plan(
      { live: rows, models, sampleClaims },
      { ...DEFAULT_PLAN_LIMITS, ...options.limits },
      now,
    );
    const workItemId = `wi-${mintRequestId(now)}`;
    const claims = new Map<string, ModelClaim>();
    for (const model of planned.models) {
      const claim = claimFor(models.get(model.model_id) as ModelRow, model, now, LEASE_MS);
      if (!(await claimModel(doc, tables.models, claim)))
        throw new Error(`lost the claim of ${claim.model_id}`);
      claims.set(model.model_id, claim);
    }
    const sampleClaimed = new Map<string, SampleClaimed>();
    for (const sample of planned.samples) {
      const future = (await this.future(sample.request_id)) as FutureRow;
      const claim = {
        request_id: sample.request_id,
        claim_token: workItemId,
        work_item_id: workItemId,
        lease_until: now + LEASE_MS,
      };
      if (!(await claimSample(doc, tables.registry, claim, now))) {
        throw new Error(`lost the claim of sample ${sample.request_id}`);
      }
      sampleClaimed.set(sample.request_id, { tenant: future.tenant, claim_token: workItemId });
    }
    const payloads = new Map<string, unknown>();
    for (const id of payloadsToRead(planned, claims, sampleClaimed)) {
      const future = (await this.future(id)) as FutureRow;
      // A missing object stays absent, as in the scheduler's reads: it becomes a fail step or entry.
      const payload = await readStoredPayload(s3, config().bucket, future.payload_key).catch(
        (error: Error) => {
          if (error.name === 'NoSuchKey') return undefined;
          throw error;
        },
      );
      if (payload !== undefined) payloads.set(id, payload);
    }
    const workItem = assembleWorkItem({
      workItemId,
      pool,
      now,
      plan: planned,
      claims,
      sampleClaims: sampleClaimed,
      payloads,
    });
    if (workItem === undefined) return undefined;
    this.#items++;
    await writeWorkItem(s3, config().bucket, workItem);
    return { item: workItem, manifest: manifestFor(workItemId) };
  }

  /**
   * The sweeper's re-plan of a model whose lease has ended (E2), with the sweeper's own condition, run
   * at `at` (default: just after the lease it reads ends).
   */
  async replan(modelId: string, at?: number): Promise<ModelRow> {
    const row = (await this.modelRow(modelId)) as ModelRow;
    const now = at ?? (row.lease_until ?? 0) + 1;
    const replan = replanFor(row, now, config().tunables.maxAttempts);
    if (replan === undefined) throw new Error(`${modelId} is not in flight`);
    if (!(await replanModel(this.cloud.clients.doc, config().table('models'), replan, 'lease-ended'))) {
      throw new Error(`the re-plan of ${modelId} lost its condition`);
    }
    return (await this.modelRow(modelId)) as ModelRow;
  }

  async modelRow(modelId: string): Promise<ModelRow | undefined> {
    return readModelRow(this.cloud.clients.doc, config().table('models'), modelId);
  }

  async future(requestId: string): Promise<FutureRow | undefined> {
    const answer = await this.cloud.clients.doc.send(
      new GetCommand({
        TableName: config().table('futures'),
        Key: { request_id: requestId },
        ConsistentRead: true,
      }),
    );
    return answer.Item as FutureRow | undefined;
  }

  async registry<T = Record<string, unknown>>(pk: string): Promise<T | undefined> {
    const answer = await this.cloud.clients.doc.send(
      new GetCommand({ TableName: config().table('registry'), Key: { pk }, ConsistentRead: true }),
    );
    return answer.Item as T | undefined;
  }

  /** What retrieve_future answers right now (no long poll). */
  async answer(tenant: string, requestId: string): Promise<Answer> {
    return retrieveFuture(
      { tenant, now: Date.now(), ...apiDeps(this.cloud), tunables: config().tunables, deadline: 0 },
      { request_id: requestId },
    );
  }

  /** Every item of the tables and every object key: what "changed nothing" is checked against. */
  async snapshot(): Promise<{ tables: Record<string, unknown[]>; objects: string[] }> {
    const tables: Record<string, unknown[]> = {};
    for (const id of ['futures', 'models', 'registry'] as const) {
      const items: unknown[] = [];
      let start: Record<string, unknown> | undefined;
      do {
        const page = await this.cloud.clients.doc.send(
          new ScanCommand({ TableName: config().table(id), ConsistentRead: true, ExclusiveStartKey: start }),
        );
        items.push(...(page.Items ?? []));
        start = page.LastEvaluatedKey;
      } while (start);
      tables[id] = items.sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b)));
    }
    const objects: string[] = [];
    let token: string | undefined;
    do {
      const page = await this.cloud.clients.s3.send(
        new ListObjectsV2Command({ Bucket: config().bucket, ContinuationToken: token }),
      );
      objects.push(...(page.Contents ?? []).map((object) => object.Key ?? ''));
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return { tables, objects: objects.sort() };
  }

  /**
   * R1's oracle: every submission so far, run one at a time in submit order directly on a fresh
   * reference backend, answered as the API should answer it. Valid for workloads whose checkpoint
   * loads and samples name checkpoints saved earlier in submit order. `serverFailed`: requests the
   * test expects to end with a server error (and no effect).
   */
  async oracle(
    options: { readonly serverFailed?: ReadonlySet<string>; readonly backend?: Backend } = {},
  ): Promise<Map<string, Answer>> {
    const backend = options.backend ?? new ReferenceBackend();
    const answers = new Map<string, Answer>();
    const states = new Map<string, BackendState>();
    const unloaded = new Set<string>();
    const checkpoints = new Map<string, Uint8Array>();
    const sessions = new Map<string, Uint8Array>();
    const json = (value: unknown) => JSON.parse(JSON.stringify(value)) as unknown;
    for (const sub of this.submissions) {
      const answer = await (async (): Promise<Answer> => {
        // A request the system failed with a server error (E2) has no effect in the sequence either.
        if (options.serverFailed?.has(sub.request_id)) return { category: 'server' };
        try {
          if (sub.kind !== 'sample' && sub.kind !== 'create_model' && unloaded.has(sub.model_id)) {
            throw new StepUserError(`Model ${sub.model_id} is unloaded`);
          }
          switch (sub.kind) {
            case 'create_model':
              states.set(
                sub.model_id,
                await backend.createModel({
                  base_model: this.baseModel,
                  lora_config: { rank: sub.rank, seed: sub.seed },
                }),
              );
              return { model_id: sub.model_id, type: 'create_model' };
            case 'forward': {
              const input = passInputFromJson(sub.input, 'input');
              return json(passResult(await backend.forward(states.get(sub.model_id) as BackendState, input)));
            }
            case 'forward_backward': {
              const input = passInputFromJson(sub.input, 'input');
              const out = await backend.forwardBackward(states.get(sub.model_id) as BackendState, input);
              states.set(sub.model_id, out.state);
              return json(passResult(out.result));
            }
            case 'optim_step': {
              const out = await backend.optimStep(states.get(sub.model_id) as BackendState, sub.adam);
              states.set(sub.model_id, out.state);
              return json(out.result);
            }
            case 'save_weights':
              checkpoints.set(
                sub.path,
                await backend.exportWeights(states.get(sub.model_id) as BackendState, 'training'),
              );
              return { path: sub.path, type: 'save_weights' };
            case 'save_weights_for_sampler': {
              const bytes = await backend.exportWeights(states.get(sub.model_id) as BackendState, 'sampler');
              if (sub.sampling_session_id !== undefined) {
                sessions.set(sub.sampling_session_id, bytes);
                return { sampling_session_id: sub.sampling_session_id, type: 'save_weights_for_sampler' };
              }
              checkpoints.set(sub.path as string, bytes);
              return { path: sub.path, type: 'save_weights_for_sampler' };
            }
            case 'load_weights': {
              const state = await backend.importWeights(
                states.get(sub.model_id) as BackendState,
                checkpoints.get(sub.path) as Uint8Array,
                { optimizer: sub.optimizer },
              );
              states.set(sub.model_id, state);
              return { path: sub.path, type: 'load_weights' };
            }
            case 'unload_model':
              unloaded.add(sub.model_id);
              return { model_id: sub.model_id, type: 'unload_model' };
            case 'sample': {
              const target = this.samplingTargets.get(sub.sampling_session_id);
              const weights =
                sessions.get(sub.sampling_session_id) ?? (target ? (checkpoints.get(target) ?? null) : null);
              const sampler = await backend.loadSampler(this.baseModel, weights);
              const request = {
                ...sub.body,
                prompt: modelInputFromJson(sub.body.prompt, 'prompt'),
                sampling_params: sub.body.sampling_params as SamplingParams,
              };
              return json(toSampleResult(await backend.sample(sampler, request)));
            }
          }
        } catch (error) {
          if (error instanceof StepUserError) return { category: 'user' };
          throw error;
        }
      })();
      answers.set(sub.request_id, answer);
    }
    return answers;
  }

  /** Each submission's API answer; failed ones reduced to their category (messages are checked apart). */
  async answers(): Promise<Map<string, Answer>> {
    const answers = new Map<string, Answer>();
    for (const sub of this.submissions) {
      const row = (await this.future(sub.request_id)) as FutureRow;
      const answer = (await this.answer(row.tenant, sub.request_id)) as Record<string, unknown>;
      answers.set(
        sub.request_id,
        'error' in answer && 'category' in answer ? { category: answer.category } : answer,
      );
    }
    return answers;
  }

  /** Work items dispatched so far. */
  get workItems(): number {
    return this.#items;
  }
}
