import { DeleteObjectsCommand, type S3Client } from '@aws-sdk/client-s3';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { logger } from '../../base/logger.js';
import { gcDecision } from '../../domain/checkpoint-life.js';
import type { CheckpointNameRecord, GcEntryRecord } from '../../domain/records.js';
import {
  deleteCollectedGcEntry,
  dueGcEntryKeys,
  moveGcEntry,
  readGcEntry,
} from '../../repositories/checkpoints/gc.js';
import {
  checkpointObjectKeys,
  deleteExpiredCheckpointName,
  readCheckpointName,
} from '../../repositories/checkpoints/names.js';
import { deleteCollectedMarker } from '../../repositories/checkpoints/public-markers.js';

/**
 * Collects checkpoints that were deleted, overwritten or have expired (C3, C5): the due entries of
 * the registry's `gc` partition (one Query of `by_owner`, never a scan), each read again strongly
 * with the name record it names (`gcDecision`). Content nothing live holds has its blob and archive
 * deleted, then its records: an expired name record (only while it still holds that content and
 * expiry), its public marker, the entry itself. Objects go first, so a failed delete leaves the
 * entry for the next round; nothing is left that names a deleted object.
 */
export interface CheckpointGcCounters {
  entries_due: number;
  checkpoints_collected: number;
  objects_deleted: number;
  names_removed: number;
  /** Entries whose save was pending or whose expiry lies later: looked at again then. */
  entries_moved: number;
  collect_errors: number;
}

export const EMPTY_CHECKPOINT_GC: Readonly<CheckpointGcCounters> = {
  entries_due: 0,
  checkpoints_collected: 0,
  objects_deleted: 0,
  names_removed: 0,
  entries_moved: 0,
  collect_errors: 0,
};

/** Entries read per Query page and at most this many pages a round (the rest wait a minute). */
const PAGE = 100;
const MAX_PAGES = 10;

export interface CheckpointGcTarget {
  readonly s3: S3Client;
  readonly doc: DynamoDBDocumentClient;
  readonly bucket: string;
  readonly registryTable: string;
}

export async function collectCheckpoints(
  target: CheckpointGcTarget,
  now: number,
): Promise<CheckpointGcCounters> {
  const counters: CheckpointGcCounters = { ...EMPTY_CHECKPOINT_GC };
  for (let page = 0; page < MAX_PAGES; page++) {
    const keys = await dueGcEntryKeys(target.doc, target.registryTable, now, PAGE);
    counters.entries_due += keys.length;
    let progressed = 0;
    for (const pk of keys) {
      try {
        if (await collectOne(target, pk, now, counters)) progressed++;
      } catch (error) {
        counters.collect_errors++;
        logger.warn('checkpoint collection failed; the next sweep tries again', {
          pk,
          error: error instanceof Error ? error.name : String(error),
        });
      }
    }
    // A short page was the last; a page that moved nothing (all failing) would only repeat itself.
    if (keys.length < PAGE || progressed === 0) break;
  }
  return counters;
}

/**
 * The entry's objects, and those of the name record while it still holds the entry's content (an
 * entry written at submit names none: the keys are the committing run's, E3).
 */
function objectsToCollect(entry: GcEntryRecord, record: CheckpointNameRecord | undefined): string[] {
  const held = record?.content_id === entry.content_id && record.status === 'committed';
  return [...new Set([...entry.blob_keys, ...(held ? checkpointObjectKeys(record) : [])])];
}

async function collectOne(
  target: CheckpointGcTarget,
  pk: string,
  now: number,
  counters: CheckpointGcCounters,
): Promise<boolean> {
  // The index lags: the entry may be gone or moved to a later due time (a new TTL).
  const entry = await readGcEntry(target.doc, target.registryTable, pk);
  if (entry === undefined || entry.due > now) return false;
  const record = await readCheckpointName(target.doc, target.registryTable, entry.name_pk);
  const decision = gcDecision(entry, record, now);
  if (decision.action === 'move') {
    counters.entries_moved++;
    return moveGcEntry(target.doc, target.registryTable, entry, decision.due);
  }
  if (decision.action === 'collect') {
    const objects = objectsToCollect(entry, record);
    if (objects.length > 0) {
      const answer = await target.s3.send(
        new DeleteObjectsCommand({
          Bucket: target.bucket,
          Delete: { Objects: objects.map((Key) => ({ Key })), Quiet: true },
        }),
      );
      if ((answer.Errors?.length ?? 0) > 0) {
        counters.collect_errors++;
        return false;
      }
      counters.objects_deleted += objects.length;
    }
    if (
      await deleteExpiredCheckpointName(
        target.doc,
        target.registryTable,
        entry.name_pk,
        entry.content_id,
        now,
      )
    ) {
      counters.names_removed++;
    }
    await deleteCollectedMarker(target.doc, target.registryTable, entry.name_pk, entry.content_id);
    counters.checkpoints_collected++;
  }
  await deleteCollectedGcEntry(target.doc, target.registryTable, entry);
  return true;
}
