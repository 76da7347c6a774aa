import { NotFoundError } from '../../base/errors.js';
import {
  type CheckpointView,
  type Cursor,
  checkpointView,
  type PageRequest,
  pageOf,
  type RunFacts,
  type TrainingRunView,
  trainingRunView,
} from '../../domain/listing-views.js';
import * as listings from '../../repositories/listings.js';
import { readOwnSession } from '../../repositories/sessions.js';
import type { OperationContext } from './operation-context.js';
import { choiceParam, integerParam, type QueryParams } from './query.js';

/**
 * The listing routes (C1, docs/design.md#c1): training runs, their checkpoints, the tenant's
 * checkpoints and sessions, as the SDK's RestClient and CLI read them. Every route reads only the
 * caller's partitions; a run or session of another tenant answers exactly as an unknown one (C6).
 */

export interface ListingContext extends OperationContext {
  readonly query: QueryParams;
}

/** Largest page a listing serves: the SDK's CLI asks for at most 1000 checkpoints a page. */
export const MAX_PAGE = 1000;

const SCOPES = ['owned', 'accessible'] as const;
type Scope = (typeof SCOPES)[number];

/** `limit` (1..1000, the route's SDK default when absent) and `offset` (>= 0, default 0). */
export function pageRequest(query: QueryParams, defaultLimit: number): PageRequest {
  return {
    limit: integerParam(query, 'limit', { min: 1, max: MAX_PAGE, fallback: defaultLimit }),
    offset: integerParam(query, 'offset', { min: 0, max: Number.MAX_SAFE_INTEGER, fallback: 0 }),
  };
}

function scopeOf(query: QueryParams): Scope {
  return choiceParam(query, 'access_scope', SCOPES, 'owned');
}

function runNotFound(runId: string): NotFoundError {
  return new NotFoundError(`training run ${runId} not found`, { context: { field: 'run_id' } });
}

/** A run as the caller may see it: its own, or (accessible) another's with a published checkpoint. */
async function visibleRun(ctx: ListingContext, runId: string, scope: Scope): Promise<RunFacts> {
  const run = await listings.readRun(ctx.clients.doc, ctx.tables, runId);
  if (run === undefined) throw runNotFound(runId);
  if (run.tenant === ctx.tenant) return run;
  if (
    scope === 'accessible' &&
    (await listings.runHasPublishedCheckpoint(ctx.clients.doc, ctx.tables.registry, runId, ctx.now))
  ) {
    return run;
  }
  throw runNotFound(runId);
}

/** Another tenant's run shows only its published checkpoints (C4). */
async function runView(ctx: ListingContext, run: RunFacts): Promise<TrainingRunView> {
  const latest = await listings.latestRunCheckpoints(
    ctx.clients.doc,
    ctx.tables.registry,
    run.model_id,
    ctx.now,
    run.tenant !== ctx.tenant,
  );
  return trainingRunView(run, latest);
}

/**
 * `GET training_runs?limit&offset&access_scope`: the tenant's runs newest first; `accessible` adds,
 * after them, other tenants' runs with a live published checkpoint, newest publication first.
 */
export async function listTrainingRuns(
  ctx: ListingContext,
): Promise<{ training_runs: TrainingRunView[]; cursor: Cursor }> {
  const page = pageRequest(ctx.query, 20);
  const scope = scopeOf(ctx.query);
  const { doc } = ctx.clients;
  const owned = await listings.listTenantRunIds(doc, ctx.tables.models, ctx.tenant);
  let ids = owned;
  if (scope === 'accessible') {
    const mine = new Set(owned);
    const published = await listings.listPublishedRunIds(doc, ctx.tables.registry);
    // Each run is kept only while a checkpoint of it is live and published, as `training_runs/{id}`
    // decides: an expired one's marker stays until the sweeper's round (C1, C4).
    const readable = await listings.runsWithPublishedCheckpoint(
      doc,
      ctx.tables.registry,
      published.filter((id) => !mine.has(id)),
      ctx.now,
    );
    ids = [...owned, ...readable];
  }
  const { items, cursor } = pageOf(ids, page);
  const runs = await listings.readRuns(doc, ctx.tables, items);
  return { training_runs: await Promise.all(runs.map((run) => runView(ctx, run))), cursor };
}

/** `GET training_runs/{run_id}?access_scope`. */
export async function getTrainingRun(
  ctx: ListingContext,
  params: Readonly<Record<string, string>>,
): Promise<TrainingRunView> {
  const runId = params.run_id as string;
  const run = await visibleRun(ctx, runId, scopeOf(ctx.query));
  return runView(ctx, run);
}

/** `GET training_runs/{run_id}/checkpoints`: every live checkpoint of the caller's run, newest first; no paging. */
export async function listRunCheckpoints(
  ctx: ListingContext,
  params: Readonly<Record<string, string>>,
): Promise<{ checkpoints: CheckpointView[]; cursor: null }> {
  const runId = params.run_id as string;
  await visibleRun(ctx, runId, 'owned');
  const rows = await listings.listRunCheckpoints(ctx.clients.doc, ctx.tables.registry, runId, ctx.now);
  return { checkpoints: rows.map(checkpointView), cursor: null };
}

/** `GET checkpoints?limit&offset`: the tenant's live checkpoints, newest first. */
export async function listUserCheckpoints(
  ctx: ListingContext,
): Promise<{ checkpoints: CheckpointView[]; cursor: Cursor }> {
  const page = pageRequest(ctx.query, 100);
  const rows = await listings.listTenantCheckpoints(
    ctx.clients.doc,
    ctx.tables.registry,
    ctx.tenant,
    ctx.now,
  );
  const { items, cursor } = pageOf(rows, page);
  const answered = await listings.withCheckpointMetadata(ctx.clients.doc, ctx.tables.registry, items);
  return { checkpoints: answered.map(checkpointView), cursor };
}

/**
 * `GET sessions?limit&offset&access_scope`: the tenant's session ids, newest first. Sessions are never
 * published, so `accessible` lists the same ones as `owned`.
 */
export async function listSessions(ctx: ListingContext): Promise<{ sessions: string[] }> {
  const page = pageRequest(ctx.query, 20);
  scopeOf(ctx.query);
  const ids = await listings.listTenantSessionIds(ctx.clients.doc, ctx.tables.registry, ctx.tenant);
  return { sessions: pageOf(ids, page).items };
}

/** `GET sessions/{session_id}?access_scope`: the session's training runs and sampling sessions. */
export async function getSession(
  ctx: ListingContext,
  params: Readonly<Record<string, string>>,
): Promise<{ training_run_ids: string[]; sampler_ids: string[] }> {
  const sessionId = params.session_id as string;
  scopeOf(ctx.query);
  // Still read after a finish: only heartbeats and new submits are refused then (W9).
  await readOwnSession(ctx.clients.doc, ctx.tables.registry, sessionId, ctx.tenant);
  return listings.sessionMembers(ctx.clients.doc, ctx.tables.registry, sessionId);
}
