import type { z } from 'zod';
import { TinkerError } from '../base/errors.js';
import type { clientConfig, clientDynamicConfig, SupportedModel } from '../services/api/capabilities.js';
import type { GetInfoAnswer, GetSamplerAnswer, WeightsInfoAnswer } from '../services/api/info.js';
import type { FailedAnswer, TryAgain } from '../services/api/retrieve.js';
import type * as schemas from '../services/api/schemas.js';
import type { RetrieveFuturesAnswer } from '../services/api/session-futures.js';

/**
 * A small typed client for this API (the subset of the Tinker REST API it serves), for tests, the
 * demo and benchmarks. Request types are the schemas' inputs, so defaults may be left out. It does not
 * retry submits; `waitFor` polls retrieve_future like the SDK (again on try_again, 408, 429 and 5xx).
 */

/** Pause before polling again after a 408, 429 or 5xx, so a failing server is not hammered. */
const RETRY_PAUSE_MS = 200;

export type In<S extends z.ZodType> = z.input<S>;

export interface FutureAnswer {
  readonly request_id: string;
  readonly model_id?: string;
}

export interface RawAnswer {
  readonly status: number;
  readonly body: unknown;
}

/** A non-2xx answer. `body` is the parsed JSON error body (`{error, field?}`) when there is one. */
export class TinkerHttpError extends TinkerError {
  override readonly name = 'TinkerHttpError';
  /** A 4xx is the caller's to fix; anything else is the server's. */
  override readonly category: 'user' | 'server';
  constructor(
    /** The status the server answered. */
    readonly status: number,
    readonly body: unknown,
    readonly path: string,
  ) {
    const message =
      typeof body === 'object' && body !== null && 'error' in body ? String(body.error) : String(body);
    super(`${path} answered ${status}: ${message}`, { context: { path, status } });
    this.category = status >= 400 && status < 500 ? 'user' : 'server';
  }
}

/**
 * retrieve_future reported the request failed (`{error, category}`). The server reports `user` or
 * `server`; an answer without either counts as the server's and keeps its word in the message.
 */
export class FutureFailedError extends TinkerError {
  override readonly name = 'FutureFailedError';
  override readonly category: 'user' | 'server';
  readonly status: number;
  constructor(
    readonly requestId: string,
    category: string,
    message: string,
  ) {
    super(`request ${requestId} failed (${category}): ${message}`, {
      context: { request_id: requestId, category },
    });
    this.category = category === 'user' ? 'user' : 'server';
    this.status = this.category === 'user' ? 400 : 500;
  }
}

export interface TinkerClientOptions {
  /** Base URL of the server, e.g. `http://127.0.0.1:8080` (no `/api/v1`). */
  readonly baseUrl: string;
  readonly apiKey?: string;
  readonly fetch?: typeof fetch;
}

export class TinkerClient {
  private readonly baseUrl: string;
  private readonly fetchImpl: typeof fetch;

  constructor(private readonly options: TinkerClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.fetchImpl = options.fetch ?? fetch;
  }

  /** Any call, answered as status and parsed body (never throws on a status). `body` as a string is sent as is. */
  async raw(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<RawAnswer> {
    const allHeaders: Record<string, string> = { 'content-type': 'application/json', ...headers };
    if (this.options.apiKey !== undefined && !('x-api-key' in allHeaders))
      allHeaders['x-api-key'] = this.options.apiKey;
    const response = await this.fetchImpl(`${this.baseUrl}${path}`, {
      method,
      headers: allHeaders,
      ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
    });
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = text === '' ? undefined : JSON.parse(text);
    } catch {
      // Not JSON: keep the text.
    }
    return { status: response.status, body: parsed };
  }

  private async call<T>(method: string, endpoint: string, body?: unknown): Promise<T> {
    const path = `/api/v1/${endpoint}`;
    const answer = await this.raw(method, path, body);
    if (answer.status < 200 || answer.status >= 300)
      throw new TinkerHttpError(answer.status, answer.body, path);
    return answer.body as T;
  }

  async healthz(): Promise<{ status: string }> {
    const answer = await this.raw('GET', '/healthz');
    if (answer.status !== 200) throw new TinkerHttpError(answer.status, answer.body, '/healthz');
    return answer.body as { status: string };
  }

  clientConfig(body: In<typeof schemas.clientConfigRequest> = {}): Promise<ReturnType<typeof clientConfig>> {
    return this.call('POST', 'client/config', body);
  }

  getInfo(modelId: string): Promise<GetInfoAnswer> {
    return this.call('POST', 'get_info', { model_id: modelId, type: 'get_info' });
  }

  weightsInfo(tinkerPath: string): Promise<WeightsInfoAnswer> {
    return this.call('POST', 'weights_info', { tinker_path: tinkerPath });
  }

  getSampler(samplerId: string): Promise<GetSamplerAnswer> {
    return this.call('GET', `samplers/${encodeURIComponent(samplerId)}`);
  }

