import { expect } from 'vitest';
import { type SampleRequest, type SamplingParams, toSampleResult } from '../../shared/backend/backend.js';
import { type ModelInputJson, modelInputFromJson } from '../../shared/backend/pass-input.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import {
  type FutureRow,
  type LiveRow,
  registryKey,
  type SamplePrefixRef,
} from '../../shared/domain/records.js';
import {
  runWorkItem,
  type SampleOutcome,
  type WorkerEvent,
  type WorkerOptions,
} from '../../shared/services/worker/index.js';
import { BASE_MODEL, type WorkerHarness } from './worker-harness.js';

/**
 * Helpers of the resume suites (resume-*.test.ts): forced cuts, one dispatch-and-run cycle, the
 * uninterrupted answer, and what the client and the scheduler see of a cut sample.
 */

export const backend = new ReferenceBackend();

export const onlyIds = (ids: Iterable<string>) => {
  const set = new Set(ids);
  return (row: LiveRow) => set.has(row.request_id);
};

/**
 * When to cut: after that many slices over all samples (0: before any token), or once each of `each`
 * has had exactly `slices` slices (each waits at its last one for the others, so no sample runs
 * ahead and finishes while another is still being claimed).
 */
export type CutPoint = number | { readonly each: readonly string[]; readonly slices: number };

/** Runtime options that cut the work item at `point`. Every event is recorded. */
export function cutAfter(point: CutPoint): {
  readonly events: WorkerEvent[];
  readonly options: Pick<WorkerOptions, 'cut' | 'onEvent'>;
} {
  const controller = new AbortController();
  if (point === 0) controller.abort();
  const events: WorkerEvent[] = [];
  const slicesOf = (id?: string) =>
    events.filter((event) => event.kind === 'sample-slice' && (id === undefined || event.request_id === id))
      .length;
  let release!: () => void;
  const everyoneThere = new Promise<void>((resolve) => (release = resolve));
  return {
    events,
    options: {
      cut: controller.signal,
      onEvent: async (event) => {
        events.push(event);
        if (event.kind !== 'sample-slice') return;
        if (typeof point === 'number') {
          if (slicesOf() >= point) controller.abort();
          return;
        }
        if (slicesOf(event.request_id) !== point.slices) return;
        if (point.each.every((id) => slicesOf(id) >= point.slices)) {
          controller.abort();
          release();
        }
        await everyoneThere;
      },
    },
  };
}

export interface Cycle {
  readonly samples: readonly SampleOutcome[];
  readonly events: readonly WorkerEvent[];
}

/**
 * Dispatches the given samples (only them) and runs the work item; `cutAt` forces a cut after that
 * many slices. Undefined when nothing was left to dispatch.
 */
export async function cycle(
  h: WorkerHarness,
  ids: readonly string[],
  options: { readonly cutAt?: CutPoint; readonly worker?: Partial<WorkerOptions> } = {},
): Promise<Cycle | undefined> {
  const dispatched = await h.dispatch({ only: onlyIds(ids) });
  if (dispatched === undefined) return undefined;
  const forced = options.cutAt === undefined ? undefined : cutAfter(options.cutAt);
  const events: WorkerEvent[] = forced?.events ?? [];
  const outcome = await runWorkItem(dispatched.manifest, {
    backend,
    clients: h.cloud.clients,
    cutPollMs: 0,
    ...(forced?.options ?? { onEvent: (event: WorkerEvent) => void events.push(event) }),
    ...options.worker,
  });
  expect(outcome.retry).toBe(false);
  return { samples: outcome.samples, events };
}

/** The answer an uninterrupted run gives: the body sampled at once on the reference backend. */
export async function uninterrupted(
  body: Omit<SampleRequest, 'prompt' | 'sampling_params'> & {
    readonly prompt: ModelInputJson;
    readonly sampling_params: Record<string, unknown>;
  },
): Promise<unknown> {
  const sampler = await backend.loadSampler(BASE_MODEL, null);
  const run = await backend.sample(sampler, {
    ...body,
    prompt: modelInputFromJson(body.prompt, 'prompt'),
    sampling_params: body.sampling_params as SamplingParams,
  });
  return JSON.parse(JSON.stringify(toSampleResult(run))) as unknown;
}

/**
 * What a cut sample must look like from outside: pending, still in the live index (so the scheduler
 * plans it again), no result or error, its claim released, and retrieve_future answering try_again.
 */
export async function expectBackToPending(
  h: WorkerHarness,
  tenant: string,
  requestId: string,
): Promise<SamplePrefixRef | undefined> {
  const row = (await h.future(requestId)) as FutureRow;
  expect(row.status).toBe('pending');
  expect(row.live).toBeDefined();
  expect(row.result).toBeUndefined();
  expect(row.result_key).toBeUndefined();
  expect(row.error).toBeUndefined();
  expect(await h.registry(registryKey.sampleClaim(requestId))).toBeUndefined();
  expect(await h.answer(tenant, requestId)).toEqual({
    type: 'try_again',
    request_id: requestId,
    queue_state: 'active',
  });
  return row.prefix_ref;
}

/** Each sequence's start in the `sample-resumed` event of `requestId`, if the cycle had one. */
export function startsOf(events: readonly WorkerEvent[], requestId: string) {
  const event = events.find((e) => e.kind === 'sample-resumed' && e.request_id === requestId);
  return event?.kind === 'sample-resumed' ? event.sequences : undefined;
}
