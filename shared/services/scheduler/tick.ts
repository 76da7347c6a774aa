import { randomUUID } from 'node:crypto';
import { realSleep } from '../../aws/backoff.js';
import { Limiter } from '../../aws/limiter.js';
import { isAwsError } from '../../base/errors.js';
import { faultHook } from '../../base/fault-hook.js';
import { mintRequestId } from '../../base/ids.js';
import { logger } from '../../base/logger.js';
import { assembleWorkItem, payloadsToRead, type SampleClaimed } from '../../domain/planning/assemble.js';
import { claimFor, type ModelClaim } from '../../domain/planning/claim.js';
import { OLDEST_STEP_WINDOWS } from '../../domain/planning/coalesce.js';
import type { Plan, Snapshot } from '../../domain/planning/plan-types.js';
import { plan } from '../../domain/planning/planner.js';
import { routePlan } from '../../domain/planning/routing.js';
import { manifestOf, type WorkItem } from '../../domain/planning/work-item.js';
import type { LiveRow, ModelRow } from '../../domain/records.js';
import type { PayloadReads } from '../../repositories/payloads.js';
import { emitMetric, opsMetrics } from '../ops/metrics.js';
import { oldestPendingAgeSeconds } from '../ops/queue-status.js';
import { type SchedulerAdapters, schedulerAdapters } from './adapters.js';
import { addTickCounters, emptyTickCounters, type TickCounters } from './counters.js';
import { HeldModels } from './holds.js';
import { type HeldClaims, noClaimsHeld, releaseClaims } from './release.js';
import { type SchedulerSettings, schedulerSettings } from './settings.js';
import type { PassEnd } from './tick-lock.js';
import { WAKE_ALL, type WakeScope, wakeModels } from './wake.js';

/** Plans per pass: a pass plans again while a work-item cap cut its previous plan short. */
export const MAX_PLANS_PER_PASS = 16;
/** Passes per hold of the lock (each coalesces every trigger that arrived during the previous one). */
export const MAX_PASSES_PER_TICK = 5;
/** No further pass starts with less invocation time than this left. */
const MIN_REMAINING_FOR_PASS_MS = 10_000;
/** Conditional claim writes in flight at once. */
const CLAIM_CONCURRENCY = 16;
/**
 * How often a tick reads its held models again while their window lasts (S5): the barrier's own
 * stream record may wait behind this very tick (locally a shard's batches go one at a time; on AWS
 * its lane is its key's hash, docs/architecture.md#the-wake-up-path), so the tick looks for it
 * itself. Each look is one incremental read of the held models.
 */
export const COALESCE_POLL_MS = 20;
/**
 * Rounds of one tick at most (S5): the first, then one per look at the held models. Besides this
 * count, holding stops `OLDEST_STEP_WINDOWS` windows after the tick began (no hold outlasts that, bar
 * a clock skew); the round after either plans with no window, so a model the tick held is dispatched
 * by it at the latest then.
 */
export const MAX_HOLD_ROUNDS = 64;

export interface TickContext {
  readonly settings: SchedulerSettings;
  readonly adapters: SchedulerAdapters;
  readonly now: () => number;
  readonly maxPlans: number;
  /** S5's window for this round's plans (the settings' `coalesceMs`; 0 in a tick's last round). */
  readonly coalesceMs: number;
}

export interface TickOptions {
  readonly settings?: SchedulerSettings;
  readonly adapters?: SchedulerAdapters;
  readonly now?: () => number;
  readonly maxPlans?: number;
  readonly maxPasses?: number;
  /** How the tick waits out a coalescing window (S5); default: a timer. */
  readonly sleep?: (ms: number) => Promise<void>;
  /** The invocation's remaining time (Lambda's context), to stop coalescing before the timeout. */
  readonly remainingMs?: () => number;
  /**
   * What the trigger names (R5): the models whose pending rows the first pass reads, or the full
   * look (the default: the schedule's safety tick, the drain switch, a trigger naming no model).
   */
  readonly wake?: WakeScope;
}

