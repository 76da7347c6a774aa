import type { LiveRow, TrainingRequestType } from '../records.js';
import type { PlanCounters, Snapshot } from './plan-types.js';

export interface TrainingRow extends LiveRow {
  readonly seq: number;
  readonly request_type: TrainingRequestType;
}

/** A seq that two visible rows of one model claim. */
export const DUPLICATE_SEQ = Symbol('duplicate seq');

/** One model's visible pending training rows above its planned_through. */
export interface ModelRows {
  readonly bySeq: Map<number, TrainingRow | typeof DUPLICATE_SEQ>;
  /** Smallest request_id among them: the model's place in the fairness order. */
  oldest: string;
}

export interface IndexedSnapshot {
  readonly byModel: Map<string, ModelRows>;
  /** Pending, unclaimed samples in request_id order. */
  readonly samples: LiveRow[];
}

export function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * One pass over the scan: duplicates collapsed, terminal and already-planned rows dropped, training
 * rows grouped by model and seq, samples kept apart. O(n) plus the sort of the samples.
 */
export function indexSnapshot(snapshot: Snapshot, counters: PlanCounters): IndexedSnapshot {
  const byId = new Map<string, LiveRow>();
  for (const row of snapshot.live) {
    counters.rows_scanned++;
    const seen = byId.get(row.request_id);
    if (seen === undefined) {
      byId.set(row.request_id, row);
      continue;
    }
    counters.rows_duplicate++;
    // A stale pending copy must not revive a row some copy already shows as terminal.
    if (seen.status === 'pending' && row.status !== 'pending') byId.set(row.request_id, row);
  }

  const byModel = new Map<string, ModelRows>();
  const samples: LiveRow[] = [];
  const claims = snapshot.sampleClaims;
  for (const row of byId.values()) {
    if (row.status !== 'pending') {
      counters.rows_not_pending++;
      continue;
    }
    if (row.request_type === 'sample') {
      if (row.seq !== undefined) counters.rows_malformed++;
      else if (claims?.has(row.request_id)) counters.samples_already_claimed++;
      else samples.push(row);
      continue;
    }
    if (row.seq === undefined || !Number.isInteger(row.seq) || row.seq < 1) {
      counters.rows_malformed++;
      continue;
    }
    const model = snapshot.models.get(row.model_id);
    if (model !== undefined && row.seq <= model.planned_through) {
      counters.rows_already_planned++;
      continue;
    }
    addTrainingRow(byModel, row as TrainingRow, counters);
  }
  samples.sort((a, b) => compareIds(a.request_id, b.request_id));
  return { byModel, samples };
}

function addTrainingRow(byModel: Map<string, ModelRows>, row: TrainingRow, counters: PlanCounters): void {
  let rows = byModel.get(row.model_id);
  if (rows === undefined) {
    rows = { bySeq: new Map(), oldest: row.request_id };
    byModel.set(row.model_id, rows);
  } else if (compareIds(row.request_id, rows.oldest) < 0) {
    rows.oldest = row.request_id;
  }
  const existing = rows.bySeq.get(row.seq);
  if (existing === undefined) {
    rows.bySeq.set(row.seq, row);
    return;
  }
  counters.rows_duplicate_seq += existing === DUPLICATE_SEQ ? 1 : 2;
  rows.bySeq.set(row.seq, DUPLICATE_SEQ);
}
