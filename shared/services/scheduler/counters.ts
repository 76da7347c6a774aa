/** What one tick did: ids and counts only, never payloads (logged after every tick). */
export interface TickCounters {
  /** Passes run under one hold of the lock (1 + coalesced requests for another pass). */
  passes: number;
  index_pages: number;
  /** Models whose entries an incremental read queried (0: the pool's whole `live` index was read). */
  models_woken: number;
  rows_scanned: number;
  models_read: number;
  sample_claims_read: number;
  /** plan() calls: a pass plans again while a work-item cap cut the previous plan. */
  plans: number;
  models_claimed: number;
  claims_lost: number;
  samples_claimed: number;
  sample_claims_lost: number;
  /** Claimed samples whose row was already terminal (a stale index entry): not dispatched. */
  samples_not_pending: number;
  payload_gets: number;
  payload_bytes: number;
  payloads_unreadable: number;
  steps_dispatched: number;
  fail_steps_dispatched: number;
  samples_dispatched: number;
  /** Samples dispatched only to be failed (payload missing): their worker commits the error. */
  fail_samples_dispatched: number;
  work_items: number;
  /** Of those, sent to a holder's lane (S2). */
  work_items_to_lanes: number;
  work_item_bytes: number;
  /** Model and sample claims a failed pass gave back (it failed after claiming, before sending). */
  claims_released: number;
  /** Releases whose condition failed: the row or claim had moved on, or the claim never landed. */
  releases_refused: number;
  /** Releases that errored: those claims are left to their leases and the sweeper. */
  release_errors: number;
  /** Models a round of the tick held back for the rest of their SDK step (S5), summed over rounds. */
  models_held: number;
  /** Waits before the tick read its held models again (S5: until a hold ends, 20 ms at most each). */
  coalesce_waits: number;
  coalesce_wait_ms: number;
}

export function emptyTickCounters(): TickCounters {
  return {
    passes: 0,
    index_pages: 0,
    models_woken: 0,
    rows_scanned: 0,
    models_read: 0,
    sample_claims_read: 0,
    plans: 0,
    models_claimed: 0,
    claims_lost: 0,
    samples_claimed: 0,
    sample_claims_lost: 0,
    samples_not_pending: 0,
    payload_gets: 0,
    payload_bytes: 0,
    payloads_unreadable: 0,
    steps_dispatched: 0,
    fail_steps_dispatched: 0,
    samples_dispatched: 0,
    fail_samples_dispatched: 0,
    work_items: 0,
    work_items_to_lanes: 0,
    work_item_bytes: 0,
    claims_released: 0,
    releases_refused: 0,
    release_errors: 0,
    models_held: 0,
    coalesce_waits: 0,
    coalesce_wait_ms: 0,
  };
}

export function addTickCounters(into: TickCounters, from: Readonly<TickCounters>): void {
  for (const key of Object.keys(from) as (keyof TickCounters)[]) into[key] += from[key];
}
