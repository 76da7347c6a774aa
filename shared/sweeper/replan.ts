import { type DynamoDBDocumentClient, ScanCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { isAwsError } from '../errors.js';
import { logger } from '../logger.js';
import { readModels } from '../repositories/models.js';
import { leaseExpired, type ModelReplan, replanFor } from '../scheduling/claim.js';

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
 * Models in flight whose lease has ended, found by a Scan of the models table filtered on
 * `inflight` and `lease_until`. Cost: a Scan is charged for every model row it reads (about half a
 * read unit per 4 KB, eventually consistent), in flight or not, once per sweep; the filter only
 * trims what comes back. Fine for thousands of models; at larger scale a sparse GSI keyed on an
 * attribute set only while in flight (written by the claim, removed by the commit and the re-plan)
 * would turn it into a Query over in-flight models only.
 */
export async function findExpiredLeases(
  doc: DynamoDBDocumentClient,
  modelsTable: string,
  now: number,
): Promise<{ modelIds: string[]; scanned: number }> {
  const modelIds: string[] = [];
  let scanned = 0;
  let start: Record<string, unknown> | undefined;
  do {
    const page = await doc.send(
      new ScanCommand({
        TableName: modelsTable,
        ProjectionExpression: 'model_id',
        FilterExpression:
          'attribute_exists(inflight) AND (attribute_not_exists(lease_until) OR lease_until <= :now)',
        ExpressionAttributeValues: { ':now': now },
        ExclusiveStartKey: start,
      }),
    );
    scanned += page.ScannedCount ?? 0;
    for (const item of page.Items ?? []) if (typeof item.model_id === 'string') modelIds.push(item.model_id);
    start = page.LastEvaluatedKey;
  } while (start !== undefined);
  return { modelIds, scanned };
}

/**
 * The re-plan of E2 as one conditional UpdateItem (see `replanFor`). `false` when the condition
 * failed: the worker committed, or renewed its lease, after the strongly consistent read.
 */
export async function applyReplan(
  doc: DynamoDBDocumentClient,
  modelsTable: string,
  replan: ModelReplan,
): Promise<boolean> {
  try {
    await doc.send(
      new UpdateCommand({
        TableName: modelsTable,
        Key: { model_id: replan.model_id },
        UpdateExpression:
          'SET planned_through = :planned_through, epoch = :epoch, attempts = :attempts REMOVE inflight, lease_until',
        ConditionExpression:
          'epoch = :expected_epoch AND inflight = :inflight AND (attribute_not_exists(lease_until) OR lease_until <= :lease_ended_by)',
        ExpressionAttributeValues: {
          ':planned_through': replan.set.planned_through,
          ':epoch': replan.set.epoch,
          ':attempts': replan.set.attempts,
          ':expected_epoch': replan.condition.expected_epoch,
          ':inflight': replan.condition.inflight,
          ':lease_ended_by': replan.condition.lease_ended_by,
        },
      }),
    );
    return true;
  } catch (error) {
    if (isAwsError(error, 'ConditionalCheckFailedException')) return false;
    throw error;
  }
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
    if (await applyReplan(doc, modelsTable, replan)) {
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
