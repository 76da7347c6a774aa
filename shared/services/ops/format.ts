import { topology } from '../../base/topology.js';
import {
  type DeadLetterDepths,
  deadLetterCount,
  type ModelQueueStatus,
  type NextTick,
  type PoolQueueStatus,
  type QueueDepth,
} from './queue-status.js';

/**
 * Human text of the queue picture, for the CLI's `status`; the status page shows the same strings
 * (`shared/services/status-page/display.ts`).
 */

const NONE = '-';

/** `1 step`, `2 steps`. */
export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

/** `850 ms`, `4.2 s`, `3 m 05 s`, `2 h 03 m`, `3 d 04 h`; negative values keep their sign. */
export function formatDuration(ms: number | undefined): string {
  if (ms === undefined || !Number.isFinite(ms)) return NONE;
  if (ms < 0) return `-${formatDuration(-ms)}`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const seconds = ms / 1000;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const pad = (value: number) => String(value).padStart(2, '0');
  const whole = Math.floor(seconds);
  if (whole < 3600) return `${Math.floor(whole / 60)} m ${pad(whole % 60)} s`;
  if (whole < 86_400) return `${Math.floor(whole / 3600)} h ${pad(Math.floor((whole % 3600) / 60))} m`;
  return `${Math.floor(whole / 86_400)} d ${pad(Math.floor((whole % 86_400) / 3600))} h`;
}

export function formatNextTick(next: NextTick): string {
  const parts: string[] = [];
  if (next.steps > 0) {
    const seqs =
      next.first_seq === next.last_seq ? `seq ${next.first_seq}` : `seqs ${next.first_seq}-${next.last_seq}`;
    parts.push(next.stopped_by === undefined ? seqs : `${seqs} (stops: ${next.stopped_by})`);
  } else if (next.waits_for !== undefined) {
    parts.push(`waits: ${next.waits_for}`);
  }
  if (next.samples > 0) parts.push(plural(next.samples, 'sample'));
  return parts.length === 0 ? NONE : parts.join(', ');
}

export function formatInFlight(model: ModelQueueStatus): string {
  const inFlight = model.in_flight;
  if (inFlight === undefined) return NONE;
  const lease = inFlight.lease_expired
    ? 'lease EXPIRED'
    : `lease ${formatDuration(inFlight.lease_age_ms)} old, ${formatDuration(inFlight.lease_expires_in_ms)} left`;
  return `${inFlight.work_item} (${plural(model.in_flight_steps, 'step')}; ${lease})`;
}

export function formatFirstBarrier(model: ModelQueueStatus): string {
  const barrier = model.first_barrier;
  return barrier === undefined ? NONE : `seq ${barrier.seq} ${barrier.request_type}`;
}

const WORK_DLQ = topology.queues.workDlq.name;
const STREAM_DLQ = topology.queues.streamDlq.name;

/** Deliveries a work item gets before SQS moves it to the work queue's dead-letter queue. */
function workDeliveries(): number {
  const redrive = topology.queues.work.deadLetter;
  if (redrive === undefined) throw new Error('the work queue declares no dead-letter queue');
  return redrive.maxReceiveCount;
}

/** `2 messages`, or `2 messages (1 being read)`: a received message is still on the queue. */
export function formatDeadLetterDepth(depth: QueueDepth): string {
  const total = plural(deadLetterCount(depth), 'message');
  return depth.in_flight === 0 ? total : `${total} (${depth.in_flight} being read)`;
}

/** What each non-empty dead-letter queue means and what to do about it; none while both are empty. */
export function deadLetterWarnings(deadLetters: DeadLetterDepths): string[] {
  const warnings: string[] = [];
  const work = deadLetterCount(deadLetters.work_dlq);
  if (work > 0) {
    warnings.push(
      `${WORK_DLQ} holds ${plural(work, 'message')}: work items that failed ${workDeliveries()} deliveries. ` +
        'Each message names its work item: find in the worker logs why it failed, fix that, then delete ' +
        'the message.',
    );
  }
  const stream = deadLetterCount(deadLetters.stream_dlq);
  if (stream > 0) {
    warnings.push(
      `${STREAM_DLQ} holds ${plural(stream, 'message')}: stream batches the scheduler gave up on after its ` +
        'retries. Each message names a shard and sequence range: read those records from the stream within ' +
        "24 h of their write to find the input the scheduler fails on, then delete the message (the sweeper's " +
        'safety tick still plans what they would have woken).',
    );
  }
  return warnings;
}

