import { faultHook } from '../../base/fault-hook.js';
import { logger } from '../../base/logger.js';
import type { WorkItemModel } from '../../domain/planning/work-item.js';
import { commitModel } from './commit.js';
import type { StepCommit } from './commit-items.js';
import { AbandonedError, type RunContext, stopIfAborted } from './context.js';
import { LeaseLostError, releaseForReplan } from './lease.js';
import { COMMIT_INLINE_BUDGET_BYTES, storeOutcome, storeState } from './outputs.js';
import { changesState, forcesSnapshot, rebuildState } from './recovery.js';
import { type PrefetchedState, prefetchStateBlob } from './state-blobs.js';
import {
  discardSavedCheckpoints,
  executeStep,
  type PartState,
  putSavedCheckpoints,
  type StepExecution,
} from './steps.js';
import type { ModelOutcome, PartOutcome } from './types.js';

/**
 * One model's part of a work item, independent of every other part (no tenant waits for another's):
 * check the work item still holds the model, load exactly `base_state_ref` (E3), run the steps in seq
 * order, write state, large results and checkpoint blobs under fenced keys, commit in one
 * transaction (E4), settle an ambiguous commit by re-reading (E5).
 *
 * On an infrastructure error the part commits nothing and releases the model for re-plan at once
 * (`releaseForReplan`), rather than leaving it to lease expiry. A worker that is stopped or loses its
 * lease abandons the part and releases nothing.
 */
export async function runModelPart(model: WorkItemModel, ctx: RunContext): Promise<ModelOutcome> {
  const { model_id: modelId, inflight } = model;
  const outcome = await runPart(model, ctx).catch(async (error: unknown): Promise<PartOutcome> => {
    if (error instanceof LeaseLostError) return { outcome: 'lease_lost' };
    if (error instanceof AbandonedError || ctx.signal?.aborted) return { outcome: 'abandoned' };
    const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    logger.error('model part failed; releasing it for re-plan', {
      model_id: modelId,
      inflight,
      error: message,
    });
    const released = await releaseForReplan(
      ctx.clients.doc,
      ctx.tables.models,
      modelId,
      inflight,
      ctx.now(),
      ctx.maxAttempts,
    ).catch(() => false);
    return { outcome: 'failed', error: message, released };
  });
  logger.info('model part finished', { model_id: modelId, inflight, outcome: outcome.outcome });
  return { model_id: modelId, ...outcome };
}

