import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { z } from 'zod';
import { batchGetByKey } from '../../aws/batch-get.js';
import type { WorkItemSample } from '../../domain/planning/work-item.js';
import { baseModelId, type SamplePrefixRef } from '../../domain/records.js';
import type { PrefixStore } from '../../repositories/prefix/store.js';
import type { PrefixPointer, RestoreOutcome, RestoreRequest } from '../../repositories/prefix/types.js';
import { samplePayloadSchema } from './step-payloads.js';

/**
 * Where each sequence of a dispatched sample starts (P4a, P6). A sample that was cut carries a
 * pointer per sequence on its future (`prefix_ref`). The runtime knows every sample of its work item up
 * front, so it reads their futures in one strongly consistent BatchGetItem and restores every pointer
 * at once (`restoreMany`: shared BatchGetItem reads of the prefix rows). The store applies P4a; what it
 * does not know is checked here: the pointer is this sequence's call, and the prefix fits the
 * request's max_tokens. Anything else means "start this sequence over", never an error.
 */

/** The prefix store call of one sequence: one call per sample index. */
export function sequenceCallId(requestId: string, index: number): string {
  return `${requestId}#${index}`;
}

/** The content id a sample's prefixes are generated with: its sampler checkpoint, or the base model. */
export function sampleContentId(payload: {
  readonly base_model: string;
  readonly checkpoint?: { readonly content_id: string } | undefined;
}): string {
  return payload.checkpoint?.content_id ?? baseModelId(payload.base_model);
}

export type SequenceStart =
  | { readonly from: 'start' }
  | {
      readonly from: 'restored';
      readonly pointer: PrefixPointer;
      readonly tokens: number[];
      readonly logprobs: number[];
    }
  | { readonly from: 'regenerate'; readonly reason: string };

export interface SampleStart {
  /** By sample index; indices absent here start fresh. */
  readonly sequences: ReadonlyMap<number, SequenceStart>;
  /** Cuts the sample went through before this dispatch. */
  readonly cuts: number;
}

const segmentSchema = z.object({
  group: z.string().min(1),
  attempt: z.string().min(1),
  cut: z.number().int().nonnegative(),
  chunks: z.number().int().positive(),
});

const pointerSchema = z.object({
  callId: z.string().min(1),
  contentId: z.string().min(1),
  length: z.number().int().nonnegative(),
  chain: z.string().min(1),
  weightVersion: z.number().int().nonnegative(),
  segments: z.array(segmentSchema).min(1),
});

const prefixRefSchema = z.object({
  sequences: z.array(pointerSchema.nullable()),
  cuts: z.number().int().nonnegative(),
});

/** A stored `prefix_ref`, or undefined when absent or malformed (the sample then starts over). */
export function parsePrefixRef(value: unknown): SamplePrefixRef | undefined {
  const parsed = prefixRefSchema.safeParse(value);
  return parsed.success ? parsed.data : undefined;
}

interface Planned {
  readonly index: number;
  readonly request: RestoreRequest;
}

interface SamplePlan {
  readonly sequences: Map<number, SequenceStart>;
  readonly planned: readonly Planned[];
  readonly cuts: number;
  readonly maxTokens: number | undefined;
}

/** What a pointer must be, besides what P4a checks, to be used for sequence `index` of this sample. */
function unusable(
  pointer: PrefixPointer,
  requestId: string,
  index: number,
  numSamples: number,
): string | undefined {
  if (index >= numSamples) return `the sample has ${numSamples} sequences`;
  if (pointer.callId !== sequenceCallId(requestId, index)) return 'the pointer names another call';
  return undefined;
}

