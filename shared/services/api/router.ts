import { type AwsClients, awsClients } from '../../aws/clients.js';
import { TRANSIENT_AWS_ERROR_NAMES } from '../../aws/transient-errors.js';
import { config, type Tunables } from '../../base/config.js';
import {
  AuthError,
  invalidField,
  isAwsError,
  QuotaExceededError,
  TinkerError,
  type ValidationError,
} from '../../base/errors.js';
import { appendLogKeys, logger } from '../../base/logger.js';
import { keyKind } from '../../repositories/api-keys.js';
import { decompressZstdBounded } from '../../wire/zstd.js';
import { NO_FAVICON, statusPageSubpath } from '../status-page/page.js';
import { operatorOfKey, tenantOfKey } from './authenticate.js';
import { acceptsProtobuf, BinaryAnswer, HttpAnswer, PROTOBUF_CONTENT_TYPE, ProtobufBody } from './bodies.js';
import * as lifecycle from './checkpoint-lifecycle.js';
import { type ApiDeps, resolveApiDeps } from './deps.js';
import { boundMessage } from './describe.js';
import * as ops from './operations.js';
import { getSampleSequence } from './provenance.js';
import { parseQuery, type QueryParams } from './query.js';
import { checkSubmitQuota } from './quotas.js';
import { checkBodyBytes, parseJsonBody } from './request-checks.js';
import { retrieveFuture } from './retrieve.js';
import { compileRoutes } from './route-matcher.js';
import * as runs from './runs.js';
import { sdkFeatures } from './sdk-versions.js';
import * as sessionFutures from './session-futures.js';
import { handleStatusRoute } from './status-routes.js';

/** An HTTP request as the edge sees it, independent of API Gateway's event shape. */
export interface ApiRequest {
  readonly method: string;
  readonly path: string;
  /** The query string as sent, without its `?` (API Gateway's `rawQueryString`); parsed here only. */
  readonly query?: string;
  /** Header names in any case. */
  readonly headers: Readonly<Record<string, string | undefined>>;
  /** The body's bytes as the client sent them (API Gateway's base64 already undone). */
  readonly body?: Uint8Array;
  /** Time the invocation has left, when the runtime knows it (Lambda); bounds long polls. */
  readonly remainingMs?: number;
}

/** A JSON answer: `body` is serialized by the transport, beside any `headers` (Retry-After). */
export interface ApiResponse {
  readonly status: number;
  readonly body: unknown;
  readonly headers?: Readonly<Record<string, string>>;
}

/**
 * An answer sent as is, with its own headers: the status page (HTML, script, styles, its data) as
 * text, protobuf results as bytes.
 */
export interface RawApiResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly raw: string | Uint8Array;
}

export interface ErrorBody {
  readonly error: string;
  readonly field?: string;
}

export interface RouteContext extends ops.OperationContext {
  /** The request's method, upper case: for a route that takes more than one (publish, C4). */
  readonly method: string;
  readonly deadline: number;
  /** The request's `Accept` lists `application/x-protobuf` (retrieve_future answers in it, W2). */
  readonly acceptsProtobuf: boolean;
  /** The query string's parameters, each with every value it was given (see shared/services/api/query.ts). */
  readonly query: QueryParams;
}

/**
 * `body` is the parsed JSON, or a `ProtobufBody` for a route that accepts protobuf; `params`, the
 * route pattern's `{param}` values, decoded (none for a literal route).
 */
type Handler = (ctx: RouteContext, body: unknown, params: Readonly<Record<string, string>>) => unknown;

interface Route {
  readonly methods: readonly string[];
  readonly run: Handler;
  /** Accepts `application/x-protobuf` bodies (optionally `Content-Encoding: zstd`) beside JSON. */
  readonly protobuf?: boolean;
  /** Stores something: counts against the tenant's SUBMITS_PER_SECOND (shared/services/api/quotas.ts). */
  readonly submit?: boolean;
  /**
   * Every write the route makes goes through `runIntake` (repositories/intake/run-intake.ts), which waits for
   * the submit quota before writing: the quota's write then runs beside the route's parsing and reads.
   */
  readonly intake?: boolean;
}

const POST = ['POST'] as const;