/** One line: both depths, and while either queue holds anything, what that means and what to do. */
export function formatDeadLetters(deadLetters: DeadLetterDepths): string {
  const depths =
    `${WORK_DLQ} ${formatDeadLetterDepth(deadLetters.work_dlq)}, ` +
    `${STREAM_DLQ} ${formatDeadLetterDepth(deadLetters.stream_dlq)}`;
  const warnings = deadLetterWarnings(deadLetters);
  return warnings.length === 0 ? `dead letters: ${depths}` : `DEAD LETTERS: ${depths}. ${warnings.join(' ')}`;
}

function ago(ms: number | undefined): string {
  return ms === undefined ? NONE : `${formatDuration(ms)} ago`;
}

export const STATUS_COLUMNS = [
  'MODEL',
  'TENANT',
  'STATE',
  'PENDING',
  'FIRST BARRIER',
  'NEXT TICK',
  'IN FLIGHT',
  'LAST COMPLETION',
  'OLDEST PENDING',
] as const;

export function statusRow(model: ModelQueueStatus): string[] {
  const pending =
    model.pending_samples > 0
      ? `${model.pending} (${plural(model.pending_samples, 'sample')})`
      : String(model.pending);
  return [
    model.model_id,
    model.tenant ?? NONE,
    model.state,
    pending,
    formatFirstBarrier(model),
    formatNextTick(model.next_tick),
    formatInFlight(model),
    ago(model.last_completed_age_ms),
    formatDuration(model.oldest_pending_age_ms),
  ];
}

export function renderStatusText(status: PoolQueueStatus): string {
  const { totals } = status;
  const lines = [`pool ${status.pool} at ${new Date(status.generated_at).toISOString()}`];
  if (status.draining !== undefined) {
    const reason = status.draining.reason === undefined ? '' : ` (${status.draining.reason})`;
    lines.push(
      `DRAINING since ${new Date(status.draining.since).toISOString()} by ${status.draining.requested_by}${reason}: nothing new is dispatched`,
    );
  }
  if (status.cut_requested_at !== undefined) {
    lines.push(`cut requested ${ago(status.generated_at - status.cut_requested_at)}`);
  }
  if (status.work_queue !== undefined) {
    lines.push(
      `work queue: ${status.work_queue.visible} waiting, ${status.work_queue.in_flight} being worked on`,
    );
  }
  if (status.dead_letters !== undefined) lines.push(formatDeadLetters(status.dead_letters));
  lines.push(
    `totals: ${plural(totals.models, 'model')}, ${totals.pending} pending (${plural(totals.pending_samples, 'sample')}), ` +
      `${plural(totals.in_flight_steps, 'step')} in flight on ${plural(totals.models_in_flight, 'model')}, ` +
      `${plural(totals.leases_expired, 'lease')} expired, oldest pending ${formatDuration(totals.oldest_pending_age_ms)}`,
    `next tick: ${plural(totals.next_tick_steps, 'step')}, ${plural(totals.next_tick_samples, 'sample')}${totals.next_tick_full ? ' (work item full)' : ''}`,
  );
  if (status.models.length === 0) {
    lines.push('', 'no pending requests');
    return `${lines.join('\n')}\n`;
  }
  lines.push('', ...table([[...STATUS_COLUMNS], ...status.models.map(statusRow)]));
  return `${lines.join('\n')}\n`;
}

function table(rows: readonly string[][]): string[] {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)));
  return rows.map((row) =>
    row
      .map((cell, column) => (column === row.length - 1 ? cell : cell.padEnd(widths[column]!)))
      .join('  ')
      .trimEnd(),
  );
}
