/**
 * The keys of the registry's listing indexes (C1, docs/design.md#c1): partitions of `by_owner` and
 * `by_parent`, and the shared sort key. Pure; the records that carry them are written by their own
 * repositories, and read back by shared/repositories/listings.ts.
 */

/** Milliseconds fit 13 digits until the year 2286, so padded times sort as strings sort. */
const TIME_DIGITS = 13;

/**
 * `list_sort`: the creation time, zero-padded so that string order is time order, then the parts
 * that make it unique (`#`-joined). A query with ScanIndexForward false reads newest first.
 */
export function listSortKey(createdAtMs: number, ...parts: string[]): string {
  if (!Number.isSafeInteger(createdAtMs) || createdAtMs < 0 || createdAtMs >= 10 ** TIME_DIGITS) {
    throw new RangeError(`listSortKey: ${createdAtMs} is not a time in ms`);
  }
  return [String(createdAtMs).padStart(TIME_DIGITS, '0'), ...parts].join('#');
}

/** `owner_key` partitions of `by_owner`. */
export const ownerKey = {
  /** Every committed checkpoint name record of the tenant. */
  checkpoints: (tenant: string) => `ckpt#${tenant}`,
  /** Every session record of the tenant. */
  sessions: (tenant: string) => `session#${tenant}`,
  /** Published-checkpoint markers, of every tenant (C4: written by the lifecycle). */
  published: 'public',
  /** Checkpoint contents the sweeper collects once due, by due time (C3, C5). */
  gc: 'gc',
} as const;

/** `parent_key` partitions of `by_parent`. */
export const parentKey = {
  /** Every committed checkpoint of the run. */
  run: (modelId: string) => `run#${modelId}`,
  /** The session's training runs (their seq counters) and sampling sessions. */
  session: (sessionId: string) => `session#${sessionId}`,
  /** A (sampling session, clone) completion log, by position (W9, shared/domain/session-log.ts). */
  sessionLog: (logKey: string) => `sfl#${logKey}`,
} as const;

/** The listing attributes of a committed checkpoint name record, written by the save's commit. */
export interface CheckpointListingKeys {
  readonly created_at: number;
  readonly owner_key: string;
  readonly parent_key: string;
  readonly list_sort: string;
}

export function checkpointListingKeys(
  checkpoint: {
    readonly tenant: string;
    readonly model_id: string;
    readonly kind: string;
    readonly name: string;
  },
  createdAt: number,
): CheckpointListingKeys {
  return {
    created_at: createdAt,
    owner_key: ownerKey.checkpoints(checkpoint.tenant),
    parent_key: parentKey.run(checkpoint.model_id),
    list_sort: listSortKey(createdAt, checkpoint.model_id, checkpoint.kind, checkpoint.name),
  };
}