/** Everything under `/api/v1/`, as the Tinker SDK calls it; `{param}` segments per route-matcher.ts. */
const ROUTES: Readonly<Record<string, Route>> = {
  'client/config': { methods: POST, run: ops.clientConfig },
  'client/dynamic_config': { methods: ['GET', 'POST'], run: (ctx) => ops.clientDynamicConfig(ctx) },
  get_server_capabilities: { methods: ['GET', 'POST'], run: () => ops.serverCapabilities() },
  create_session: { methods: POST, run: ops.createSession, submit: true },
  session_heartbeat: { methods: POST, run: ops.sessionHeartbeat },
  telemetry: { methods: POST, run: (_ctx, body) => ops.telemetry(body) },
  create_model: { methods: POST, run: ops.createModel, submit: true, intake: true },
  forward_backward: { methods: POST, run: ops.forwardBackward, protobuf: true, submit: true, intake: true },
  forward: { methods: POST, run: ops.forward, submit: true, intake: true },
  optim_step: { methods: POST, run: ops.optimStep, submit: true, intake: true },
  save_weights: { methods: POST, run: ops.saveWeights, submit: true, intake: true },
  save_weights_for_sampler: { methods: POST, run: ops.saveWeightsForSampler, submit: true, intake: true },
  load_weights: { methods: POST, run: ops.loadWeights, submit: true, intake: true },
  copy_weights: { methods: POST, run: ops.copyWeights, submit: true },
  create_sampling_session: { methods: POST, run: ops.createSamplingSession, submit: true, intake: true },
  asample: { methods: POST, run: ops.asample, submit: true, intake: true },
  unload_model: { methods: POST, run: ops.unloadModel, submit: true, intake: true },
  retrieve_future: { methods: POST, run: (ctx, body) => retrieveFuture(ctx, body) },
  // Session futures (W9): one long poll per sampling session and clone, clones' ids, cancels.
  retrieve_futures: { methods: POST, run: (ctx, body) => sessionFutures.retrieveFutures(ctx, body) },
  join_sampling_session: { methods: POST, run: sessionFutures.joinSamplingSession, submit: true },
  cancel_future: { methods: POST, run: sessionFutures.cancelFuture, submit: true },
  get_info: { methods: POST, run: ops.getInfo },
  weights_info: { methods: POST, run: ops.weightsInfo },
  'samplers/{sampler_id}': { methods: ['GET'], run: (ctx, _body, params) => ops.getSampler(ctx, params) },
  // What produced a sampled sequence (W8): the sampler checkpoint and its weights version.
  'sample_sequences/{sequence_id}': {
    methods: ['GET'],
    run: (ctx, _body, params) => getSampleSequence(ctx, params),
  },
  // Listings (C1): reads only; another tenant's run or session answers as an unknown one (C6).
  training_runs: { methods: ['GET'], run: (ctx) => runs.listTrainingRuns(ctx) },
  'training_runs/{run_id}': {
    methods: ['GET'],
    run: (ctx, _body, params) => runs.getTrainingRun(ctx, params),
  },
  'training_runs/{run_id}/checkpoints': {
    methods: ['GET'],
    run: (ctx, _body, params) => runs.listRunCheckpoints(ctx, params),
  },
  checkpoints: { methods: ['GET'], run: (ctx) => runs.listUserCheckpoints(ctx) },
  sessions: { methods: ['GET'], run: (ctx) => runs.listSessions(ctx) },
  'sessions/{session_id}': { methods: ['GET'], run: (ctx, _body, params) => runs.getSession(ctx, params) },
  'sessions/{session_id}/finish': { methods: POST, run: ops.finishSessionRoute, submit: true },
  // The checkpoint lifecycle (C2-C5); `{kind}/{name}` is the SDK's checkpoint id, slash included.
  'training_runs/{run_id}/checkpoints/{kind}/{name}': {
    methods: ['DELETE'],
    run: (ctx, _body, params) => lifecycle.deleteCheckpointRoute(ctx, params),
    submit: true,
  },
  'training_runs/{run_id}/checkpoints/{kind}/{name}/archive': {
    methods: ['GET'],
    run: (ctx, _body, params) => lifecycle.checkpointArchiveUrl(ctx, params),
  },
  'training_runs/{run_id}/checkpoints/{kind}/{name}/publish': {
    methods: ['POST', 'DELETE'],
    run: (ctx, _body, params) => lifecycle.publishCheckpointRoute(ctx, params),
    submit: true,
  },
  'training_runs/{run_id}/checkpoints/{kind}/{name}/ttl': {
    methods: ['PUT'],
    run: (ctx, body, params) => lifecycle.setCheckpointTtlRoute(ctx, body, params),
    submit: true,
  },
};
const ROUTE_MATCHER = compileRoutes(ROUTES);

