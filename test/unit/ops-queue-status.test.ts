import { afterEach, describe, expect, it, vi } from 'vitest';
import { readConfig, resetConfig } from '../../shared/base/config.js';
import { ConfigError } from '../../shared/base/errors.js';
import { mintRequestId } from '../../shared/base/ids.js';
import type { LiveRow, ModelRow, RequestType } from '../../shared/domain/records.js';
import { cutRequestedSince, cutRequestRecord, drainRecord } from '../../shared/services/ops/controls.js';
import {
  deadLetterWarnings,
  formatDeadLetters,
  formatDuration,
  renderStatusText,
} from '../../shared/services/ops/format.js';
import { emitMetric, opsMetrics } from '../../shared/services/ops/metrics.js';
import { oldestPendingAgeSeconds, queueStatus } from '../../shared/services/ops/queue-status.js';

const NOW = 1_800_000_000_000;
const LEASE_MS = 60_000;

let counter = 0;
/** A pending live row submitted `ageMs` before NOW (request ids are time-ordered). */
function row(model_id: string, ageMs: number, request_type: RequestType, seq?: number): LiveRow {
  const random = Buffer.alloc(10);
  random.writeUInt32BE(++counter);
  return {
    request_id: mintRequestId(NOW - ageMs, random),
    model_id,
    request_type,
    status: 'pending',
    ...(seq === undefined ? {} : { seq }),
  };
}

function model(model_id: string, fields: Partial<ModelRow> = {}): ModelRow {
  return {
    model_id,
    tenant: 'acme',
    session_id: 'sess-1',
    base_model: 'tiny',
    lora_config: { rank: 4 },
    status: 'active',
    epoch: 1,
    planned_through: 0,
    applied_through: 0,
    attempts: 0,
    created_at: NOW - 3_600_000,
    ...fields,
  };
}

/**
 * busy:    seqs 1-2 applied, 3-4 in flight (lease granted 20 s ago), 5 fb, 6 optim_step, 7 fb waiting.
 * idle:    nothing applied; 1-2 fb, 3 optim_step, 4 fb, and one of its samples.
 * gap:     seq 1 not visible yet (index lag), seqs 2-3 visible.
 * stuck:   in flight with an expired lease.
 * orphan:  rows whose model row is missing.
 * base:    two base-model samples, no model row.
 */
function scenario() {
  const live: LiveRow[] = [
    row('busy', 50_000, 'forward_backward', 3),
    row('busy', 49_000, 'optim_step', 4),
    row('busy', 48_000, 'forward_backward', 5),
    row('busy', 47_000, 'optim_step', 6),
    row('busy', 46_000, 'forward_backward', 7),
    row('idle', 30_000, 'forward_backward', 1),
    row('idle', 29_000, 'forward_backward', 2),
    row('idle', 28_000, 'optim_step', 3),
    row('idle', 27_000, 'forward_backward', 4),
    row('idle', 26_000, 'sample'),
    row('gap', 10_000, 'forward', 2),
    row('gap', 9_000, 'optim_step', 3),
    row('stuck', 200_000, 'forward', 1),
    row('orphan', 5_000, 'forward', 1),
    row('base:tiny', 120_000, 'sample'),
    row('base:tiny', 1_000, 'sample'),
  ];
  // The index may still show a terminal copy of a row, and a row twice: neither counts twice.
  const terminal = { ...live[7]!, status: 'completed' as const };
  const duplicate = { ...live[5]! };
  const models = new Map<string, ModelRow>([
    [
      'busy',
      model('busy', {
        epoch: 5,
        applied_through: 2,
        planned_through: 4,
        inflight: 'busy@5',
        lease_until: NOW + 40_000,
        attempts: 1,
        last_completed_at: NOW - 70_000,
      }),
    ],
    ['idle', model('idle', { tenant: 'zeta' })],
    ['gap', model('gap')],
    [
      'stuck',
      model('stuck', { epoch: 2, planned_through: 1, inflight: 'stuck@2', lease_until: NOW - 5_000 }),
    ],
  ]);
  return { live: [...live, duplicate, terminal], models, terminalId: terminal.request_id };
}

