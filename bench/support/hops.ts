import type { DynamoDBStreamEvent, SQSEvent } from 'aws-lambda';
import type { InvocationTrace } from '../../local/runtime/lambda-runtime.js';

/**
 * Where a request's time goes through the local stack, from timestamps the system records anyway:
 * the client's own (submit sent, submit answered, result in hand), the futures row (`updated_at`,
 * written by the commit), the work item's header (`created_at`, its request ids), the SQS message's
 * `SentTimestamp`, and the local runtime's invocation traces (when each scheduler and worker
 * invocation started). Nothing is written for the bench.
 *
 * Per request the hops are consecutive, so they add up to its latency:
 * - `submit`: the submit's round trip;
 * - `behind_model`: from the submit's answer to the commit of the model's previous work item, when
 *   the tick that dispatched it had to wait for that (R3: one work item in flight per model);
 * - `to_tick`: from then to the start of the tick that dispatched it (stream delivery to the
 *   scheduler; negative when the tick began before the HTTP answer reached the client);
 * - `tick`: from the tick's start to its work item's SQS send;
 * - `sqs`: from the send to the worker invocation's start;
 * - `run`: from the worker's start to the commit (`updated_at`: state and results are written);
 * - `commit_notice`: from the commit's timestamp to the client holding the result (the commit's
 *   transaction, retrieve_future noticing it, and the answer's HTTP trip).
 * Per tick, `stream_delivery` is the scheduler invocation's start minus the newest write time
 * among its stream records (a futures row's `created_at`/`updated_at`, a model's `last_completed_at`).
 */

export interface ClientTiming {
  readonly requestId: string;
  /** The model whose queue the request is in; undefined for base-model samples. */
  readonly modelId: string | undefined;
  readonly sent: number;
  readonly answered: number;
  readonly done: number;
}

export interface WorkItemHeader {
  readonly work_item_id: string;
  readonly created_at: number;
  readonly requestIds: readonly string[];
}

export const HOPS = ['submit', 'behind_model', 'to_tick', 'tick', 'sqs', 'run', 'commit_notice'] as const;
export type Hop = (typeof HOPS)[number];

export interface HopBreakdown {
  readonly perRequest: ReadonlyMap<Hop, readonly number[]>;
  readonly streamDelivery: readonly number[];
  /** Requests whose chain could not be followed (a work item or invocation not found). */
  readonly unmatched: number;
}

function numberAttribute(image: Record<string, unknown> | undefined, name: string): number | undefined {
  const value = (image?.[name] as { N?: string } | undefined)?.N;
  return value === undefined ? undefined : Number(value);
}

/** The newest write time a stream record's new image carries. */
function writtenAt(record: DynamoDBStreamEvent['Records'][number]): number | undefined {
  const image = record.dynamodb?.NewImage as Record<string, unknown> | undefined;
  const times = ['created_at', 'updated_at', 'last_completed_at']
    .map((name) => numberAttribute(image, name))
    .filter((value): value is number => value !== undefined);
  return times.length === 0 ? undefined : Math.max(...times);
}

export function hopBreakdown(input: {
  readonly requests: readonly ClientTiming[];
  /** request id -> the futures row's `updated_at`. */
  readonly committedAt: ReadonlyMap<string, number>;
  readonly workItems: readonly WorkItemHeader[];
  readonly traces: readonly InvocationTrace[];
}): HopBreakdown {
  const ticks = input.traces.filter((trace) => trace.functionId === 'scheduler');
  const workers = new Map<string, { startedAt: number; sentAt: number }>();
  for (const trace of input.traces) {
    if (trace.functionId !== 'worker') continue;
    for (const record of (trace.event as SQSEvent).Records) {
      const id = (JSON.parse(record.body) as { work_item_id?: string }).work_item_id;
      if (id === undefined || workers.has(id)) continue;
      workers.set(id, { startedAt: trace.startedAt, sentAt: Number(record.attributes.SentTimestamp) });
    }
  }
  const itemsOf = new Map<string, WorkItemHeader[]>();
  for (const item of input.workItems) {
    for (const id of item.requestIds) itemsOf.set(id, [...(itemsOf.get(id) ?? []), item]);
  }
  // Commits per model, to find the one a dispatch waited for.
  const commitsOf = new Map<string, number[]>();
  for (const request of input.requests) {
    const at = input.committedAt.get(request.requestId);
    if (request.modelId === undefined || at === undefined) continue;
    commitsOf.set(request.modelId, [...(commitsOf.get(request.modelId) ?? []), at]);
  }

  const perRequest = new Map<Hop, number[]>(HOPS.map((hop) => [hop, []]));
  let unmatched = 0;
  for (const request of input.requests) {
    const committed = input.committedAt.get(request.requestId);
    // The work item that ran it: the last one built before its commit (an earlier one was re-planned).
    const item = (itemsOf.get(request.requestId) ?? [])
      .filter((candidate) => committed === undefined || candidate.created_at <= committed)
      .sort((a, b) => b.created_at - a.created_at)[0];
    const worker = item === undefined ? undefined : workers.get(item.work_item_id);
    const tick =
      item === undefined
        ? undefined
        : ticks
            .filter((trace) => trace.startedAt <= item.created_at && trace.endedAt >= item.created_at)
            .sort((a, b) => b.startedAt - a.startedAt)[0];
    if (committed === undefined || worker === undefined || tick === undefined) {
      unmatched += 1;
      continue;
    }
    const waitedFor = Math.max(
      request.answered,
      ...(commitsOf.get(request.modelId ?? '') ?? []).filter((at) => at <= tick.startedAt),
    );
    const hops: Record<Hop, number> = {
      submit: request.answered - request.sent,
      behind_model: waitedFor - request.answered,
      to_tick: tick.startedAt - waitedFor,
      tick: worker.sentAt - tick.startedAt,
      sqs: worker.startedAt - worker.sentAt,
      run: committed - worker.startedAt,
      commit_notice: request.done - committed,
    };
    for (const hop of HOPS) perRequest.get(hop)?.push(hops[hop]);
  }

  const streamDelivery: number[] = [];
  for (const tick of ticks) {
    const records = (tick.event as Partial<DynamoDBStreamEvent>).Records;
    if (!Array.isArray(records)) continue;
    const times = records.map(writtenAt).filter((value): value is number => value !== undefined);
    if (times.length > 0) streamDelivery.push(tick.startedAt - Math.max(...times));
  }
  return { perRequest, streamDelivery, unmatched };
}
