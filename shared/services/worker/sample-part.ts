import type { SampleRun, SequencePrefix } from '../../backend/backend.js';
import { StepUserError } from '../../base/errors.js';
import { faultHook } from '../../base/fault-hook.js';
import { logger } from '../../base/logger.js';
import type { WorkItemSample } from '../../domain/planning/work-item.js';
import type { SamplePrefixRef } from '../../domain/records.js';
import { countSampleAttempt } from '../../repositories/futures.js';
import type { CutRow, PrefixPointer } from '../../repositories/prefix/types.js';
import { CANCELLED } from '../../repositories/samples/cancel.js';
import { releaseSampleClaim } from '../../repositories/samples/claims.js';
import { requireLiveSamplerCheckpoint } from './checkpoint-source.js';
import { returnSampleToPending } from './commit.js';
import { AbandonedError, type RunContext, type SamplingContext, stopIfAborted } from './context.js';
import type { CutParticipant } from './cut.js';
import { SampleClaimLostError } from './lease.js';
import { storeOutcome } from './outputs.js';
import { sampleResult } from './results.js';
import { type SampleStart, type SequenceStart, sampleContentId, sequenceCallId } from './sample-resume.js';
import { MalformedPayloadError, parseSamplePayload, sampleRequestOf } from './step-payloads.js';
import type { StepResult } from './steps.js';
import type { PartOutcome, SampleCutReport, SampleOutcome, SequenceStartReport } from './types.js';

/**
 * One sample request (R4): it holds a per-request claim (`claim#<request_id>` with `claim_token`), so
 * it runs only while that claim is this work item's, loads the sampler checkpoint (or the base model),
 * samples with the seed the API stored in the payload (P6), and commits its future and the deletion of
 * its claim in one transaction.
 *
 * Resumable (P1-P6). Generation runs in slices of `sliceTokens` new tokens per sequence; between
 * slices the sample checks for a cut. At a cut, each sequence's tokens since its last committed prefix
 * go to the work item's one `saveCut`, and the sample goes back to pending with, per sequence, the
 * pointer its save acknowledged, else the pointer it had (a failed save or nothing new), else none
 * (that sequence starts over). When dispatched again, each sequence continues from its restored prefix
 * through the backend's `resume`; the sampler is keyed by (seed, sample index, position), and stop
 * matching and max_tokens count the restored tokens, so the answer is the uninterrupted one.
 *
 * On a backend that `batchesSamples` (an engine of protocol version 2, B1) the call is not sliced: it
 * is issued whole, so every call of the work item shares the engine's decode steps, and a cut (or the
 * work item's abort) stops it at the engine's next step with its sequences so far, which the cut saves
 * as it would a slice's.
 */
export async function runSamplePart(sample: WorkItemSample, ctx: RunContext): Promise<SampleOutcome> {
  // Joined at once, so a cut's save waits for this sample before it goes out.
  const participant = ctx.sampling?.cut.join();
  const outcome = await runSample(sample, ctx, participant)
    .catch(async (error: unknown): Promise<PartOutcome> => {
      if (error instanceof SampleClaimLostError) return { outcome: 'lease_lost' };
      if (error instanceof AbandonedError || ctx.signal?.aborted) return { outcome: 'abandoned' };
      const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      logger.error('sample failed; releasing its claim', { request_id: sample.request_id, error: message });
      // Counted before the claim goes back, so the run that takes it sees this attempt (E2).
      await countSampleAttempt(ctx.clients.doc, ctx.tables.futures, sample.request_id).catch(() => false);
      // Gives the sample back to the scheduler at once rather than at its claim's expiry.
      const released = await releaseSampleClaim(
        ctx.clients.doc,
        ctx.tables.registry,
        sample.request_id,
        sample.claim_token,
      ).catch(() => false);
      return { outcome: 'failed', error: message, released };
    })
    .finally(() => participant?.leave());
  return { request_id: sample.request_id, ...outcome };
}