export interface TickOutcome {
  /**
   * `ran`: passes ran under the pool's lock. `idle`: the look before the lock planned nothing, so the
   * lock was never taken. `coalesced`: another invocation holds the lock and will run one more pass.
   */
  readonly status: 'ran' | 'idle' | 'coalesced';
  readonly counters: TickCounters;
  /** Request ids every scan of this tick showed (R5: what the stream check compares against). */
  readonly seen: ReadonlySet<string>;
}

export function tickContext(options: TickOptions = {}): TickContext {
  const settings = options.settings ?? schedulerSettings();
  return {
    settings,
    adapters: options.adapters ?? schedulerAdapters(settings),
    now: options.now ?? Date.now,
    maxPlans: options.maxPlans ?? MAX_PLANS_PER_PASS,
    coalesceMs: settings.coalesceMs,
  };
}

/**
 * One tick for the pool: a round (`tickRound`), then, while the round held models back for the rest
 * of their SDK step (S5), a wait (until the earliest hold ends, at most `COALESCE_POLL_MS`) and
 * another round over exactly those models, from a fresh incremental read (R5: each round plans from
 * its own snapshot, as any incremental tick does). A barrier that arrived meanwhile joins its pass in
 * one work item; a pass still alone is dispatched once its window is over. The tick that held a
 * model dispatches it at the latest in its last round (planned with no window), so a model no other
 * record wakes is never stranded. The wait holds no lock: another tick woken by the barrier may
 * dispatch the model first, and this tick's next read then finds it in flight (R3).
 */
export async function runTick(options: TickOptions = {}): Promise<TickOutcome> {
  const ctx = tickContext(options);
  const sleep = options.sleep ?? realSleep;
  const counters = emptyTickCounters();
  const seen = new Set<string>();
  let status: TickOutcome['status'] = 'idle';
  let wake = options.wake ?? WAKE_ALL;
  const holdsEnd = ctx.now() + OLDEST_STEP_WINDOWS * ctx.coalesceMs;
  for (let round = 1; ; round++) {
    const lastRound =
      round >= MAX_HOLD_ROUNDS ||
      ctx.now() >= holdsEnd ||
      (options.remainingMs !== undefined && options.remainingMs() < MIN_REMAINING_FOR_PASS_MS);
    const holds = new HeldModels();
    const done = await tickRound(lastRound ? { ...ctx, coalesceMs: 0 } : ctx, options, wake, holds);
    addTickCounters(counters, done.counters);
    for (const id of done.seen) seen.add(id);
    status = strongerStatus(status, done.status);
    counters.models_held += holds.size;
    const wait = holds.wait(ctx.now(), Math.min(ctx.coalesceMs, COALESCE_POLL_MS));
    if (wait === undefined) break;
    counters.coalesce_waits++;
    counters.coalesce_wait_ms += wait;
    await sleep(wait);
    wake = wakeModels(holds.ids());
  }
  if (status === 'ran' || counters.coalesce_waits > 0) {
    logger.info('tick', { pool: ctx.settings.pool, ...counters });
  }
  return { status, counters, seen };
}

/** A tick's status over its rounds: `ran` if any round ran, else `coalesced` if any coalesced. */
function strongerStatus(a: TickOutcome['status'], b: TickOutcome['status']): TickOutcome['status'] {
  const rank = { idle: 0, coalesced: 1, ran: 2 } as const;
  return rank[b] > rank[a] ? b : a;
}

/**
 * One round of a tick. It first looks: one snapshot, planned without the lock. Most triggers
 * unblock nothing (a pass queued behind a barrier, a model still in flight), and a snapshot read
 * after the trigger that plans nothing needs no lock: only claims make work dispatchable-no-more, and
 * whatever makes work dispatchable (a commit, a new row) triggers a tick of its own. When the look
 * plans something, the tick takes the lock (or asks its holder for another pass) while it reads the
 * drain switch, dispatches from the look's snapshot, and runs further passes until nobody asks for
 * more; each pass ends its hold (or takes up the asks) once its claims landed, beside the work item's
 * PUT and send, so neither costs the path a round trip of its own. Every step is safe to repeat
 * and to overlap with another tick: a pass that fails after claiming gives its claims back; a crash
 * leaves nothing claimed, or claims whose leases expire and which the sweeper re-plans; a stale
 * snapshot only loses claims (E2). Every plan it makes tells `holds` which models it held back (S5).
 */
