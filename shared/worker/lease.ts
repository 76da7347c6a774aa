import { type DynamoDBDocumentClient, GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { config } from '../config.js';
import type { ModelRow } from '../domain/records.js';
import { isAwsError } from '../errors.js';
import { logger } from '../logger.js';
import { replanFor } from '../scheduling/claim.js';

/** Another owner holds the model: a re-plan happened (E2). Stop and commit nothing (E7). */
export class LeaseLostError extends Error {
  constructor(inflight: string) {
    super(`work item ${inflight} is no longer in flight`);
    this.name = 'LeaseLostError';
  }
}

export async function readModelRow(
  doc: DynamoDBDocumentClient,
  modelId: string,
): Promise<ModelRow | undefined> {
  const answer = await doc.send(
    new GetCommand({ TableName: config().table('models'), Key: { model_id: modelId }, ConsistentRead: true }),
  );
  return answer.Item as ModelRow | undefined;
}

/**
 * `SET lease_until IF inflight = :token`. False when the condition fails (someone re-planned);
 * other errors are thrown.
 */
export async function renewLease(
  doc: DynamoDBDocumentClient,
  modelId: string,
  inflight: string,
  leaseUntil: number,
): Promise<boolean> {
  try {
    await doc.send(
      new UpdateCommand({
        TableName: config().table('models'),
        Key: { model_id: modelId },
        UpdateExpression: 'SET lease_until = :until',
        ConditionExpression: 'inflight = :token',
        ExpressionAttributeValues: { ':until': leaseUntil, ':token': inflight },
      }),
    );
    return true;
  } catch (error) {
    if (isAwsError(error, 'ConditionalCheckFailedException')) return false;
    throw error;
  }
}

interface Held {
  readonly modelId: string;
  readonly inflight: string;
  readonly controller: AbortController;
}

/**
 * Renews the leases of the models a worker is running, on one timer (E7). A renewal whose condition
 * fails aborts that model's signal; a renewal that errors is retried on the next tick (safety rests
 * on the commit's condition, not on the lease).
 */
export class LeaseKeeper {
  readonly #held = new Map<string, Held>();
  readonly #timer: NodeJS.Timeout;

  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly leaseMs: number,
    renewEveryMs: number,
    private readonly now: () => number,
  ) {
    this.#timer = setInterval(() => void this.#renewAll(), renewEveryMs);
    this.#timer.unref();
  }

  /** Starts renewing; the returned signal aborts with a `LeaseLostError` if the lease is taken over. */
  hold(modelId: string, inflight: string): AbortSignal {
    const controller = new AbortController();
    this.#held.set(inflight, { modelId, inflight, controller });
    return controller.signal;
  }

  release(inflight: string): void {
    this.#held.delete(inflight);
  }

  /** Renews one lease now; false (and the model's signal aborted) if it is lost. */
  async renewNow(inflight: string): Promise<boolean> {
    const held = this.#held.get(inflight);
    if (held === undefined) return false;
    const kept = await renewLease(this.doc, held.modelId, held.inflight, this.now() + this.leaseMs);
    if (!kept) this.#lose(held);
    return kept;
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#held.clear();
  }

  async #renewAll(): Promise<void> {
    await Promise.all(
      [...this.#held.values()].map(async (held) => {
        try {
          await this.renewNow(held.inflight);
        } catch (error) {
          logger.warn('lease renewal failed; retrying on the next tick', {
            model_id: held.modelId,
            error: error instanceof Error ? error.name : String(error),
          });
        }
      }),
    );
  }

  #lose(held: Held): void {
    this.#held.delete(held.inflight);
    logger.warn('lease lost: the model was re-planned; stopping its part', { inflight: held.inflight });
    held.controller.abort(new LeaseLostError(held.inflight));
  }
}

/**
 * Hands a model back for re-plan at once after an infrastructure error (E6), with the sweeper's
 * re-plan (`replanFor`: planned_through := applied_through, epoch and attempts bumped, inflight and
 * lease removed), conditioned on this work item still being in flight rather than on the lease
 * having ended. True when this call released it; false when someone else already had.
 */
export async function releaseForReplan(
  doc: DynamoDBDocumentClient,
  modelId: string,
  inflight: string,
  now: number,
  maxAttempts: number,
): Promise<boolean> {
  const row = await readModelRow(doc, modelId);
  if (row === undefined || row.inflight !== inflight) return false;
  const replan = replanFor(row, now, maxAttempts);
  if (replan === undefined) return false;
  try {
    await doc.send(
      new UpdateCommand({
        TableName: config().table('models'),
        Key: { model_id: modelId },
        UpdateExpression:
          'SET planned_through = :planned, epoch = :epoch, attempts = :attempts REMOVE inflight, lease_until',
        ConditionExpression: 'epoch = :expected AND inflight = :inflight',
        ExpressionAttributeValues: {
          ':planned': replan.set.planned_through,
          ':epoch': replan.set.epoch,
          ':attempts': replan.set.attempts,
          ':expected': replan.condition.expected_epoch,
          ':inflight': replan.condition.inflight,
        },
      }),
    );
    return true;
  } catch (error) {
    if (isAwsError(error, 'ConditionalCheckFailedException')) return false;
    throw error;
  }
}