describe('queueStatus', () => {
  const { live, models } = scenario();
  const status = queueStatus({ pool: 'gpu', now: NOW, live, models, leaseMs: LEASE_MS });
  const byId = new Map(status.models.map((entry) => [entry.model_id, entry]));

  it('counts pending, in-flight steps and samples per model', () => {
    expect(byId.get('busy')).toMatchObject({
      pending: 5,
      in_flight_steps: 2,
      pending_samples: 0,
      tenant: 'acme',
    });
    // The terminal copy of seq 3 wins over its pending copy; the duplicate of seq 1 counts once.
    expect(byId.get('idle')).toMatchObject({
      pending: 4,
      in_flight_steps: 0,
      pending_samples: 1,
      tenant: 'zeta',
    });
    expect(byId.get('base:tiny')).toMatchObject({ pending: 2, pending_samples: 2, state: 'base' });
    expect(byId.get('orphan')).toMatchObject({ pending: 1, state: 'missing_row' });
    expect(byId.get('orphan')).not.toHaveProperty('tenant');
  });

  it('reports the first barrier not yet planned', () => {
    // busy's seq 4 optim_step is in flight; the next one waiting is seq 6.
    expect(byId.get('busy')?.first_barrier).toEqual({ seq: 6, request_type: 'optim_step' });
    // idle's seq 3 optim_step is gone from the scan (terminal copy): no barrier is visible.
    expect(byId.get('idle')?.first_barrier).toBeUndefined();
    expect(byId.get('gap')?.first_barrier).toEqual({ seq: 3, request_type: 'optim_step' });
    expect(byId.get('base:tiny')?.first_barrier).toBeUndefined();
  });

  it('says what the next tick would do, as the planner decides', () => {
    expect(byId.get('busy')?.next_tick).toEqual({ steps: 0, samples: 0, waits_for: 'inflight' });
    expect(byId.get('gap')?.next_tick).toEqual({ steps: 0, samples: 0, waits_for: 'head_not_visible' });
    expect(byId.get('orphan')?.next_tick).toEqual({ steps: 0, samples: 0, waits_for: 'missing_model_row' });
    expect(byId.get('base:tiny')?.next_tick).toEqual({ steps: 0, samples: 2 });
    // idle: seq 3 is not visible, so only seqs 1-2 are a contiguous run.
    expect(byId.get('idle')?.next_tick).toEqual({
      steps: 2,
      first_seq: 1,
      last_seq: 2,
      stopped_by: 'end_of_run',
      samples: 1,
    });
  });

  it('stops the next tick at the first pass after a barrier (R2)', () => {
    const rows = [
      row('m', 9, 'forward_backward', 1),
      row('m', 8, 'optim_step', 2),
      row('m', 7, 'forward', 3),
    ];
    const single = queueStatus({
      pool: 'p',
      now: NOW,
      live: rows,
      models: new Map([['m', model('m')]]),
      leaseMs: LEASE_MS,
    });
    expect(single.models[0]?.next_tick).toMatchObject({
      steps: 2,
      first_seq: 1,
      last_seq: 2,
      stopped_by: 'barrier',
    });
    expect(single.models[0]?.first_barrier).toEqual({ seq: 2, request_type: 'optim_step' });
  });

  it('shows the work item in flight with its lease age, and flags expired leases', () => {
    expect(byId.get('busy')?.in_flight).toEqual({
      work_item: 'busy@5',
      epoch: 5,
      attempts: 1,
      lease_until: NOW + 40_000,
      lease_age_ms: 20_000,
      lease_expires_in_ms: 40_000,
      lease_expired: false,
    });
    expect(byId.get('stuck')?.in_flight).toMatchObject({ lease_expired: true, lease_expires_in_ms: -5_000 });
    expect(byId.get('idle')).not.toHaveProperty('in_flight');
  });

  it('reports last completion and oldest pending age', () => {
    expect(byId.get('busy')).toMatchObject({
      last_completed_at: NOW - 70_000,
      last_completed_age_ms: 70_000,
    });
    expect(byId.get('busy')?.oldest_pending_age_ms).toBe(50_000);
    expect(byId.get('base:tiny')?.oldest_pending_age_ms).toBe(120_000);
    expect(byId.get('idle')).not.toHaveProperty('last_completed_at');
  });

  it('orders models oldest pending first and totals the pool', () => {
    expect(status.models.map((entry) => entry.model_id)).toEqual([
      'stuck',
      'base:tiny',
      'busy',
      'idle',
      'gap',
      'orphan',
    ]);
    expect(status.totals).toEqual({
      models: 6,
      pending: 5 + 4 + 2 + 1 + 1 + 2,
      pending_samples: 3,
      in_flight_steps: 2 + 1,
      models_in_flight: 2,
      leases_expired: 1,
      next_tick_steps: 2,
      next_tick_samples: 3,
      next_tick_full: false,
      oldest_pending_at: NOW - 200_000,
      oldest_pending_age_ms: 200_000,
    });
    expect(status.pool).toBe('gpu');
    expect(status).not.toHaveProperty('draining');
  });

  it('carries the pool controls, the work queue depth and both dead-letter queue depths', () => {
    const withControls = queueStatus({
      pool: 'gpu',
      now: NOW,
      live: [],
      models: new Map(),
      leaseMs: LEASE_MS,
      drain: drainRecord('gpu', NOW - 1_000, 'ops@host', 'upgrade'),
      cut: cutRequestRecord('gpu', NOW - 2_000, 'ops@host'),
      workQueue: { visible: 3, in_flight: 1 },
      deadLetters: { work_dlq: { visible: 2, in_flight: 0 }, stream_dlq: { visible: 0, in_flight: 1 } },
    });
    expect(withControls).toMatchObject({
      draining: { since: NOW - 1_000, requested_by: 'ops@host', reason: 'upgrade' },
      cut_requested_at: NOW - 2_000,
      work_queue: { visible: 3, in_flight: 1 },
      dead_letters: { work_dlq: { visible: 2, in_flight: 0 }, stream_dlq: { visible: 0, in_flight: 1 } },
      models: [],
    });
    expect(withControls.totals).toMatchObject({ models: 0, pending: 0 });
    expect(withControls.totals).not.toHaveProperty('oldest_pending_age_ms');
  });
});