async function tickRound(
  ctx: TickContext,
  options: TickOptions,
  wake: WakeScope,
  holds: HeldModels,
): Promise<TickOutcome> {
  const { lock } = ctx.adapters;
  const look = await readSnapshot(ctx, wake);
  const counters = look.counters;
  const seen = new Set(look.snapshot.live.map((row) => row.request_id));
  reportOldestPending(ctx, look.snapshot, wake);
  const looked = planOf(ctx, look.snapshot, ctx.now());
  holds.note(looked);
  if (plansNothing(looked)) return { status: 'idle', counters, seen };

  const holder = randomUUID();
  // The drain switch is read beside the lock's write, not after it: both are needed before the first
  // claim, neither needs the other's answer, and a tick that coalesces ignores what it read.
  // A holder asked for another pass reads what this tick would have: the same models, or all.
  const [taken, drain] = await Promise.allSettled([
    lock.acquire(holder, ctx.now(), wake),
    ctx.adapters.isDraining(),
  ]);
  if (taken.status === 'rejected') throw taken.reason;
  if (taken.value === 'held') {
    logger.info('tick coalesced into the running one', { pool: ctx.settings.pool });
    return { status: 'coalesced', counters, seen };
  }
  if (drain.status === 'rejected') {
    await lock.release(holder).catch(() => undefined);
    throw drain.reason;
  }
  const maxPasses = options.maxPasses ?? MAX_PASSES_PER_TICK;
  const held = lock.hold(holder, ctx.now);
  let ending: Promise<PassEnd> | undefined;
  let nextWake: WakeScope = WAKE_ALL;
  try {
    for (let passes = 1; ; passes++) {
      // The lock's end of this pass: once its last claims landed (see `PassHooks.claimed`), while
      // the work item is written and sent, or after the pass when it dispatched nothing.
      const endPass = (): Promise<PassEnd> => {
        const lastAllowed =
          passes >= maxPasses ||
          (options.remainingMs !== undefined && options.remainingMs() < MIN_REMAINING_FOR_PASS_MS);
        // At the limit, whoever asked for more is served by the next trigger (the models stream, the schedule).
        ending ??= lastAllowed
          ? lock.release(holder).then((): PassEnd => ({ status: 'released' }))
          : lock.finishPass(holder, ctx.now());
        // Awaited below; a pass that fails meanwhile must not leave it unobserved.
        ending.catch(() => undefined);
        return ending;
      };
      const hooks: PassHooks = {
        claimed: () => void endPass(),
        holds,
        ...(passes === 1 ? { draining: drain.value } : {}),
      };
      const done =
        passes === 1 ? await dispatchPass(ctx, look.snapshot, hooks) : await runPass(ctx, nextWake, hooks);
      addTickCounters(counters, done.counters);
      for (const id of done.seen) seen.add(id);
      const end = await endPass();
      ending = undefined;
      if (end.status !== 'again') break;
      nextWake = end.wake;
    }
  } catch (error) {
    await ending?.catch(() => undefined);
    await lock.release(holder).catch(() => undefined);
    throw error;
  } finally {
    held.stop();
  }
  return { status: 'ran', counters, seen };
}

/** The plan of a snapshot (pure: no claim, no read), with this round's coalescing window (S5). */
function planOf(ctx: TickContext, snapshot: Snapshot, now: number): Plan {
  return plan(snapshot, ctx.settings.limits, now, { coalesceMs: ctx.coalesceMs });
}

function plansNothing(planned: Plan): boolean {
  return planned.models.length === 0 && planned.samples.length === 0;
}