  dynamicConfig(): Promise<ReturnType<typeof clientDynamicConfig>> {
    return this.call('POST', 'client/dynamic_config', {});
  }

  capabilities(): Promise<{ supported_models: SupportedModel[] }> {
    return this.call('GET', 'get_server_capabilities');
  }

  createSession(body: In<typeof schemas.createSessionRequest> = {}): Promise<{ session_id: string }> {
    return this.call('POST', 'create_session', body);
  }

  heartbeat(sessionId: string): Promise<{ type: 'session_heartbeat' }> {
    return this.call('POST', 'session_heartbeat', { session_id: sessionId, type: 'session_heartbeat' });
  }

  telemetry(body: Record<string, unknown>): Promise<{ status: 'accepted' }> {
    return this.call('POST', 'telemetry', body);
  }

  createModel(body: In<typeof schemas.createModelRequest>): Promise<Required<FutureAnswer>> {
    return this.call('POST', 'create_model', body);
  }

  forwardBackward(body: In<typeof schemas.forwardBackwardRequest>): Promise<FutureAnswer> {
    return this.call('POST', 'forward_backward', body);
  }

  forward(body: In<typeof schemas.forwardRequest>): Promise<FutureAnswer> {
    return this.call('POST', 'forward', body);
  }

  optimStep(body: In<typeof schemas.optimStepRequest>): Promise<FutureAnswer> {
    return this.call('POST', 'optim_step', body);
  }

  saveWeights(body: In<typeof schemas.saveWeightsRequest>): Promise<FutureAnswer> {
    return this.call('POST', 'save_weights', body);
  }

  saveWeightsForSampler(body: In<typeof schemas.saveWeightsForSamplerRequest>): Promise<FutureAnswer> {
    return this.call('POST', 'save_weights_for_sampler', body);
  }

  loadWeights(body: In<typeof schemas.loadWeightsRequest>): Promise<FutureAnswer> {
    return this.call('POST', 'load_weights', body);
  }

  createSamplingSession(
    body: In<typeof schemas.createSamplingSessionRequest>,
  ): Promise<{ sampling_session_id: string }> {
    return this.call('POST', 'create_sampling_session', body);
  }

  asample(body: In<typeof schemas.sampleRequest>): Promise<FutureAnswer> {
    return this.call('POST', 'asample', body);
  }

  unloadModel(modelId: string): Promise<FutureAnswer> {
    return this.call('POST', 'unload_model', { model_id: modelId, type: 'unload_model' });
  }

  /** One session-futures long poll (W9): the samples that ended after `prev_cursor`, and the new cursor. */
  retrieveFutures(body: In<typeof schemas.retrieveFuturesRequest>): Promise<RetrieveFuturesAnswer> {
    return this.call('POST', 'retrieve_futures', body);
  }

  joinSamplingSession(samplingSessionId: string): Promise<{ client_counter: number }> {
    return this.call('POST', 'join_sampling_session', {
      sampling_session_id: samplingSessionId,
      type: 'join_sampling_session',
    });
  }

  cancelFuture(requestId: string): Promise<{ request_id: string; cancelled: boolean }> {
    return this.call('POST', 'cancel_future', { request_id: requestId });
  }

  finishSession(sessionId: string, body: In<typeof schemas.finishSessionRequest>): Promise<unknown> {
    return this.call('POST', `sessions/${encodeURIComponent(sessionId)}/finish`, body);
  }

  /** One retrieve_future call: the result, a try_again, or a failure answer. */
  retrieveFuture(requestId: string): Promise<unknown | TryAgain | FailedAnswer> {
    return this.call('POST', 'retrieve_future', { request_id: requestId, allow_metadata_only: false });
  }

  /**
   * Polls until the future is done: resolves with its result, rejects with FutureFailedError when it
   * failed, TinkerHttpError on a 4xx, or a timeout error after `timeoutMs` (default 5 minutes).
   */
  async waitFor<T = unknown>(requestId: string, options: { readonly timeoutMs?: number } = {}): Promise<T> {
    const deadline = Date.now() + (options.timeoutMs ?? 300_000);
    while (Date.now() < deadline) {
      const answer = await this.raw('POST', '/api/v1/retrieve_future', { request_id: requestId });
      // 429: this tenant holds its LONG_POLLS_PER_TENANT polls (docs/configuration.md#long-polls); the SDK retries it too.
      if (answer.status === 408 || answer.status === 429 || answer.status >= 500) {
        await new Promise((resolve) => setTimeout(resolve, RETRY_PAUSE_MS));
        continue;
      }
      if (answer.status !== 200)
        throw new TinkerHttpError(answer.status, answer.body, '/api/v1/retrieve_future');
      const body = answer.body as Record<string, unknown> | null;
      if (body && body.type === 'try_again') continue;
      if (body && typeof body.error === 'string') {
        throw new FutureFailedError(requestId, String(body.category ?? 'unknown'), body.error);
      }
      return answer.body as T;
    }
    throw new Error(`timed out waiting for request ${requestId}`);
  }
}