describe('oldestPendingAgeSeconds (what the tick emits)', () => {
  it('is the age of the oldest pending row, ignoring terminal ones, and 0 when none', () => {
    const rows = [row('a', 90_500, 'forward', 1), row('a', 30_000, 'forward', 2)];
    expect(oldestPendingAgeSeconds(rows, NOW)).toBe(90);
    expect(oldestPendingAgeSeconds([{ ...rows[0]!, status: 'failed' }, rows[1]!], NOW)).toBe(30);
    expect(oldestPendingAgeSeconds([], NOW)).toBe(0);
  });
});

describe('metrics', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.restoreAllMocks();
    resetConfig();
  });

  /** The stdout lines written while `run` runs, with metrics switched on or off (EMIT_METRICS). */
  function stdoutOf(run: () => void, emit = true): string[] {
    vi.stubEnv('EMIT_METRICS', emit ? 'true' : 'false');
    resetConfig();
    const lines: string[] = [];
    const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      lines.push(String(chunk));
      return true;
    });
    try {
      run();
    } finally {
      spy.mockRestore();
    }
    return lines;
  }

  it('writes one EMF line per datum, with the pool as the only dimension', () => {
    // Recent, so CloudWatch would take it (and Powertools has nothing to warn about).
    const now = Date.now() - 1_000;
    const lines = stdoutOf(() => emitMetric(opsMetrics.leasesExpired, 2, 'gpu', { now }));
    expect(lines).toHaveLength(1);
    expect(lines[0]!.endsWith('\n')).toBe(true);
    expect(lines[0]!.trimEnd()).not.toContain('\n');
    expect(JSON.parse(lines[0]!)).toEqual({
      _aws: {
        Timestamp: now,
        CloudWatchMetrics: [
          {
            Namespace: 'TinkerServerless',
            Dimensions: [['Pool']],
            Metrics: [{ Name: 'LeasesExpired', Unit: 'Count' }],
          },
        ],
      },
      Pool: 'gpu',
      LeasesExpired: 2,
    });
  });

  it('keeps data apart: each datum its own line, nothing carried into the next', () => {
    const lines = stdoutOf(() => {
      emitMetric(opsMetrics.throttledSubmits, 1, 'a');
      emitMetric(opsMetrics.oldestPendingAgeSeconds, 30, 'b');
    });
    expect(lines.map((line) => JSON.parse(line) as Record<string, unknown>)).toEqual([
      expect.objectContaining({ Pool: 'a', ThrottledSubmits: 1 }),
      expect.objectContaining({ Pool: 'b', OldestPendingAgeSeconds: 30 }),
    ]);
    expect(JSON.parse(lines[1]!)).not.toHaveProperty('ThrottledSubmits');
  });

  it('writes nothing when metrics are off', () => {
    expect(stdoutOf(() => emitMetric(opsMetrics.leasesExpired, 2, 'gpu'), false)).toEqual([]);
  });

  it('refuses values CloudWatch cannot store', () => {
    expect(() => emitMetric(opsMetrics.oldestPendingAgeSeconds, Number.NaN, 'gpu')).toThrow(/finite/);
  });
});

describe('cut requests', () => {
  it('apply only to work started before the request', () => {
    const request = cutRequestRecord('gpu', NOW, 'ops@host');
    expect(request).toMatchObject({ pk: 'cut#gpu', requested_at: NOW, ttl: NOW / 1000 + 24 * 3600 });
    expect(cutRequestedSince(request, NOW - 1)).toBe(true);
    expect(cutRequestedSince(request, NOW)).toBe(false);
    expect(cutRequestedSince(undefined, 0)).toBe(false);
  });
});