/**
 * The oldest-pending alarm watches this (0 when nothing is pending). Only a full look knows the
 * pool's oldest: the safety tick reports it every minute, and the alarm takes each minute's maximum.
 */
function reportOldestPending(ctx: TickContext, snapshot: Snapshot, wake: WakeScope): void {
  if (wake.kind !== 'all') return;
  emitMetric(
    opsMetrics.oldestPendingAgeSeconds,
    oldestPendingAgeSeconds(snapshot.live, ctx.now()),
    ctx.settings.pool,
  );
}

/** What the tick that runs a pass tells it, and asks of it. */
export interface PassHooks {
  /**
   * Called once the pass's last plan has its claims (before its payload reads, the work item's PUT
   * and the manifest's send): the tick then ends its hold of the lock beside those writes. Its
   * decisions are made by then: any tick that takes the lock next reads the claims strongly (R5)
   * and plans around them, and a failure after it still gives the claims back (E7).
   */
  readonly claimed?: () => void;
  /** The drain switch as the tick read it beside the lock; absent: the pass reads it itself. */
  readonly draining?: boolean;
  /** Told what each plan held back (S5), so the tick can wait for those models and plan them again. */
  readonly holds?: HeldModels;
}

/** One pass under the lock: read one snapshot (R5), then plan and dispatch from it. */
export async function runPass(
  ctx: TickContext,
  wake: WakeScope = WAKE_ALL,
  hooks: PassHooks = {},
): Promise<{ counters: TickCounters; seen: Set<string> }> {
  const { snapshot, counters } = await readSnapshot(ctx, wake);
  reportOldestPending(ctx, snapshot, wake);
  const pass = await dispatchPass(ctx, snapshot, hooks);
  addTickCounters(counters, pass.counters);
  return { counters, seen: pass.seen };
}

async function dispatchPass(
  ctx: TickContext,
  snapshot: Snapshot,
  hooks: PassHooks,
): Promise<{ counters: TickCounters; seen: Set<string> }> {
  const counters = await dispatchSnapshot(ctx, snapshot, hooks);
  counters.passes = 1;
  return { counters, seen: new Set(snapshot.live.map((row) => row.request_id)) };
}

/**
 * The snapshot of R5: one read of the index (the pool's whole `live` index, or the named models'
 * entries in `live_by_model`), the strongly consistent rows of the models its pending training rows
 * name, and the live claims of its pending samples. An incremental read costs what the named models
 * have pending, whatever else is parked. No payload is read here (R6).
 */
export async function readSnapshot(
  ctx: TickContext,
  wake: WakeScope = WAKE_ALL,
): Promise<{ snapshot: Snapshot; counters: TickCounters }> {
  const { adapters } = ctx;
  const counters = emptyTickCounters();
  const scan = await readIndex(ctx, wake, counters);
  counters.index_pages = scan.pages;
  counters.rows_scanned = scan.rows.length;
  const pending = scan.rows.filter((row) => row.status === 'pending');
  const modelIds = new Set(pending.filter((row) => row.request_type !== 'sample').map((row) => row.model_id));
  const sampleIds = pending.filter((row) => row.request_type === 'sample').map((row) => row.request_id);
  const [models, sampleClaims] = await Promise.all([
    modelIds.size === 0 ? new Map<string, ModelRow>() : adapters.readModels(modelIds),
    sampleIds.length === 0 ? new Set<string>() : adapters.readSampleClaims(sampleIds, ctx.now()),
  ]);
  counters.models_read = modelIds.size;
  counters.sample_claims_read = sampleIds.length;
  return { snapshot: { live: scan.rows, models, sampleClaims }, counters };
}

/**
 * The index read of a snapshot. An index the table does not serve yet (a stack deployed before
 * `live_by_model`, while CloudFormation backfills it) answers a validation error: the full look
 * then plans the same work at the full look's cost.
 */
