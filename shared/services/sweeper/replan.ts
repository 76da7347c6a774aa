import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { logger } from '../../base/logger.js';
import { leaseExpired, replanFor } from '../../domain/planning/claim.js';
import { findExpiredLeases, readModels, replanModel } from '../../repositories/models.js';

export interface ReplanCounters {
  /** Model rows the Scan read (and was charged for). */
  models_scanned: number;
  leases_expired: number;
  replanned: number;
  /** The condition failed: the worker committed or renewed its lease after our read (E7). */
  replans_lost: number;
  /** Re-plans that reached K attempts: the planner now fails the model's next step alone (E2). */
  attempts_exhausted: number;
}

/**
 * Re-plans every model whose lease ended: planned_through := applied_through read strongly, a new
 * epoch (which fences the old work item's commit, E4), attempts + 1, no longer in flight. The
 * models stream wakes the scheduler, which plans the model again; after K attempts the planner
 * dispatches its next step alone as a server-error fail step.
 */
export async function replanExpiredLeases(
  doc: DynamoDBDocumentClient,
  modelsTable: string,
  now: number,
  maxAttempts: number,
): Promise<ReplanCounters> {
  const found = await findExpiredLeases(doc, modelsTable, now);
  const counters: ReplanCounters = {
    models_scanned: found.scanned,
    leases_expired: 0,
    replanned: 0,
    replans_lost: 0,
    attempts_exhausted: 0,
  };
  if (found.modelIds.length === 0) return counters;
  const models = await readModels(doc, modelsTable, found.modelIds);
  for (const model of models.values()) {
    if (!leaseExpired(model, now)) continue;
    const replan = replanFor(model, now, maxAttempts);
    if (replan === undefined) continue;
    counters.leases_expired++;
    if (await replanModel(doc, modelsTable, replan, 'lease-ended')) {
      counters.replanned++;
      if (replan.exhausted) counters.attempts_exhausted++;
      logger.info('model re-planned after its lease ended', {
        model_id: model.model_id,
        epoch: replan.set.epoch,
        attempts: replan.set.attempts,
        exhausted: replan.exhausted,
      });
    } else {
      counters.replans_lost++;
    }
  }
  return counters;
}