const API_PREFIX = '/api/v1/';
/** Margin left to a Lambda invocation after a long poll, to answer before the timeout. */
const DEADLINE_MARGIN_MS = 2_000;

function header(request: ApiRequest, name: string): string | undefined {
  const wanted = name.toLowerCase();
  for (const [key, value] of Object.entries(request.headers)) if (key.toLowerCase() === wanted) return value;
  return undefined;
}

function answer(status: number, error: string, field?: string): ApiResponse {
  const body: ErrorBody = field === undefined ? { error } : { error, field };
  return { status, body };
}

/** Typed errors become their status and `{error, field?}`; anything else is logged and answered 5xx. */
export function errorResponse(error: unknown): ApiResponse {
  if (error instanceof QuotaExceededError) {
    // Both forms the Tinker SDK reads: retry-after-ms first, then Retry-After in seconds.
    return {
      ...answer(429, boundMessage(error.message)),
      headers: {
        'retry-after': String(Math.ceil(error.retryAfterMs / 1000)),
        'retry-after-ms': String(error.retryAfterMs),
      },
    };
  }
  if (error instanceof TinkerError) {
    // `message` is a reserved key of the Powertools logger (it would be dropped): the text goes in `detail`.
    if (error.status >= 500) logger.error('request failed', { error: error.name, detail: error.message });
    const field = error.context.field;
    return answer(error.status, boundMessage(error.message), typeof field === 'string' ? field : undefined);
  }
  if (isAwsError(error, ...TRANSIENT_AWS_ERROR_NAMES)) {
    logger.warn('request throttled', { error: error.name });
    return answer(503, 'the service is busy; retry the request');
  }
  logger.error('unexpected error', {
    error: error instanceof Error ? error.name : typeof error,
    detail: error instanceof Error ? error.message : undefined,
  });
  return answer(500, 'internal error');
}

export interface ApiDependencies {
  readonly clients?: AwsClients;
  readonly now?: () => number;
}

/** The answer to a tenant route called with something other than a live tenant key. */
async function refuseTenantRoute(
  apiKey: string,
  deps: ApiDeps,
  tunables: Pick<Tunables, 'apiKeyCacheSeconds'>,
): Promise<ApiResponse> {
  if (
    keyKind(apiKey) === 'operator' &&
    (await operatorOfKey(deps.clients.doc, deps.tables.registry, apiKey, tunables)) !== undefined
  ) {
    return answer(403, 'an operator key cannot call the Tinker API; use a tenant API key (tml-...)');
  }
  throw new AuthError('invalid or revoked API key');
}

function unsupported(problem: string): ValidationError {
  return invalidField('body', problem, 415);
}

/**
 * The body a route gets: parsed JSON, or the decompressed bytes of a protobuf body for a route that
 * takes one (W1). Limits count decompressed bytes, and decompression stops at the limit (W3).
 */
function readBody(request: ApiRequest, route: Route, limits: { readonly maxBodyBytes: number }): unknown {
  const raw = request.body;
  if (raw === undefined || raw.length === 0) return {};
  const contentType = (header(request, 'content-type') ?? 'application/json').toLowerCase();
  const encoding = (header(request, 'content-encoding') ?? 'identity').trim().toLowerCase();
  // The media type whole (RFC 9110), parameters aside: `application/x-protobufXYZ` is another type.
  if (contentType.split(';')[0]?.trim() === PROTOBUF_CONTENT_TYPE) {
    if (route.protobuf !== true) {
      throw unsupported(`${PROTOBUF_CONTENT_TYPE} is accepted only by forward_backward; send JSON`);
    }
    if (encoding === 'zstd') return new ProtobufBody(decompressZstdBounded(raw, limits.maxBodyBytes), raw);
    if (encoding !== 'identity') throw unsupported(`content-encoding ${encoding} is not supported; use zstd`);
    checkBodyBytes(raw.length, limits);
    return new ProtobufBody(raw);
  }
  if (!/json|text\/plain/.test(contentType)) {
    throw unsupported(
      `content-type ${contentType} is not supported; send JSON${route.protobuf ? ` or ${PROTOBUF_CONTENT_TYPE}` : ''}`,
    );
  }
  if (encoding !== 'identity')
    throw unsupported(`content-encoding ${encoding} is not supported on JSON bodies`);
  return parseJsonBody(raw, limits);
}