async function readIndex(
  ctx: TickContext,
  wake: WakeScope,
  counters: TickCounters,
): Promise<{ rows: LiveRow[]; pages: number }> {
  if (wake.kind === 'all') return ctx.adapters.scanLive();
  counters.models_woken = wake.modelIds.size;
  try {
    return await ctx.adapters.readLiveOf(wake.modelIds);
  } catch (error) {
    if (!isAwsError(error, 'ValidationException', 'ResourceNotFoundException')) throw error;
    logger.warn('live_by_model unreadable: full look instead', { pool: ctx.settings.pool, error });
    counters.models_woken = 0;
    return ctx.adapters.scanLive();
  }
}

/**
 * Plans from a snapshot and dispatches what it wins: claims (E2), then the payloads of exactly the
 * claimed requests (R6), the work item to S3 and its manifest to SQS. While a cap cut the plan short
 * (or while it dispatched samples, which may leave a model's other sampler checkpoints for a work
 * item of their own) it plans again from the same snapshot, updated with this pass's own claims
 * (claimed models are in flight, lost ones left out), so one pass may send several work items. Request rows are never
 * written here (R6): what is in flight lives on the model row and the sample claim. A plan that fails
 * after claiming and before its manifest is sent gives its claims back, then rethrows (E7). The
 * operator's drain switch is read only once there is something to dispatch: while it is on, nothing is.
 */
export async function dispatchSnapshot(
  ctx: TickContext,
  snapshot: Snapshot,
  hooks: PassHooks = {},
): Promise<TickCounters> {
  const counters = emptyTickCounters();
  const models = new Map(snapshot.models);
  const sampleClaims = new Set(snapshot.sampleClaims ?? []);
  const live: readonly LiveRow[] = snapshot.live;
  // The next round's plan when the previous round already made it (to tell whether it was the last).
  let ahead: { readonly planned: Plan; readonly now: number } | undefined;
  for (let round = 0; round < ctx.maxPlans; round++) {
    const now = ahead?.now ?? ctx.now();
    const planned = ahead?.planned ?? planOf(ctx, { live, models, sampleClaims }, now);
    ahead = undefined;
    counters.plans++;
    hooks.holds?.note(planned);
    if (plansNothing(planned)) break;
    if (round === 0 && (hooks.draining ?? (await ctx.adapters.isDraining()))) {
      logger.info('pool draining: nothing dispatched', { pool: ctx.settings.pool });
      break;
    }
    // Samples of a model's other sampler checkpoints wait for a work item of their own (R4): plan them
    // now, from this pass's claims. An incremental tick is woken by nothing else for them (a sample's
    // commit writes no record a trigger watches), so leaving them would wait for the safety tick.
    const last = round === ctx.maxPlans - 1 || (!planned.cap_reached && planned.samples.length === 0);
    // The pass's last plan tells the tick once its claims landed. A plan with samples is the last
    // when the same snapshot, with these claims, plans nothing more: that plan is made here, once the
    // claims are in `models` and `sampleClaims` (nothing changes them after), and is the next round's.
    const claimed = (): void => {
      if (!last) {
        const at = ctx.now();
        ahead = { planned: planOf(ctx, { live, models, sampleClaims }, at), now: at };
      }
      if (last || (ahead !== undefined && plansNothing(ahead.planned))) hooks.claimed?.();
    };
    await dispatchPlan(ctx, planned, { models, sampleClaims, now, counters, claimed });
    if (last) break;
  }
  return counters;
}

/** What one round of a pass shares: the snapshot it updates with its claims, its counters and hook. */
interface DispatchRound {
  readonly models: Map<string, ModelRow>;
  readonly sampleClaims: Set<string>;
  readonly now: number;
  readonly counters: TickCounters;
  readonly claimed: () => void;
}

async function dispatchPlan(ctx: TickContext, planned: Plan, round: DispatchRound): Promise<void> {
  // One work item per destination (S2): a held model's to its holder's lane, the rest to `work`. The
  // pass's hook fires once, after the last part's claims, when every claim of the plan is settled.
  const parts = routePlan(planned, round.models, round.now);
  for (const [index, part] of parts.entries()) {
    const last = index === parts.length - 1;
    await dispatchPart(ctx, part.plan, part.lane, {
      ...round,
      claimed: last ? round.claimed : () => undefined,
    });
  }
  if (parts.length === 0) round.claimed();
}

