import { DeleteCommand, type DynamoDBDocumentClient, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { writeIfCondition } from '../aws/conditional.js';
import { registryKey } from '../domain/records.js';

/**
 * The one module that reads and writes work lane leases (S2 of docs/design.md#s1): `lane#<pool>#<i>`
 * in the registry, `{ worker, until }`. A worker process that holds models consumes lane i's queue
 * only while it holds lane i's lease, so one lane has one consumer and the scheduler's routing to it
 * reaches the holder. Safety never rests on the lease (a worker checks every state against its model
 * row); a lost lease costs rebuilds, not correctness.
 */
export interface WorkLaneRecord {
  readonly pk: string;
  readonly worker: string;
  readonly until: number;
}

/** Takes lane `lane` if it is free, expired, or already this worker's. */
export async function acquireLane(
  doc: DynamoDBDocumentClient,
  table: string,
  pool: string,
  lane: number,
  worker: string,
  now: number,
  leaseMs: number,
): Promise<boolean> {
  const record: WorkLaneRecord = { pk: registryKey.workLane(pool, lane), worker, until: now + leaseMs };
  return writeIfCondition(() =>
    doc.send(
      new PutCommand({
        TableName: table,
        Item: record,
        ConditionExpression: 'attribute_not_exists(pk) OR #until <= :now OR worker = :me',
        ExpressionAttributeNames: { '#until': 'until' },
        ExpressionAttributeValues: { ':now': now, ':me': worker },
      }),
    ),
  );
}

/** `SET until IF worker = :me`: false when the lease was taken by another worker. */
export async function renewLane(
  doc: DynamoDBDocumentClient,
  table: string,
  pool: string,
  lane: number,
  worker: string,
  until: number,
): Promise<boolean> {
  return writeIfCondition(() =>
    doc.send(
      new UpdateCommand({
        TableName: table,
        Key: { pk: registryKey.workLane(pool, lane) },
        UpdateExpression: 'SET #until = :until',
        ConditionExpression: 'worker = :me',
        ExpressionAttributeNames: { '#until': 'until' },
        ExpressionAttributeValues: { ':until': until, ':me': worker },
      }),
    ),
  );
}

/** Gives the lane back (a stopping worker), if it is still this worker's. */
export async function releaseLane(
  doc: DynamoDBDocumentClient,
  table: string,
  pool: string,
  lane: number,
  worker: string,
): Promise<boolean> {
  return writeIfCondition(() =>
    doc.send(
      new DeleteCommand({
        TableName: table,
        Key: { pk: registryKey.workLane(pool, lane) },
        ConditionExpression: 'worker = :me',
        ExpressionAttributeValues: { ':me': worker },
      }),
    ),
  );
}