async function runPart(model: WorkItemModel, ctx: RunContext): Promise<PartOutcome> {
  const { clients, backend } = ctx;
  const residency = ctx.residency?.enabled ? ctx.residency : undefined;
  // The base state is fetched while the row is read, unless this process holds the model: both are
  // reads, and the state key is immutable (E3), so the GET needs no answer from the row. Its failure
  // counts only if the row says the part runs (a stale redelivery's base state may be collected
  // already). A state this process committed is not fetched at all (./state-cache.ts).
  const prefetchKey = residency?.has(model.model_id) ? undefined : model.base_state_ref;
  const prefetched = prefetchKey === undefined ? undefined : readBaseState(prefetchKey, ctx);
  // A redelivered or re-planned work item stops here, before it runs or writes anything. The row was
  // read with every other part's when the work item started (./opening-reads.ts).
  const row = (await ctx.opening.models).get(model.model_id);
  if (row?.inflight !== model.inflight) {
    prefetched?.discard();
    return { outcome: 'not_inflight' };
  }

  const lease = ctx.leases.hold(model.model_id, model.inflight, row.lease_until ?? 0);
  const env = {
    backend,
    passes: ctx.passes,
    clients,
    tables: ctx.tables,
    bucket: ctx.bucket,
    model,
    run: ctx.run,
    now: ctx.now,
  };
  // The state after base_applied_through: resident in this process (S1), else rebuilt from the row's
  // snapshot and replay log (S4). The row was read strongly after the claim, so its snapshot and log
  // are the committed state's.
  const resident = residency?.take(model.model_id, model.base_applied_through);
  const part: PartState = {
    state: resident?.state,
    stateChanged: false,
    unloaded: false,
    saved: new Map(),
  };
  let kept = false;
  try {
    await ctx.emit({ kind: 'model-started', model_id: model.model_id, inflight: model.inflight });
    stopIfAborted(ctx.signal, lease);
    if (resident === undefined) {
      const rebuilt = await rebuildState(
        row,
        (key) =>
          (key === prefetchKey && prefetched !== undefined ? prefetched : readBaseState(key, ctx)).load(),
        env,
      );
      part.state = rebuilt.state;
      if (rebuilt.replayed > 0) {
        logger.info('model state rebuilt by replay', {
          model_id: model.model_id,
          replayed: rebuilt.replayed,
        });
      }
    }
    const executions: StepExecution[] = [];
    for (const step of model.steps) {
      stopIfAborted(ctx.signal, lease);
      const execution = await executeStep(step, part, env);
      executions.push(execution);
      await ctx.emit({
        kind: 'step-done',
        model_id: model.model_id,
        seq: step.seq,
        failed: execution.outcome.status === 'failed',
      });
      faultHook.crash('worker:mid-item');
    }

    // What the commit records of the state (S1, S3): a holder appends the steps that changed it to the
    // replay log and writes a snapshot only when one is due; without residency every change is written.
    const completed = model.steps.filter((_, index) => executions[index]?.outcome.status === 'completed');
    const changed = completed.filter((step) => changesState(step.request_type));
    const forced = completed.some((step) => forcesSnapshot(step.request_type));
    const replayBefore = row.replay?.length ?? 0;
    const keep = residency !== undefined && !part.unloaded && part.state !== undefined;
    const snapshot = keep
      ? (part.stateChanged || replayBefore > 0) &&
        (forced ||
          residency.snapshotDue(replayBefore + changed.length, resident?.unsnapshottedSince ?? ctx.now()))
      : part.stateChanged;

    // Fence: write nothing unless this work item still holds the model (a zombie stops here).
    stopIfAborted(ctx.signal, lease);
    if (!(await ctx.leases.stillHeld(model.inflight))) throw new LeaseLostError(model.inflight);
    const placement = { inlineMaxBytes: ctx.inlineResultMaxBytes, budget: COMMIT_INLINE_BUDGET_BYTES };
    const [stored, steps] = await Promise.all([
      snapshot
        ? storeState(backend, clients.s3, ctx.bucket, model.model_id, model.epoch, ctx.run, {
            state: part.state,
            stateChanged: true,
          })
        : undefined,
      Promise.all(
        executions.map(
          async (execution): Promise<StepCommit> => ({
            request_id: execution.request_id,
            outcome: await storeOutcome(
              execution.request_id,
              ctx.run,
              execution.outcome,
              placement,
              clients.s3,
              ctx.bucket,
            ),
            ...(execution.checkpoint === undefined ? {} : { checkpoint: execution.checkpoint }),
            ...(execution.sampling_session === undefined
              ? {}
              : { sampling_session: execution.sampling_session }),
          }),
        ),
      ),
      putSavedCheckpoints(clients.s3, ctx.bucket, part.saved),
    ]);
    const stateRef = stored?.key;
    await ctx.emit({ kind: 'model-written', model_id: model.model_id, state_ref: stateRef });
    faultHook.crash('worker:after-state-write');
    stopIfAborted(ctx.signal, lease);

    // Renewals stop here: the commit removes the lease, and a renewal racing it would only fail.
    ctx.leases.release(model.inflight);
    const last = model.steps[model.steps.length - 1];
    const appliedThrough = last?.seq ?? model.base_applied_through;
    const result = await commitModel(
      {
        model_id: model.model_id,
        inflight: model.inflight,
        run: ctx.run,
        base_applied_through: model.base_applied_through,
        applied_through: appliedThrough,
        ...(stateRef === undefined
          ? {
              replay_append: changed.map((step) => ({
                seq: step.seq,
                request_id: step.request_id,
                request_type: step.request_type,
              })),
            }
          : { state_ref: stateRef }),
        ...(keep ? { holder: { holder: residency.holder, until: residency.holdUntil() } } : {}),
        unloaded: part.unloaded,
        now: ctx.now(),
        steps,
      },
      model.epoch,
      { doc: clients.doc, tables: ctx.tables },
    );
    if (!result.committed) return { outcome: 'lost' };
    // This run's commit landed (seen, or found by re-reading its run on the row, E5): the key is this
    // run's alone, so it holds exactly these bytes.
    if (stored !== undefined) ctx.states.committed(stored.key, stored.bytes, row.state_ref);
    if (keep && part.state !== undefined) {
      const replayLength = stateRef === undefined ? replayBefore + changed.length : 0;
      residency.keep({
        modelId: model.model_id,
        state: part.state,
        appliedThrough,
        epoch: model.epoch,
        replayLength,
        // A rebuilt state's log has no known age here: its age counts from now.
        unsnapshottedSince: replayLength === 0 ? undefined : (resident?.unsnapshottedSince ?? ctx.now()),
      });
      kept = true;
    }
    return { outcome: 'committed', settled_by_reread: result.settledByReread };
  } finally {
    prefetched?.discard();
    await discardSavedCheckpoints(part.saved);
    ctx.leases.release(model.inflight);
    // A state not kept is freed: the part failed, was lost, or the model is unloaded.
    if (residency !== undefined && !kept) residency.discard(part.state);
  }
}

/** The base state, from this process's committed states or from S3 (./state-blobs.ts); loaded by `load`. */
function readBaseState(key: string, ctx: RunContext): PrefetchedState {
  return prefetchStateBlob(ctx.backend, ctx.clients.s3, ctx.bucket, key, ctx.states);
}
