import { topology } from '../../base/topology.js';
import {
  deadLetterWarnings,
  formatDeadLetterDepth,
  formatDuration,
  plural,
  statusRow,
} from '../ops/format.js';
import type { PoolQueueStatus } from '../ops/queue-status.js';

/**
 * What the page shows, formatted on the server with the CLI's own formatters so the two never
 * disagree (and the browser script stays a renderer). Sent as `display` beside the raw picture.
 */
export interface StatusDisplay {
  readonly columns: readonly string[];
  readonly rows: readonly (readonly string[])[];
  readonly model_ids: readonly string[];
  readonly totals: readonly (readonly [label: string, value: string])[];
  readonly banner?: string;
  /** One per dead-letter queue holding messages: what they are and what to do (empty: nothing to do). */
  readonly dead_letter_warnings: readonly string[];
}

/** Same order as `statusRow`. */
export const PAGE_COLUMNS = [
  'Model',
  'Tenant',
  'State',
  'Pending',
  'First barrier',
  'Next tick',
  'In flight (lease age)',
  'Last completion',
  'Oldest pending',
] as const;

export function statusDisplay(status: PoolQueueStatus): StatusDisplay {
  const { totals } = status;
  const lines: [string, string][] = [
    ['Models with pending work', String(totals.models)],
    ['Pending requests', `${totals.pending} (${plural(totals.pending_samples, 'sample')})`],
    ['Steps in flight', `${totals.in_flight_steps} on ${plural(totals.models_in_flight, 'model')}`],
    ['Leases expired', String(totals.leases_expired)],
    ['Oldest pending', formatDuration(totals.oldest_pending_age_ms)],
    [
      'Next tick',
      `${plural(totals.next_tick_steps, 'step')}, ${plural(totals.next_tick_samples, 'sample')}${totals.next_tick_full ? ' (full)' : ''}`,
    ],
  ];
  if (status.work_queue !== undefined) {
    lines.push([
      'Work queue',
      `${status.work_queue.visible} waiting, ${status.work_queue.in_flight} being worked on`,
    ]);
  }
  const deadLetters = status.dead_letters;
  if (deadLetters !== undefined) {
    lines.push(
      [`Work dead letters (${topology.queues.workDlq.name})`, formatDeadLetterDepth(deadLetters.work_dlq)],
      [
        `Stream dead letters (${topology.queues.streamDlq.name})`,
        formatDeadLetterDepth(deadLetters.stream_dlq),
      ],
    );
  }
  if (status.cut_requested_at !== undefined) {
    lines.push(['Cut requested', `${formatDuration(status.generated_at - status.cut_requested_at)} ago`]);
  }
  const drain = status.draining;
  return {
    columns: PAGE_COLUMNS,
    rows: status.models.map(statusRow),
    model_ids: status.models.map((model) => model.model_id),
    totals: lines,
    dead_letter_warnings: deadLetters === undefined ? [] : deadLetterWarnings(deadLetters),
    ...(drain === undefined
      ? {}
      : {
          banner:
            `Draining since ${new Date(drain.since).toISOString()} (by ${drain.requested_by}` +
            `${drain.reason === undefined ? '' : `: ${drain.reason}`}): nothing new is dispatched.`,
        }),
  };
}