function planSample(sample: WorkItemSample, ref: SamplePrefixRef | undefined): SamplePlan {
  const sequences = new Map<number, SequenceStart>();
  const payload = samplePayloadSchema.safeParse(sample.payload);
  // A malformed payload fails the sample on its own path; there is nothing to resume.
  if (ref === undefined || !payload.success) return { sequences, planned: [], cuts: 0, maxTokens: undefined };
  const contentId = sampleContentId(payload.data);
  const planned: Planned[] = [];
  ref.sequences.forEach((pointer, index) => {
    if (pointer === null) return;
    const why = unusable(pointer, sample.request_id, index, payload.data.num_samples);
    if (why !== undefined) sequences.set(index, { from: 'regenerate', reason: `mismatch: ${why}` });
    else planned.push({ index, request: { pointer, contentId } });
  });
  const maxTokens = payload.data.sampling_params.max_tokens;
  return {
    sequences,
    planned,
    cuts: ref.cuts,
    maxTokens: typeof maxTokens === 'number' ? maxTokens : undefined,
  };
}

async function settle(plan: SamplePlan, outcomes: readonly Promise<RestoreOutcome>[]): Promise<SampleStart> {
  const { sequences } = plan;
  const settled = await Promise.all(outcomes);
  plan.planned.forEach(({ index }, position) => {
    const outcome = settled[position] as RestoreOutcome;
    if (outcome.kind === 'regenerate') {
      sequences.set(index, { from: 'regenerate', reason: `${outcome.reason}: ${outcome.detail}` });
    } else if (plan.maxTokens !== undefined && outcome.tokens.length > plan.maxTokens) {
      sequences.set(index, { from: 'regenerate', reason: 'mismatch: the prefix is longer than max_tokens' });
    } else {
      sequences.set(index, {
        from: 'restored',
        pointer: outcome.pointer,
        tokens: Array.from(outcome.tokens),
        logprobs: Array.from(outcome.logprobs),
      });
    }
  });
  return { sequences, cuts: plan.cuts };
}

/**
 * The `prefix_ref` of each sample's future, in one strongly consistent BatchGetItem: ids are all it
 * needs, so the runtime starts it with the work item's other opening reads (./opening-reads.ts).
 */
export function readPrefixRefs(
  doc: DynamoDBDocumentClient,
  futuresTable: string,
  requestIds: readonly string[],
): Promise<ReadonlyMap<string, Record<string, unknown>>> {
  return batchGetByKey(doc, requestIds, {
    table: futuresTable,
    keyName: 'request_id',
    consistent: true,
    // session_log: where the sample's commit logs its end (W9), read here so it costs no read of its own;
    // attempts: its failed runs so far (E2).
    attributes: ['request_id', 'prefix_ref', 'session_log', 'attempts'],
  });
}

/**
 * Starts reading every sample's prefixes, from the futures' `prefix_ref`s (`readPrefixRefs`). One
 * promise per sample; a failed read of the futures rejects them all (each sample then fails as an
 * infrastructure error and is released).
 */
export function loadSampleStarts(
  samples: readonly WorkItemSample[],
  prefixRefs: Promise<ReadonlyMap<string, Record<string, unknown>>>,
  prefixes: PrefixStore,
): Map<string, Promise<SampleStart>> {
  const all = (async (): Promise<Map<string, Promise<SampleStart>>> => {
    const rows = await prefixRefs;
    const plans = samples.map((sample) =>
      planSample(sample, parsePrefixRef(rows.get(sample.request_id)?.prefix_ref)),
    );
    // Every sample's restores in one batch, read at once (P4: a worker that knows them up front).
    const requests = plans.flatMap((plan) => plan.planned.map((planned) => planned.request));
    const outcomes = requests.length === 0 ? [] : prefixes.restoreMany(requests);
    const starts = new Map<string, Promise<SampleStart>>();
    let offset = 0;
    samples.forEach((sample, index) => {
      const plan = plans[index] as SamplePlan;
      const own = outcomes.slice(offset, offset + plan.planned.length);
      offset += plan.planned.length;
      starts.set(sample.request_id, settle(plan, own));
    });
    return starts;
  })();
  return new Map(
    samples.map((sample) => {
      const start = all.then((starts) => starts.get(sample.request_id) as Promise<SampleStart>);
      // A sample that stops before it resumes (not this worker's claim) never awaits its start.
      start.catch(() => undefined);
      return [sample.request_id, start];
    }),
  );
}