export async function handleApiRequest(
  request: ApiRequest,
  deps: ApiDependencies = {},
): Promise<ApiResponse | RawApiResponse> {
  const method = request.method.toUpperCase();
  if (request.path === '/healthz' || request.path === '/api/v1/healthz') {
    return method === 'GET'
      ? { status: 200, body: { status: 'ok' } }
      : answer(405, `use GET on ${request.path}`);
  }
  if (request.path === '/favicon.ico') return { ...NO_FAVICON, raw: NO_FAVICON.body };
  const statusSubpath = statusPageSubpath(request.path);
  if (statusSubpath !== undefined) {
    try {
      const settings = config();
      const page = await handleStatusRoute({
        method,
        subpath: statusSubpath,
        apiKey: header(request, 'x-api-key'),
        clients: deps.clients ?? awsClients(),
        config: settings,
        ...(deps.now ? { now: deps.now } : {}),
      });
      return { status: page.status, headers: page.headers, raw: page.body };
    } catch (error) {
      return errorResponse(error);
    }
  }
  const name = request.path.startsWith(API_PREFIX) ? request.path.slice(API_PREFIX.length) : undefined;
  // A Map and prototype-less params (route-matcher.ts): `/api/v1/constructor` or `/api/v1/__proto__`
  // must not find Object.prototype's members.
  const matched = name === undefined ? undefined : ROUTE_MATCHER.match(name);
  if (matched === undefined) return answer(404, `no route for ${method} ${request.path}`);
  const { route, params } = matched;
  if (!route.methods.includes(method)) {
    return answer(
      405,
      `method ${method} is not allowed on ${request.path}; use ${route.methods.join(' or ')}`,
    );
  }
  try {
    // The edge of the API: its clients, tables and bucket are resolved here, once per request.
    const settings = config();
    const api = resolveApiDeps(deps.clients ?? awsClients(), settings);
    const { tunables } = settings;
    const { doc } = api.clients;
    const apiKey = header(request, 'x-api-key');
    if (apiKey === undefined || apiKey === '') throw new AuthError('missing X-API-Key header');
    // From this container's cache for API_KEY_CACHE_SECONDS after a successful lookup (authenticate.ts).
    const tenant = await tenantOfKey(doc, api.tables.registry, apiKey, tunables);
    if (tenant === undefined) return await refuseTenantRoute(apiKey, api, tunables);
    appendLogKeys({ tenant });
    const now = deps.now?.() ?? Date.now();
    // A refused submit costs one write and stores nothing. An intake route parses and reads while the
    // quota is counted and waits for it before writing; any other submit waits for it first. Its
    // refusal is the answer whatever else the request would have met, as when it was checked first.
    const admission =
      route.submit === true ? checkSubmitQuota(doc, api.tables.registry, tenant, tunables, now) : undefined;
    // Awaited on every path below; this only keeps an early throw from leaving it unobserved.
    admission?.catch(() => undefined);
    let result: unknown;
    try {
      if (route.intake !== true) await admission;
      const body = readBody(request, route, tunables);
      const query = parseQuery(request.query);
      const pollMs = Math.min(
        tunables.longPollSeconds * 1000,
        request.remainingMs === undefined
          ? Number.POSITIVE_INFINITY
          : request.remainingMs - DEADLINE_MARGIN_MS,
      );
      result = await route.run(
        {
          ...api,
          tenant,
          method,
          now,
          tunables,
          deadline: now + Math.max(0, pollMs),
          acceptsProtobuf: acceptsProtobuf(header(request, 'accept')),
          sdkFeatures: sdkFeatures(header(request, 'x-stainless-package-version')),
          query,
          ...(admission === undefined ? {} : { admission }),
        },
        body,
        params,
      );
    } catch (error) {
      await admission;
      throw error;
    }
    await admission;
    if (result instanceof HttpAnswer)
      return { status: result.status, body: result.body, headers: result.headers };
    if (result instanceof BinaryAnswer) {
      return { status: 200, headers: { 'content-type': result.contentType }, raw: result.bytes };
    }
    return { status: 200, body: result };
  } catch (error) {
    return errorResponse(error);
  }
}