describe('text output', () => {
  it('formats durations at a useful precision', () => {
    expect(formatDuration(undefined)).toBe('-');
    expect(formatDuration(850)).toBe('850 ms');
    expect(formatDuration(4_200)).toBe('4.2 s');
    expect(formatDuration(185_000)).toBe('3 m 05 s');
    expect(formatDuration(2 * 3_600_000 + 3 * 60_000)).toBe('2 h 03 m');
    expect(formatDuration(-5_000)).toBe('-5.0 s');
  });

  it('renders one line per model with its picture', () => {
    const { live, models } = scenario();
    const text = renderStatusText(
      queueStatus({
        pool: 'gpu',
        now: NOW,
        live,
        models,
        leaseMs: LEASE_MS,
        drain: drainRecord('gpu', NOW, 'ops@h'),
      }),
    );
    expect(text).toMatch(/^pool gpu at /);
    expect(text).toContain('DRAINING since');
    const busy = text.split('\n').find((line) => line.startsWith('busy '));
    expect(busy).toMatch(
      /acme\s+active\s+5\s+seq 6 optim_step\s+waits: inflight\s+busy@5 \(2 steps; lease 20\.0 s old, 40\.0 s left\)\s+1 m 10 s ago\s+50\.0 s$/,
    );
    expect(text.split('\n').find((line) => line.startsWith('stuck '))).toContain('lease EXPIRED');
    expect(text.split('\n').find((line) => line.startsWith('idle '))).toContain(
      'seqs 1-2 (stops: end_of_run), 1 sample',
    );
  });
});

describe('dead letters', () => {
  const empty = { visible: 0, in_flight: 0 };
  const picture = (work_dlq = empty, stream_dlq = empty) =>
    queueStatus({
      pool: 'gpu',
      now: NOW,
      live: [],
      models: new Map(),
      leaseMs: LEASE_MS,
      workQueue: empty,
      deadLetters: { work_dlq, stream_dlq },
    });
  const deadLetterLine = (text: string) => text.split('\n').filter((line) => /^dead letters:/i.test(line));

  it('prints one quiet line with both depths while both queues are empty', () => {
    const text = renderStatusText(picture());
    expect(deadLetterLine(text)).toEqual(['dead letters: work-dlq 0 messages, stream-dlq 0 messages']);
    expect(deadLetterWarnings({ work_dlq: empty, stream_dlq: empty })).toEqual([]);
  });

  it('says what work-dlq messages are and what to do, on the same one line', () => {
    const text = renderStatusText(picture({ visible: 2, in_flight: 0 }));
    const [line, ...others] = deadLetterLine(text);
    expect(others).toEqual([]);
    expect(line).toMatch(/^DEAD LETTERS: work-dlq 2 messages, stream-dlq 0 messages\. /);
    expect(line).toContain('work-dlq holds 2 messages: work items that failed 5 deliveries');
    expect(line).toContain('worker logs');
    expect(line).not.toContain('stream-dlq holds');
  });

  it('says what stream-dlq messages are: a shard and sequence range to read within 24 h', () => {
    const deadLetters = { work_dlq: empty, stream_dlq: { visible: 0, in_flight: 1 } };
    const [warning, ...others] = deadLetterWarnings(deadLetters);
    expect(others).toEqual([]);
    // A message someone is reading (in flight) is still there: it counts.
    expect(warning).toMatch(/^stream-dlq holds 1 message: stream batches the scheduler gave up on/);
    expect(warning).toContain('shard and sequence range');
    expect(warning).toContain('within 24 h');
    expect(formatDeadLetters(deadLetters)).toMatch(
      /^DEAD LETTERS: work-dlq 0 messages, stream-dlq 1 message \(1 being read\)\. stream-dlq holds/,
    );
  });

  it('warns about each queue that holds messages, work-dlq first', () => {
    const warnings = deadLetterWarnings({
      work_dlq: { visible: 1, in_flight: 0 },
      stream_dlq: { visible: 3, in_flight: 0 },
    });
    expect(warnings.map((warning) => warning.split(' ')[0])).toEqual(['work-dlq', 'stream-dlq']);
  });

  it('reads the dead-letter queue URLs from their declared variables, naming a missing one', () => {
    const settings = readConfig({ WORK_DLQ_URL: 'http://q/work-dlq' });
    expect(settings.queueUrl('workDlq')).toBe('http://q/work-dlq');
    expect(() => settings.queueUrl('streamDlq')).toThrow(ConfigError);
    expect(() => settings.queueUrl('streamDlq')).toThrow(/STREAM_DLQ_URL/);
  });
});
