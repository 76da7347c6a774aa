import type { DatumJson, ForwardBackwardInputJson } from '../../shared/backend/pass-input.js';
import { deriveSeed } from '../../shared/base/ids.js';
import { rlDatum } from '../../shared/client/rl-inputs.js';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { bytesOf, textDatum, type WorkerHarness } from './worker-harness.js';
import type { Action, DatumSpec, SampleSpec, TenantScript } from './workload.js';

/**
 * Runs one tenant's script through the HTTP API (TinkerClient), as a Tinker client would: its own
 * session, seq_ids and sampling sessions. Every request that creates a future is recorded in the
 * worker harness's submission list, in submit order, for R1's oracle. R7 is checked on the way: a
 * resent request, or one sent twice at once, must answer the original future; a reused seq_id with
 * another payload must answer 400.
 */

export type Submission = WorkerHarness['submissions'][number];

interface Sent {
  readonly endpoint: string;
  readonly body: unknown;
  readonly request_id: string;
}

/** A token outside the reference model's byte vocabulary: the step fails at execution (user error). */
const OUT_OF_VOCABULARY = 300;

/**
 * The vocabulary a stack running workloads with `bad` datums declares for the reference model in
 * BASE_MODELS: past OUT_OF_VOCABULARY, so intake (B2) takes those datums as a payload accepted under
 * another configuration would be, and the backend fails them at execution (E6), as the oracle does.
 */
export const BAD_DATUM_VOCABULARY = 512;

/** A datum of `spec`: text with weights, or a policy-gradient datum (shared/client/rl-inputs.ts). */
export function datumOf(spec: DatumSpec): DatumJson {
  const datum =
    spec.rl === undefined
      ? textDatum(spec.text, spec.weights ? [...spec.weights] : undefined)
      : rlDatum({ tokens: bytesOf(spec.text), ...spec.rl });
  if (!spec.bad) return datum;
  const [chunk] = datum.model_input.chunks;
  return {
    ...datum,
    model_input: {
      chunks: [{ type: 'encoded_text', tokens: [OUT_OF_VOCABULARY, ...(chunk?.tokens ?? []).slice(1)] }],
    },
  };
}

export class TenantDriver {
  /** Global model index -> model id. */
  readonly modelIds = new Map<number, string>();
  /** R7 checks made: resends, concurrent duplicates, conflicting reuses. */
  readonly checks = { resends: 0, concurrentDuplicates: 0, conflicts: 0 };
  #sessionId: string | undefined;
  #modelSeq = 0;
  #samplingSeq = 0;
  readonly #seqIds = new Map<string, number>();
  readonly #sampleSeq = new Map<string, number>();
  readonly #sent: Sent[] = [];
  /** Sampler saves by `<model>#<name>`: their request ids, to wait for before sampling from them. */
  readonly #samplerSaves = new Map<string, string>();
  readonly #samplingSessions = new Map<string, Promise<string>>();
  /** Per sampling session, the chain its samples are submitted on (seq_ids in order). */
  readonly #sampleChains = new Map<string, Promise<unknown>>();
  readonly #background: Promise<void>[] = [];
  readonly #errors: unknown[] = [];

  constructor(
    readonly script: TenantScript,
    readonly client: TinkerClient,
    private readonly harness: WorkerHarness,
  ) {}

  get tenant(): string {
    return this.script.tenant;
  }

