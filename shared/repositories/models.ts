import { type DynamoDBDocumentClient, ScanCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { batchGetByKey } from '../aws/batch-get.js';
import { writeIfCondition } from '../aws/conditional.js';
import { getItem } from '../aws/get-item.js';
import type { TransactItem } from '../aws/transact.js';
import type { ModelClaim, ModelRelease, ModelReplan } from '../domain/planning/claim.js';
import type { LoraConfig, ModelHolder, ModelRow, ReplayEntry } from '../domain/records.js';
import { modelNotFound } from './seq-counters.js';

/**
 * The one module that reads and writes the `models` table (key `model_id`): its creation (in the
 * intake's transaction), the scheduler's claim and release, the worker's lease renewal and commit
 * advance (as a transaction item), the re-plans of the sweeper and the worker, and every read.
 * The transitions are docs/design.md#e1 to #e4 and #e7.
 */

/** The row's key. */
export function modelKey(modelId: string): { readonly model_id: string } {
  return { model_id: modelId };
}

/** What makes a new training run: create_model, or copy_weights (its run holds the copy). */
export interface NewRun {
  readonly modelId: string;
  readonly tenant: string;
  readonly sessionId: string;
  readonly baseModel: string;
  readonly loraConfig: LoraConfig;
  readonly now: number;
}

/** A new run's row: epoch 0, nothing planned, applied or attempted yet. */
export function newModelRow(run: NewRun, status: ModelRow['status']): ModelRow {
  return {
    model_id: run.modelId,
    tenant: run.tenant,
    session_id: run.sessionId,
    base_model: run.baseModel,
    lora_config: run.loraConfig,
    status,
    epoch: 0,
    planned_through: 0,
    applied_through: 0,
    attempts: 0,
    created_at: run.now,
  };
}

/** create_model's row, put in the intake's transaction only if the model does not exist yet. */
export function modelCreateItem(table: string, row: ModelRow): TransactItem {
  return { Put: { TableName: table, Item: row, ConditionExpression: 'attribute_not_exists(model_id)' } };
}

/** What the API reads of a model row: who owns it and how it was created (fixed at create_model). */
export type ModelSummary = Pick<ModelRow, 'model_id' | 'tenant' | 'base_model' | 'lora_config'>;

/**
 * The tenant's model as create_model wrote it, or 404 (unknown and other tenants' look the same). A
 * plain GetItem of the attributes that never change after creation: it takes part in no transaction,
 * so it never contends with the scheduler's claims on the row. Unloaded models answer too: their
 * checkpoints and metadata outlive them.
 */
export async function requireModel(
  doc: DynamoDBDocumentClient,
  table: string,
  modelId: string,
  tenant: string,
): Promise<ModelSummary> {
  const row = await getItem<ModelSummary>(doc, table, modelKey(modelId), false, [
    'model_id',
    'tenant',
    'base_model',
    'lora_config',
  ]);
  if (row === undefined || row.tenant !== tenant) throw modelNotFound(modelId);
  return row;
}

/** One model row, read strongly. */
export function readModelRow(
  doc: DynamoDBDocumentClient,
  table: string,
  modelId: string,
): Promise<ModelRow | undefined> {
  return getItem<ModelRow>(doc, table, modelKey(modelId));
}

/** The model rows of `modelIds`, read strongly (R5): one BatchGetItem per 100 models. */
export async function readModels(
  doc: DynamoDBDocumentClient,
  table: string,
  modelIds: Iterable<string>,
): Promise<Map<string, ModelRow>> {
  const items = await batchGetByKey(doc, modelIds, { table, keyName: 'model_id', consistent: true });
  return items as unknown as Map<string, ModelRow>;
}

/**
 * The claim of E2 as one conditional UpdateItem. `false` when the condition failed: another tick
 * claimed the model, or the sweeper re-planned it, since the snapshot was read.
 */
export async function claimModel(
  doc: DynamoDBDocumentClient,
  table: string,
  claim: ModelClaim,
): Promise<boolean> {
  return writeIfCondition(() =>
    doc.send(
      new UpdateCommand({
        TableName: table,
        Key: modelKey(claim.model_id),
        UpdateExpression:
          'SET epoch = :epoch, inflight = :inflight, lease_until = :lease_until, planned_through = :planned_through',
        ConditionExpression: 'epoch = :expected_epoch AND attribute_not_exists(inflight)',
        ExpressionAttributeValues: {
          ':epoch': claim.set.epoch,
          ':inflight': claim.set.inflight,
          ':lease_until': claim.set.lease_until,
          ':planned_through': claim.set.planned_through,
          ':expected_epoch': claim.condition.expected_epoch,
        },
      }),
    ),
  );
}

/**
 * Gives back a claim the pass could not dispatch (`releaseFor`). `false` when the row no longer
 * carries this claim (re-planned, committed, claimed again), or the claim never landed.
 */
export async function releaseModel(
  doc: DynamoDBDocumentClient,
  table: string,
  release: ModelRelease,
): Promise<boolean> {
  return writeIfCondition(() =>
    doc.send(
      new UpdateCommand({
        TableName: table,
        Key: modelKey(release.model_id),
        UpdateExpression: `SET planned_through = :planned_through REMOVE ${release.remove.join(', ')}`,
        ConditionExpression: 'epoch = :epoch AND inflight = :inflight',
        ExpressionAttributeValues: {
          ':planned_through': release.set.planned_through,
          ':epoch': release.condition.epoch,
          ':inflight': release.condition.inflight,
        },
      }),
    ),
  );
}

/** `SET lease_until IF inflight = :token`. `false` when someone re-planned the model (E7). */
export async function renewModelLease(
  doc: DynamoDBDocumentClient,
  table: string,
  modelId: string,
  inflight: string,
  leaseUntil: number,
): Promise<boolean> {
  return writeIfCondition(() =>
    doc.send(
      new UpdateCommand({
        TableName: table,
        Key: modelKey(modelId),
        UpdateExpression: 'SET lease_until = :until',
        ConditionExpression: 'inflight = :token',
        ExpressionAttributeValues: { ':until': leaseUntil, ':token': inflight },
      }),
    ),
  );
}

/**
 * Whose re-plan it is. The sweeper re-plans only a lease that has ended (`lease_ended_by`), so a
 * worker that renewed after the sweeper's read keeps its model; a worker handing its own model
 * back after an infrastructure error holds the lease, so only its token is checked.
 */
export type ReplanCondition = 'lease-ended' | 'still-in-flight';

/**
 * The re-plan of E2 (see `replanFor`) as one conditional UpdateItem: planned_through back to
 * applied_through, a new epoch (which fences the old work item's commit, E4), attempts + 1, no
 * longer in flight. `false` when the condition failed (committed, renewed or re-planned meanwhile).
 */
export async function replanModel(
  doc: DynamoDBDocumentClient,
  table: string,
  replan: ModelReplan,
  condition: ReplanCondition,
): Promise<boolean> {
  const leaseEnded = condition === 'lease-ended';
  return writeIfCondition(() =>
    doc.send(
      new UpdateCommand({
        TableName: table,
        Key: modelKey(replan.model_id),
        UpdateExpression:
          'SET planned_through = :planned_through, epoch = :epoch, attempts = :attempts REMOVE inflight, lease_until',
        ConditionExpression: leaseEnded
          ? 'epoch = :expected_epoch AND inflight = :inflight AND (attribute_not_exists(lease_until) OR lease_until <= :lease_ended_by)'
          : 'epoch = :expected_epoch AND inflight = :inflight',
        ExpressionAttributeValues: {
          ':planned_through': replan.set.planned_through,
          ':epoch': replan.set.epoch,
          ':attempts': replan.set.attempts,
          ':expected_epoch': replan.condition.expected_epoch,
          ':inflight': replan.condition.inflight,
          ...(leaseEnded ? { ':lease_ended_by': replan.condition.lease_ended_by } : {}),
        },
      }),
    ),
  );
}

/** What a model's commit moves its row to (E4). */
export interface ModelAdvance {
  readonly model_id: string;
  readonly inflight: string;
  /** The committing run (`mintRunId`), recorded as `last_run` (E5). */
  readonly run: string;
  readonly base_applied_through: number;
  /** The last step's seq. */
  readonly applied_through: number;
  /**
   * A snapshot of the state after `applied_through`, when this commit writes one (S3): it becomes
   * `state_ref` and empties `replay`. Else state_ref stays, and `replay` gains `replay_append`.
   */
  readonly state_ref?: string;
  /** The steps of this work item that changed the state, when no snapshot is written (S4). */
  readonly replay_append?: readonly ReplayEntry[];
  /** The worker that now holds the state (S1) and until when; absent: nobody holds it. */
  readonly holder?: { readonly holder: ModelHolder; readonly until: number };
  /** An unload_model step completed. */
  readonly unloaded: boolean;
  readonly now: number;
}

/**
 * The commit's model row action: `SET applied_through, last_completed_at, attempts = 0, last_run
 * [, state_ref, snapshot_through | , replay = replay + :entries] [, holder, holder_until] [, status]
 * REMOVE inflight, lease_until [, replay] [, holder, holder_until]` on
 * `inflight = :token AND applied_through = :base`.
 */
export function modelAdvanceItem(table: string, advance: ModelAdvance): TransactItem {
  const sets = [
    'applied_through = :applied',
    'last_completed_at = :now',
    'attempts = :zero',
    'last_run = :run',
  ];
  const removes = ['inflight', 'lease_until'];
  const values: Record<string, unknown> = {
    ':run': advance.run,
    ':applied': advance.applied_through,
    ':now': advance.now,
    ':zero': 0,
    ':token': advance.inflight,
    ':base': advance.base_applied_through,
  };
  if (advance.state_ref !== undefined) {
    sets.push('state_ref = :state', 'snapshot_through = :applied');
    values[':state'] = advance.state_ref;
    removes.push('replay');
  } else if (advance.replay_append !== undefined && advance.replay_append.length > 0) {
    sets.push('replay = list_append(if_not_exists(replay, :no_entries), :entries)');
    values[':no_entries'] = [];
    values[':entries'] = advance.replay_append;
  }
  if (advance.holder !== undefined) {
    sets.push('holder = :holder', 'holder_until = :holder_until');
    values[':holder'] = advance.holder.holder;
    values[':holder_until'] = advance.holder.until;
  } else {
    removes.push('holder', 'holder_until');
  }
  if (advance.unloaded) {
    sets.push('#status = :unloaded');
    values[':unloaded'] = 'unloaded';
  }
  return {
    Update: {
      TableName: table,
      Key: modelKey(advance.model_id),
      UpdateExpression: `SET ${sets.join(', ')} REMOVE ${removes.join(', ')}`,
      ConditionExpression: 'inflight = :token AND applied_through = :base',
      ...(advance.unloaded ? { ExpressionAttributeNames: { '#status': 'status' } } : {}),
      ExpressionAttributeValues: values,
    },
  };
}

/**
 * The holder extends its hold (S1): `SET holder_until IF holder.worker = :me`. `false` when another
 * worker's commit took the model (it ran a work item the holder did not get).
 */
export async function renewHold(
  doc: DynamoDBDocumentClient,
  table: string,
  modelId: string,
  worker: string,
  until: number,
): Promise<boolean> {
  return writeIfCondition(() =>
    doc.send(
      new UpdateCommand({
        TableName: table,
        Key: modelKey(modelId),
        UpdateExpression: 'SET holder_until = :until',
        ConditionExpression: 'holder.worker = :me',
        ExpressionAttributeValues: { ':until': until, ':me': worker },
      }),
    ),
  );
}

/** A holder letting go of a model (S3): with the snapshot it wrote of the state after `applied_through`, if any. */
export interface LetGo {
  readonly model_id: string;
  readonly worker: string;
  readonly applied_through: number;
  /** Absent when the row's snapshot is already the held state (nothing to replay). */
  readonly state_ref?: string;
}

/**
 * `[SET state_ref, snapshot_through REMOVE replay,] REMOVE holder, holder_until` on
 * `holder.worker = :me AND applied_through = :applied`: fenced like a commit (E4), so a holder that
 * lost the model (another worker committed since) changes nothing, and its snapshot is garbage.
 */
export async function letGoModel(doc: DynamoDBDocumentClient, table: string, letGo: LetGo): Promise<boolean> {
  const snapshot = letGo.state_ref !== undefined;
  return writeIfCondition(() =>
    doc.send(
      new UpdateCommand({
        TableName: table,
        Key: modelKey(letGo.model_id),
        UpdateExpression: snapshot
          ? 'SET state_ref = :state, snapshot_through = :applied REMOVE replay, holder, holder_until'
          : 'REMOVE holder, holder_until',
        ConditionExpression: 'holder.worker = :me AND applied_through = :applied',
        ExpressionAttributeValues: {
          ':me': letGo.worker,
          ':applied': letGo.applied_through,
          ...(snapshot ? { ':state': letGo.state_ref } : {}),
        },
      }),
    ),
  );
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
  table: string,
  now: number,
): Promise<{ modelIds: string[]; scanned: number }> {
  const modelIds: string[] = [];
  let scanned = 0;
  let start: Record<string, unknown> | undefined;
  do {
    const page = await doc.send(
      new ScanCommand({
        TableName: table,
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