async function runSample(
  sample: WorkItemSample,
  ctx: RunContext,
  participant: CutParticipant | undefined,
): Promise<PartOutcome> {
  // Read with the other parts' claims and rows when the work item started (./opening-reads.ts).
  const claim = (await ctx.opening.claims).get(sample.request_id);
  if (claim?.claim_token !== sample.claim_token) return { outcome: 'not_inflight' };
  // E2's attempt limit, per sample: after K failed runs the sample fails as the server's error. A run
  // fails as the infrastructure's (counted on the future), or its worker vanishes with the claim
  // (counted on the claim: every dispatch of it past the first).
  const counted = (await ctx.opening.prefixRefs).get(sample.request_id)?.attempts;
  const attempts = (typeof counted === 'number' ? counted : 0) + Math.max(0, (claim.claims ?? 1) - 1);
  const exhausted = attempts >= ctx.maxAttempts && sample.fail === undefined;
  const run = exhausted
    ? {
        ...sample,
        fail: { message: `Request failed after ${attempts} attempts`, category: 'server' as const },
      }
    : sample;
  // The claim is renewed while the sample runs, so a long generation is not planned a second time.
  const claimLease = ctx.leases.holdSampleClaim(sample.request_id, sample.claim_token);
  const signal = ctx.signal === undefined ? claimLease : AbortSignal.any([ctx.signal, claimLease]);
  // cancel_future's mark (W9): on the claim already (a claim taken over after its lease ended), or
  // seen by the cancel poll while the sample runs.
  const cancel = ctx.sampling?.cancels.watch(sample.request_id, sample.claim_token);
  try {
    const cancelled = claim.cancel_requested !== undefined;
    return await runClaimedSample(run, { ...ctx, signal }, participant, { cancel, cancelled });
  } finally {
    ctx.sampling?.cancels.unwatch(sample.request_id);
    ctx.leases.releaseSampleClaim(sample.request_id, sample.claim_token);
  }
}

/** Whether cancel_future asked this sample to end: already at its start, or by a signal meanwhile. */
interface CancelState {
  readonly cancel: AbortSignal | undefined;
  readonly cancelled: boolean;
}

const CANCELLED_RESULT: StepResult = { status: 'failed', error: CANCELLED };

async function runClaimedSample(
  sample: WorkItemSample,
  ctx: RunContext,
  participant: CutParticipant | undefined,
  cancel: CancelState,
): Promise<PartOutcome> {
  stopIfAborted(ctx.signal);
  // A fail entry (its payload is missing): the error is this sample's outcome, committed as any other.
  const generated: Generated = cancel.cancelled
    ? { kind: 'done', result: CANCELLED_RESULT, cancelled: true }
    : sample.fail === undefined
      ? await generate(sample, ctx, cancel.cancel)
      : { kind: 'done', result: { status: 'failed', error: sample.fail } };
  if (generated.kind === 'cut') {
    return cutSample(sample, ctx, participant as CutParticipant, generated);
  }
  participant?.leave();
  await ctx.emit({ kind: 'sample-done', request_id: sample.request_id });
  return commitResult(sample, ctx, generated.result, generated.cancelled === true);
}

/**
 * Stores and commits the sample's result. A commit refused because cancel_future marked the claim
 * meanwhile (W9) commits the cancel instead: the future then ends cancelled, as the API answered.
 */