  /**
   * Runs the script's actions (or the given ones, for a script run in parts); resolves once every
   * request, samples waiting on their checkpoint too, is submitted.
   */
  async run(actions: readonly Action[] = this.script.actions): Promise<void> {
    this.#sessionId ??= (await this.client.createSession({ tags: ['e2e'] })).session_id;
    for (const action of actions) await this.#act(action);
    await Promise.all(this.#background);
    if (this.#errors.length > 0) throw this.#errors[0];
  }

  /** Request ids this driver submitted (each future once). */
  get requestIds(): string[] {
    return [...new Set(this.#sent.map((sent) => sent.request_id))];
  }

  #record(submission: Submission): void {
    this.harness.submissions.push(submission);
  }

  #model(index: number): string {
    const id = this.modelIds.get(index);
    if (id === undefined) throw new Error(`model ${index} of ${this.tenant} was not created`);
    return id;
  }

  #nextSeq(modelId: string): number {
    const next = (this.#seqIds.get(modelId) ?? 0) + 1;
    this.#seqIds.set(modelId, next);
    return next;
  }

  async #post(endpoint: string, body: unknown): Promise<{ request_id: string; model_id?: string }> {
    const answer = await this.client.raw('POST', `/api/v1/${endpoint}`, body);
    if (answer.status !== 200) {
      throw new Error(`${this.tenant} ${endpoint} answered ${answer.status}: ${JSON.stringify(answer.body)}`);
    }
    const future = answer.body as { request_id: string; model_id?: string };
    this.#sent.push({ endpoint, body, request_id: future.request_id });
    return future;
  }

  async #act(action: Action): Promise<void> {
    switch (action.kind) {
      case 'create': {
        const answer = await this.#post('create_model', {
          session_id: this.#sessionId,
          model_seq_id: this.#modelSeq++,
          base_model: this.harness.baseModel,
          lora_config: { rank: action.rank, seed: action.seed },
        });
        const modelId = answer.model_id as string;
        this.modelIds.set(action.model, modelId);
        this.#record({
          kind: 'create_model',
          request_id: answer.request_id,
          model_id: modelId,
          rank: action.rank,
          seed: action.seed,
        });
        return;
      }
      case 'pass': {
        const modelId = this.#model(action.model);
        const lossFn = action.loss ?? 'cross_entropy';
        const input: ForwardBackwardInputJson = {
          data: action.data.map((spec) => datumOf(spec)),
          loss_fn: lossFn,
        };
        const field = action.type === 'forward' ? 'forward_input' : 'forward_backward_input';
        const body = { model_id: modelId, seq_id: this.#nextSeq(modelId), [field]: input };
        let requestId: string;
        if (action.concurrentDuplicate) {
          const [first, second] = await Promise.all([
            this.#post(action.type, body),
            this.#post(action.type, body),
          ]);
          if (first.request_id !== second.request_id) {
            throw new Error(
              `R7: a request sent twice at once made two futures (${first.request_id}, ${second.request_id})`,
            );
          }
          this.checks.concurrentDuplicates++;
          requestId = first.request_id;
        } else {
          requestId = (await this.#post(action.type, body)).request_id;
        }
        this.#record({ kind: action.type, request_id: requestId, model_id: modelId, input });
        return;
      }
      case 'optim': {
        const modelId = this.#model(action.model);
        const adam = { learning_rate: action.learning_rate };
        const answer = await this.#post('optim_step', {
          model_id: modelId,
          seq_id: this.#nextSeq(modelId),
          adam_params: adam,
        });
        this.#record({ kind: 'optim_step', request_id: answer.request_id, model_id: modelId, adam });
        return;
      }
      case 'save': {
        const modelId = this.#model(action.model);
        const answer = await this.#post('save_weights', {
          model_id: modelId,
          seq_id: this.#nextSeq(modelId),
          path: action.name,
        });
        this.#record({
          kind: 'save_weights',
          request_id: answer.request_id,
          model_id: modelId,
          path: `tinker://${modelId}/weights/${action.name}`,
        });
        return;
      }
      case 'save_sampler': {
        const modelId = this.#model(action.model);
        const answer = await this.#post('save_weights_for_sampler', {
          model_id: modelId,
          seq_id: this.#nextSeq(modelId),
          path: action.name,
        });
        this.#samplerSaves.set(`${action.model}#${action.name}`, answer.request_id);
        this.#record({
          kind: 'save_weights_for_sampler',
          request_id: answer.request_id,
          model_id: modelId,
          path: `tinker://${modelId}/sampler_weights/${action.name}`,
        });
        return;
      }
      case 'load': {
        const modelId = this.#model(action.model);
        const path = `tinker://${modelId}/weights/${action.name}`;
        const answer = await this.#post('load_weights', {
          model_id: modelId,
          seq_id: this.#nextSeq(modelId),
          path,
          optimizer: action.optimizer,
        });
        this.#record({
          kind: 'load_weights',
          request_id: answer.request_id,
          model_id: modelId,
          path,
          optimizer: action.optimizer,
        });
        return;
      }
      case 'sample':
        // Samples do not wait for training (R4); one naming a checkpoint waits for its save only.
        this.#background.push(
          this.#sample(action.spec).catch((error: unknown) => void this.#errors.push(error)),
        );
        return;
      case 'resend': {
        const earlier = this.#sent[this.#sent.length - action.back];
        if (earlier === undefined) return;
        const answer = await this.client.raw('POST', `/api/v1/${earlier.endpoint}`, earlier.body);
        const again = (answer.body as { request_id?: string } | undefined)?.request_id;
        if (answer.status !== 200 || again !== earlier.request_id) {
          throw new Error(
            `R7: resent ${earlier.endpoint} answered ${answer.status} ${JSON.stringify(answer.body)}, ` +
              `not its future ${earlier.request_id}`,
          );
        }
        this.checks.resends++;
        return;
      }
      case 'conflict': {
        const modelId = this.#model(action.model);
        const last = this.#seqIds.get(modelId);
        if (last === undefined) return;
        // No script sends this learning rate, so the payload differs from whatever took this seq_id.
        const answer = await this.client.raw('POST', '/api/v1/optim_step', {
          model_id: modelId,
          seq_id: last,
          adam_params: { learning_rate: 0.123 },
        });
        if (answer.status !== 400) {
          throw new Error(`R7: a reused seq_id with another payload answered ${answer.status}, not 400`);
        }
        this.checks.conflicts++;
        return;
      }
    }
  }

  #samplingSession(path: string | undefined): Promise<string> {
    const key = path ?? 'base';
    let session = this.#samplingSessions.get(key);
    if (session === undefined) {
      const target = path === undefined ? { base_model: this.harness.baseModel } : { model_path: path };
      session = this.client
        .createSamplingSession({
          session_id: this.#sessionId as string,
          sampling_session_seq_id: this.#samplingSeq++,
          ...target,
        })
        .then(({ sampling_session_id }) => {
          this.harness.samplingTargets.set(sampling_session_id, path ?? null);
          return sampling_session_id;
        });
      this.#samplingSessions.set(key, session);
    }
    return session;
  }

  async #sample(spec: SampleSpec): Promise<void> {
    let path: string | undefined;
    if (spec.checkpoint !== undefined) {
      const save = this.#samplerSaves.get(`${spec.checkpoint.model}#${spec.checkpoint.name}`) as string;
      // A sampling session names a saved checkpoint: the client waits for the save, as the SDK does.
      path = (await this.client.waitFor<{ path: string }>(save, { timeoutMs: 60_000 })).path;
    }
    const sessionId = await this.#samplingSession(path);
    const previous = this.#sampleChains.get(sessionId) ?? Promise.resolve();
    const submitted = previous.then(() => this.#submitSample(sessionId, spec));
    this.#sampleChains.set(
      sessionId,
      submitted.catch(() => undefined),
    );
    await submitted;
  }

  async #submitSample(sessionId: string, spec: SampleSpec): Promise<void> {
    const seqId = this.#sampleSeq.get(sessionId) ?? 0;
    this.#sampleSeq.set(sessionId, seqId + 1);
    const params = {
      max_tokens: spec.max_tokens,
      temperature: spec.temperature,
      top_k: spec.top_k,
      top_p: 1,
      ...(spec.seed === undefined ? {} : { seed: spec.seed }),
    };
    const body = {
      num_samples: spec.num_samples,
      prompt: { chunks: [{ type: 'encoded_text' as const, tokens: [...Buffer.from(spec.prompt, 'utf8')] }] },
      sampling_params: params,
      ...(spec.prompt_logprobs ? { prompt_logprobs: true } : {}),
    };
    const answer = await this.#post('asample', { sampling_session_id: sessionId, seq_id: seqId, ...body });
    this.#record({
      kind: 'sample',
      request_id: answer.request_id,
      sampling_session_id: sessionId,
      // The seed the server stores when the client gives none (P6).
      body: { ...body, sampling_params: { ...params, seed: spec.seed ?? deriveSeed(sessionId, seqId) } },
    });
  }
}