async function dispatchPart(
  ctx: TickContext,
  planned: Plan,
  lane: number | undefined,
  round: DispatchRound,
): Promise<void> {
  const { models, sampleClaims, now, counters } = round;
  const workItemId = `wi-${mintRequestId(now)}`;
  const held = noClaimsHeld();
  let workItem: WorkItem | undefined;
  try {
    workItem = await claimAndSend(
      ctx,
      planned,
      { models, sampleClaims, now, workItemId, held, claimed: round.claimed, lane },
      counters,
    );
  } catch (error) {
    // A real crash runs no code: a simulated one leaves its claims to the leases too (the tests of
    // that path rely on it). Any other failure before the send gives the claims back (E7).
    if (faultHook.isCrash(error)) throw error;
    if (held.models.length > 0 || held.samples.length > 0) {
      await releaseClaims(
        ctx.adapters,
        held,
        CLAIM_CONCURRENCY,
        { pool: ctx.settings.pool, work_item_id: workItemId, error },
        counters,
      );
    }
    throw error;
  }
  if (workItem === undefined) return;
  counters.work_items++;
  if (lane !== undefined) counters.work_items_to_lanes++;
  for (const model of workItem.models) {
    for (const step of model.steps) {
      if (step.fail === undefined) counters.steps_dispatched++;
      else counters.fail_steps_dispatched++;
    }
  }
  for (const sample of workItem.samples) {
    if (sample.fail === undefined) counters.samples_dispatched++;
    else counters.fail_samples_dispatched++;
  }
  logger.info('work item dispatched', {
    work_item_id: workItem.work_item_id,
    ...(lane === undefined ? {} : { lane }),
    models: workItem.models.map((model) => model.model_id),
    steps: workItem.models.reduce((sum, model) => sum + model.steps.length, 0),
    samples: workItem.samples.length,
  });
}

interface PassState {
  readonly models: Map<string, ModelRow>;
  readonly sampleClaims: Set<string>;
  readonly now: number;
  readonly workItemId: string;
  /** Filled as claims are written, so a failure can give back exactly those. */
  readonly held: HeldClaims;
  /** Called once the claims are settled (see `PassHooks.claimed`). */
  readonly claimed: () => void;
  /** The holder's lane the work item goes to (S2); undefined: the shared queue. */
  readonly lane: number | undefined;
}

/**
 * Claims, then reads, writes and sends: everything of a dispatch that a failure before the send must
 * undo. Returns the work item sent, or undefined when nothing was left to send. In sequence only
 * where one needs the other's answer: the claims (models and samples together), then the payloads
 * (a sample's after its row), then the work item's PUT, then its manifest.
 */
