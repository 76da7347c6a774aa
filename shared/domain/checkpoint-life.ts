import { listSortKey } from './listing-keys.js';
import type { CheckpointKind, CheckpointNameRecord } from './records.js';

/**
 * The lifecycle rules of a checkpoint name record (C2-C5), pure: when it is live, what a TTL makes
 * of a commit or a `PUT .../ttl`, which route names which record, and the `gc` partition's keys.
 */

/**
 * Live: committed and not expired (`expires_at` absent means never). Everything that reads a
 * checkpoint for a user (resolveCheckpoint, the worker's loads, the archive, weights_info, listings)
 * asks this, so an expired checkpoint reads as absent from the millisecond it expires, whether or
 * not the sweeper has collected it yet (C5).
 */
export function isLiveCheckpoint(
  record: Pick<CheckpointNameRecord, 'status' | 'expires_at'>,
  now: number,
): boolean {
  return record.status === 'committed' && (record.expires_at === undefined || record.expires_at > now);
}

/** An expiry `ttlSeconds` after `fromMs` (a commit time, or now for `PUT .../ttl`); none without a TTL. */
export function expiryOf(fromMs: number, ttlSeconds: number | null | undefined): number | undefined {
  return ttlSeconds === null || ttlSeconds === undefined ? undefined : fromMs + ttlSeconds * 1000;
}

/** The route's `{kind}` segment: the SDK's checkpoint id is `weights/<name>` or `sampler_weights/<name>`. */
const ROUTE_KINDS: Readonly<Record<string, CheckpointKind>> = {
  weights: 'weights',
  sampler_weights: 'sampler',
};

export interface CheckpointRouteKey {
  readonly modelId: string;
  readonly kind: CheckpointKind;
  readonly name: string;
}

/**
 * `{run_id, kind, name}` of a `training_runs/{run_id}/checkpoints/{kind}/{name}/...` route, or
 * undefined when `kind` is neither `weights` nor `sampler_weights` (the caller answers 400).
 */
export function checkpointKeyFromRoute(
  params: Readonly<Record<string, string>>,
): CheckpointRouteKey | undefined {
  const modelId = params.run_id;
  const kindSegment = params.kind;
  const name = params.name;
  if (modelId === undefined || kindSegment === undefined || name === undefined) return undefined;
  if (!Object.hasOwn(ROUTE_KINDS, kindSegment)) return undefined;
  const kind = ROUTE_KINDS[kindSegment] as CheckpointKind;
  if (modelId === '' || name === '') return undefined;
  return { modelId, kind, name };
}

/**
 * `list_sort` of a gc entry: due time first, so the sweeper's one Query (`list_sort <= gcDueBound(now)`)
 * reads exactly the entries due, oldest first.
 */
export function gcSortKey(dueMs: number, contentId: string): string {
  return listSortKey(dueMs, contentId);
}

/** The upper bound of the due entries at `now`: every `gcSortKey(due <= now, id)` sorts below it. */
export function gcDueBound(now: number): string {
  // '$' sorts after '#' (the separator), so an entry due exactly now is included.
  return `${listSortKey(now)}$`;
}

/** How long a due entry whose save has not committed yet waits before it is looked at again. */
export const GC_PENDING_RECHECK_MS = 10 * 60_000;

/** What the sweeper does with a due gc entry, given the name record it names (read strongly). */
export type GcDecision =
  | { readonly action: 'collect' }
  | { readonly action: 'move'; readonly due: number }
  | { readonly action: 'drop' };

/**
 * A due entry's content is collected when nothing live holds it: its name record is gone or holds
 * other content (deleted, overwritten, a failed save's reservation taken over), or it expired. A
 * save still pending, or a checkpoint whose expiry lies later than the entry's due time (a TTL's
 * entry is written at intake, before the commit fixes `expires_at`), moves the entry; a live
 * checkpoint with no expiry keeps its content and the entry goes.
 */
export function gcDecision(
  entry: { readonly content_id: string },
  record: Pick<CheckpointNameRecord, 'content_id' | 'status' | 'expires_at'> | undefined,
  now: number,
): GcDecision {
  if (record === undefined || record.content_id !== entry.content_id) return { action: 'collect' };
  if (record.status === 'pending') return { action: 'move', due: now + GC_PENDING_RECHECK_MS };
  if (!isLiveCheckpoint(record, now)) return { action: 'collect' };
  return record.expires_at === undefined ? { action: 'drop' } : { action: 'move', due: record.expires_at };
}