async function commitResult(
  sample: WorkItemSample,
  ctx: RunContext,
  result: StepResult,
  cancelled: boolean,
): Promise<PartOutcome> {
  stopIfAborted(ctx.signal);
  const placement = { inlineMaxBytes: ctx.inlineResultMaxBytes, budget: ctx.inlineResultMaxBytes };
  const stored = await storeOutcome(
    sample.request_id,
    ctx.run,
    result,
    placement,
    ctx.clients.s3,
    ctx.bucket,
  );
  faultHook.crash('worker:after-result-write');
  stopIfAborted(ctx.signal);
  // The future row's log key, read with its prefix pointers when the work item opened (W9).
  const sessionLog = (await ctx.opening.prefixRefs).get(sample.request_id)?.session_log;
  // Gathered with the other samples that end now into one transaction (./sample-commits.ts).
  const committed = await ctx.sampleCommits.commit({
    requestId: sample.request_id,
    claimToken: sample.claim_token,
    run: ctx.run,
    outcome: stored,
    now: ctx.now(),
    ...(typeof sessionLog === 'string' ? { log: { logKey: sessionLog, tenant: sample.tenant } } : {}),
    cancelled,
  });
  if ('cancelRequested' in committed) return commitResult(sample, ctx, CANCELLED_RESULT, true);
  if (!committed.committed) return { outcome: 'lost' };
  return {
    outcome: 'committed',
    settled_by_reread: committed.settledByReread,
    ...(typeof sessionLog === 'string' ? { session_log: sessionLog } : {}),
  };
}

/** One sequence as generation left it, and the committed prefix it was restored from. */
interface Progress {
  readonly tokens: readonly number[];
  readonly logprobs: readonly number[];
  readonly pointer: PrefixPointer | null;
}

type Generated =
  | { readonly kind: 'done'; readonly result: StepResult; readonly cancelled?: boolean }
  | {
      readonly kind: 'cut';
      readonly numSamples: number;
      readonly contentId: string;
      readonly cuts: number;
      readonly sequences: ReadonlyMap<number, Progress>;
    };

function startReport(start: SequenceStart | undefined): SequenceStartReport {
  if (start === undefined || start.from === 'start') return { from: 'start' };
  if (start.from === 'restored') return { from: 'restored', tokens: start.tokens.length };
  return { from: 'regenerate', reason: start.reason };
}

/** Progress before the first slice: the restored prefixes (regenerated sequences start empty). */
function initialProgress(start: SampleStart): Map<number, Progress> {
  const progress = new Map<number, Progress>();
  for (const [index, sequence] of start.sequences) {
    if (sequence.from === 'restored') {
      progress.set(index, {
        tokens: sequence.tokens,
        logprobs: sequence.logprobs,
        pointer: sequence.pointer,
      });
    }
  }
  return progress;
}

function resumeOf(progress: ReadonlyMap<number, Progress>): (SequencePrefix | null)[] {
  const resume: (SequencePrefix | null)[] = [];
  for (const [index, sequence] of progress) {
    while (resume.length < index) resume.push(null);
    resume[index] = sequence.tokens.length > 0 ? sequence : null;
  }
  return resume;
}