async function claimAndSend(
  ctx: TickContext,
  planned: Plan,
  pass: PassState,
  counters: TickCounters,
): Promise<WorkItem | undefined> {
  const { adapters, settings } = ctx;
  const { models, sampleClaims, now, workItemId, held } = pass;
  const limiter = new Limiter(CLAIM_CONCURRENCY);

  // Model and sample claims go out together: they are independent conditional writes (E2, R4).
  const claims = new Map<string, ModelClaim>();
  const won: string[] = [];
  const claimModel = async (model: Plan['models'][number]): Promise<void> => {
    // The planner only plans models present in the snapshot.
    const row = models.get(model.model_id)!;
    const claim = claimFor(row, model, now, settings.leaseMs);
    let landed: boolean;
    try {
      landed = await adapters.claimModel(claim);
    } catch (error) {
      held.models.push(claim);
      throw error;
    }
    if (landed) {
      held.models.push(claim);
      claims.set(model.model_id, claim);
      models.set(model.model_id, { ...row, ...claim.set });
    } else {
      // Someone else claimed or re-planned it since the snapshot: its row is no longer known.
      counters.claims_lost++;
      models.delete(model.model_id);
    }
  };
  // The samples' claims go together: usually one transaction per 100 (R4: each is still its own).
  const claimSamples = async (samples: Plan['samples']): Promise<void> => {
    if (samples.length === 0) return;
    const wanted = samples.map((sample) => ({
      request_id: sample.request_id,
      claim_token: workItemId,
      work_item_id: workItemId,
      lease_until: now + settings.leaseMs,
    }));
    let landed: boolean[];
    try {
      landed = await adapters.claimSamples(wanted, now);
    } catch (error) {
      held.samples.push(...wanted);
      throw error;
    }
    for (const [index, claim] of wanted.entries()) {
      if (landed[index] === true) {
        held.samples.push(claim);
        won.push(claim.request_id);
      } else counters.sample_claims_lost++;
      sampleClaims.add(claim.request_id);
    }
  };
  await allSettledOrThrow([
    ...planned.models.map((model) => limiter.run(() => claimModel(model))),
    claimSamples(planned.samples),
  ]);
  counters.models_claimed += claims.size;
  counters.samples_claimed += won.length;
  faultHook.crash('scheduler:after-claim');
  pass.claimed();

  // The training steps' payloads are read while the claimed samples' rows are checked; a sample's
  // payload only once its row shows it still pending (R6: nothing but what is dispatched).
  const noSamples = new Map<string, SampleClaimed>();
  const sampleClaimed = new Map<string, SampleClaimed>();
  const readSome = (ids: readonly string[]): Promise<PayloadReads> =>
    ids.length === 0
      ? Promise.resolve({ payloads: new Map<string, unknown>(), gets: 0, bytes: 0, unreadable: [] })
      : adapters.readPayloads(ids);
  const [trainingReads, sampleReads] = await allSettledValues([
    readSome(payloadsToRead(planned, claims, noSamples)),
    (async (): Promise<PayloadReads> => {
      if (won.length === 0) return readSome([]);
      const rows = await adapters.readSampleRows(won);
      for (const id of won) {
        const row = rows.get(id);
        if (row === undefined || row.status !== 'pending') counters.samples_not_pending++;
        else sampleClaimed.set(id, { tenant: row.tenant, claim_token: workItemId });
      }
      return readSome(payloadsToRead({ ...planned, models: [] }, claims, sampleClaimed));
    })(),
  ]);
  const payloads = new Map([...trainingReads.payloads, ...sampleReads.payloads]);
  for (const reads of [trainingReads, sampleReads]) {
    counters.payload_gets += reads.gets;
    counters.payload_bytes += reads.bytes;
    counters.payloads_unreadable += reads.unreadable.length;
  }

  const workItem = assembleWorkItem({
    workItemId,
    pool: settings.pool,
    now,
    plan: planned,
    claims,
    sampleClaims: sampleClaimed,
    payloads,
  });
  if (workItem === undefined) return undefined;
  counters.work_item_bytes += await adapters.writeWorkItem(workItem);
  faultHook.crash('scheduler:after-write-work-item');
  await adapters.sendManifest(manifestOf(workItem), pass.lane);
  return workItem;
}

/**
 * Waits for every task, then throws the first failure: a claim still in flight when another failed
 * must have landed or lost before the pass gives its claims back.
 */
async function allSettledOrThrow(tasks: readonly Promise<void>[]): Promise<void> {
  await allSettledValues(tasks);
}

/** `allSettledOrThrow` for tasks with values: every value, once every task has ended. */
async function allSettledValues<T extends readonly unknown[]>(
  tasks: { readonly [K in keyof T]: Promise<T[K]> },
): Promise<T> {
  const results = await Promise.allSettled(tasks);
  const failed = results.find((result) => result.status === 'rejected');
  if (failed !== undefined) throw failed.reason;
  return results.map((result) => (result as PromiseFulfilledResult<unknown>).value) as unknown as T;
}
