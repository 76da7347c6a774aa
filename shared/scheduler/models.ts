import { type DynamoDBDocumentClient, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { isAwsError } from '../errors.js';
import type { ModelClaim, ModelRelease } from '../scheduling/claim.js';

/**
 * The claim of E2 as one conditional UpdateItem. `false` when the condition failed: another tick
 * claimed the model, or the sweeper re-planned it, since the snapshot was read. That is the expected
 * outcome of overlapping ticks, so it is an answer, never an error.
 */
export async function claimModel(
  doc: DynamoDBDocumentClient,
  table: string,
  claim: ModelClaim,
): Promise<boolean> {
  try {
    await doc.send(
      new UpdateCommand({
        TableName: table,
        Key: { model_id: claim.model_id },
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
    );
    return true;
  } catch (error) {
    if (isAwsError(error, 'ConditionalCheckFailedException')) return false;
    throw error;
  }
}

/**
 * Gives back a claim the pass could not dispatch (`releaseFor`): one conditional UpdateItem. `false`
 * when the condition failed: the row no longer carries this claim (re-planned, committed, claimed
 * again), or the claim never landed. That changes nothing and is an answer, never an error.
 */
export async function releaseModel(
  doc: DynamoDBDocumentClient,
  table: string,
  release: ModelRelease,
): Promise<boolean> {
  try {
    await doc.send(
      new UpdateCommand({
        TableName: table,
        Key: { model_id: release.model_id },
        UpdateExpression: `SET planned_through = :planned_through REMOVE ${release.remove.join(', ')}`,
        ConditionExpression: 'epoch = :epoch AND inflight = :inflight',
        ExpressionAttributeValues: {
          ':planned_through': release.set.planned_through,
          ':epoch': release.condition.epoch,
          ':inflight': release.condition.inflight,
        },
      }),
    );
    return true;
  } catch (error) {
    if (isAwsError(error, 'ConditionalCheckFailedException')) return false;
    throw error;
  }
}