async function generate(
  sample: WorkItemSample,
  ctx: RunContext,
  cancel: AbortSignal | undefined,
): Promise<Generated> {
  try {
    const payload = parseSamplePayload(sample.request_id, sample.payload);
    // Deleted, expired or unpublished since the session was made: this sample's user error (C3-C5).
    const checkpoint =
      payload.checkpoint === undefined
        ? undefined
        : {
            ...payload.checkpoint,
            blob_key: await requireLiveSamplerCheckpoint(payload.checkpoint, {
              readName: (pk) => ctx.samplers.checkpointName(pk),
              tenant: sample.tenant,
              now: ctx.now(),
            }),
          };
    const sampler = await ctx.samplers.get(payload.base_model, checkpoint);
    const request = sampleRequestOf(sample.request_id, payload);
    const sampling = ctx.sampling;
    if (sampling === undefined) {
      return { kind: 'done', result: completed(await ctx.backend.sample(sampler, request)) };
    }
    const start = (await sampling.starts.get(sample.request_id)) ?? { sequences: new Map(), cuts: 0 };
    if (start.sequences.size > 0) {
      const reports = Array.from({ length: Math.max(...start.sequences.keys()) + 1 }, (_, index) =>
        startReport(start.sequences.get(index)),
      );
      await ctx.emit({ kind: 'sample-resumed', request_id: sample.request_id, sequences: reports });
    }
    const pointers = new Map<number, PrefixPointer>();
    let progress: ReadonlyMap<number, Progress> = initialProgress(start);
    for (const [index, sequence] of progress) if (sequence.pointer) pointers.set(index, sequence.pointer);
    // The last slice's live state in the backend, which the next slice continues instead of replaying
    // `progress` (the answer is the same either way; a cut leaves it behind).
    let continuation: string | undefined;
    const whole = (await ctx.backend.batchesSamples?.()) === true;
    for (;;) {
      // Let timers and I/O run between slices (a CPU backend never yields inside one): a SIGTERM,
      // the cut poll and lease renewals are seen here, and other samples get their turn.
      await new Promise<void>((resolve) => setImmediate(resolve));
      stopIfAborted(ctx.signal);
      if (cancel?.aborted === true) return { kind: 'done', result: CANCELLED_RESULT, cancelled: true };
      if (sampling.cut.requested) {
        return {
          kind: 'cut',
          numSamples: payload.num_samples,
          contentId: sampleContentId(payload),
          cuts: start.cuts,
          sequences: progress,
        };
      }
      const run: SampleRun = whole
        ? await sampleUntilStopped(ctx, sampling, cancel, ({ stop }) =>
            ctx.backend.sample(sampler, request, { resume: resumeOf(progress), stop }),
          )
        : await ctx.backend.sample(sampler, request, {
            resume: resumeOf(progress),
            maxNewTokens: sampling.sliceTokens,
            ...(continuation === undefined ? {} : { continuation }),
          });
      continuation = run.continuation;
      progress = new Map(
        run.sequences.map((sequence, index) => [
          index,
          { tokens: sequence.tokens, logprobs: sequence.logprobs, pointer: pointers.get(index) ?? null },
        ]),
      );
      await ctx.emit({
        kind: 'sample-slice',
        request_id: sample.request_id,
        tokens: run.sequences.map((sequence) => sequence.tokens.length),
      });
      faultHook.crash('worker:mid-sample');
      if (run.finished) return { kind: 'done', result: completed(run) };
    }
  } catch (error) {
    if (error instanceof StepUserError)
      return {
        kind: 'done',
        result: { status: 'failed', error: { message: error.message, category: 'user' } },
      };
    if (error instanceof MalformedPayloadError) {
      return {
        kind: 'done',
        result: { status: 'failed', error: { message: error.message, category: 'server' } },
      };
    }
    throw error;
  }
}

/** How often a whole call checks the cut's boundary condition (`cutWhen`) while it runs. */
const STOP_CHECK_MS = 100;

/**
 * A whole call (the backend batches samples) given a stop signal that fires when the work item is cut
 * or aborted, or the sample cancelled: the backend then answers at its next decode step with the
 * sequences so far.
 */
async function sampleUntilStopped(
  ctx: RunContext,
  sampling: SamplingContext,
  cancel: AbortSignal | undefined,
  call: (options: { stop: AbortSignal }) => Promise<SampleRun>,
): Promise<SampleRun> {
  const stop = new AbortController();
  const check = (): void => {
    if (sampling.cut.requested || ctx.signal?.aborted === true || cancel?.aborted === true) stop.abort();
  };
  const timer = setInterval(check, STOP_CHECK_MS);
  ctx.signal?.addEventListener('abort', check);
  cancel?.addEventListener('abort', check);
  try {
    return await call({ stop: stop.signal });
  } finally {
    clearInterval(timer);
    ctx.signal?.removeEventListener('abort', check);
    cancel?.removeEventListener('abort', check);
  }
}

function completed(run: SampleRun): StepResult {
  return { status: 'completed', result: sampleResult(run) };
}

/**
 * The cut of one sample: save what each sequence generated since its last committed prefix, then
 * put the sample back to pending with the pointers that hold. A sequence with nothing new (including
 * one cut at zero tokens) saves nothing: it keeps its pointer, or restarts when it has none.
 */
