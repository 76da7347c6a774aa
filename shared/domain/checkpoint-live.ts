import type { CheckpointNameRecord } from './records.js';

/**
 * A checkpoint is live when it is committed and has not expired (C5: an expired one reads as absent at
 * once, whatever the sweeper has collected yet). `expires_at` absent means never.
 */
export function isLiveCheckpoint(
  record: Pick<CheckpointNameRecord, 'status'> & { readonly expires_at?: number },
  now: number,
): boolean {
  return record.status === 'committed' && (record.expires_at === undefined || record.expires_at > now);
}