async function cutSample(
  sample: WorkItemSample,
  ctx: RunContext,
  participant: CutParticipant,
  cut: Extract<Generated, { kind: 'cut' }>,
): Promise<PartOutcome> {
  const sampling = ctx.sampling as SamplingContext;
  const rows: CutRow[] = [];
  for (const [index, sequence] of cut.sequences) {
    const from = sequence.pointer?.length ?? 0;
    if (sequence.tokens.length <= from) continue;
    rows.push({
      callId: sequenceCallId(sample.request_id, index),
      contentId: cut.contentId,
      // A sampler checkpoint is immutable: its content id pins the weights, so one version suffices.
      weightVersion: sequence.pointer?.weightVersion ?? 0,
      tokens: sequence.tokens.slice(from),
      logprobs: sequence.logprobs.slice(from),
      ...(sequence.pointer === null ? {} : { previous: sequence.pointer }),
    });
  }
  const acks = new Map((await participant.save(rows)).map((ack) => [ack.callId, ack]));
  faultHook.crash('worker:after-cut-save');
  stopIfAborted(ctx.signal);

  const count = Math.max(cut.numSamples, ...[...cut.sequences.keys()].map((index) => index + 1));
  const previous = Array.from({ length: count }, (_, index) => cut.sequences.get(index)?.pointer ?? null);
  const acked = previous.map((_, index) => acks.get(sequenceCallId(sample.request_id, index)));
  for (const [index, ack] of acked.entries()) {
    if (ack?.status !== 'failed') continue;
    logger.warn('a sequence prefix was not saved', {
      request_id: sample.request_id,
      index,
      reason: ack.reason,
    });
  }
  let pointers = acked.map((ack, index) =>
    ack?.status === 'saved' ? ack.pointer : (previous[index] ?? null),
  );
  let prefixRef = refOf(pointers, cut.cuts + 1);
  if (prefixRef !== undefined && JSON.stringify(prefixRef).length > MAX_PREFIX_REF_CHARS) {
    // Too large for the future row (a lineage of many cuts of many sequences): keep the pointers it had.
    logger.error('the prefix pointers do not fit the future row; keeping the previous ones', {
      request_id: sample.request_id,
    });
    pointers = previous;
    prefixRef = refOf(pointers, cut.cuts + 1);
  }
  const report: SampleCutReport = {
    saved: pointers.filter((pointer, index) => pointer !== null && pointer !== previous[index]).length,
    kept: pointers.filter((pointer, index) => pointer !== null && pointer === previous[index]).length,
    restart: pointers.filter((pointer) => pointer === null).length,
    failed: acked.filter((ack) => ack?.status === 'failed').length,
  };
  const returned = await returnSampleToPending(
    sample.request_id,
    sample.claim_token,
    prefixRef,
    ctx.now(),
    sampling.attempt,
    { doc: ctx.clients.doc, tables: ctx.tables },
  );
  // Cancelled meanwhile (W9): the cut's saved prefixes are left unused and the future ends cancelled.
  if ('cancelRequested' in returned) return commitResult(sample, ctx, CANCELLED_RESULT, true);
  if (!returned.committed) return { outcome: 'lost' };
  await ctx.emit({ kind: 'sample-cut', request_id: sample.request_id, report });
  logger.info('sample cut: back to pending', { request_id: sample.request_id, ...report });
  return { outcome: 'cut', ...report };
}

/**
 * Bound on a stored `prefix_ref` (as JSON): the future row holds it beside its other attributes, and
 * DynamoDB items are at most 400 KB.
 */
const MAX_PREFIX_REF_CHARS = 256 * 1024;

/** The pointers to store: trailing sequences without one are left out; none at all means no ref. */
function refOf(pointers: readonly (PrefixPointer | null)[], cuts: number): SamplePrefixRef | undefined {
  const last = pointers.findLastIndex((pointer) => pointer !== null);
  return last < 0 ? undefined : { sequences: pointers.slice(0, last + 1), cuts };
}
