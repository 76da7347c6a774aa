import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { ConditionLostError } from '../../base/errors.js';
import { logger } from '../../base/logger.js';
import { replanFor } from '../../domain/planning/claim.js';
import { registryKey } from '../../domain/records.js';
import { readModelRow, renewModelLease, replanModel } from '../../repositories/models.js';
import { renewSampleClaim } from '../../repositories/samples/claims.js';
import type { Tables } from '../../repositories/tables.js';

/** The tables a worker's leases live in: model rows and sample claims. */
export type LeaseTables = Tables<'models' | 'registry'>;

/** A sample's claim expired and another work item claimed it (R4): stop; its commit would fail anyway. */
export class SampleClaimLostError extends ConditionLostError {
  override readonly name = 'SampleClaimLostError';
  constructor(requestId: string) {
    super(`the claim of sample ${requestId} is no longer this work item's`, {
      context: { request_id: requestId },
    });
  }
}

/** Another owner holds the model: a re-plan happened (E2). Stop and commit nothing (E7). */
export class LeaseLostError extends ConditionLostError {
  override readonly name = 'LeaseLostError';
  constructor(inflight: string) {
    super(`work item ${inflight} is no longer in flight`, { context: { inflight } });
  }
}

interface Held {
  /** `inflight` of a model part; `claim#<request_id>@<claim_token>` of a sample. */
  readonly key: string;
  /** For logs: the model or request it covers. */
  readonly subject: Record<string, string>;
  readonly renew: (leaseUntil: number) => Promise<boolean>;
  readonly controller: AbortController;
  /** What a lost lease aborts with. */
  readonly lost: () => Error;
  /** The lease's end as last read or written by this holder (0: unknown). */
  confirmedUntil: number;
}

/**
 * Renews, on one timer, the leases a worker runs under (E7): the models' (`inflight`) and the
 * samples' claims (R4). A renewal whose condition fails aborts that part's signal; a renewal that
 * errors is retried on the next tick (safety rests on the commit's condition, not on the lease).
 */
export class LeaseKeeper {
  readonly #held = new Map<string, Held>();
  readonly #timer: NodeJS.Timeout;

  constructor(
    private readonly doc: DynamoDBDocumentClient,
    private readonly tables: LeaseTables,
    private readonly leaseMs: number,
    renewEveryMs: number,
    private readonly now: () => number,
  ) {
    this.#timer = setInterval(() => void this.#renewAll(), renewEveryMs);
    this.#timer.unref();
  }

  /**
   * Starts renewing; the returned signal aborts with a `LeaseLostError` if the lease is taken over.
   * `leaseUntil`: the lease's end on the row the holder just read strongly (with its `inflight`).
   */
  hold(modelId: string, inflight: string, leaseUntil = 0): AbortSignal {
    return this.#hold({
      key: inflight,
      subject: { model_id: modelId, inflight },
      renew: (until) => renewModelLease(this.doc, this.tables.models, modelId, inflight, until),
      lost: () => new LeaseLostError(inflight),
      confirmedUntil: leaseUntil,
    });
  }

  /** Starts renewing a sample's claim; the signal aborts with a `SampleClaimLostError` if it is lost. */
  holdSampleClaim(requestId: string, claimToken: string): AbortSignal {
    return this.#hold({
      key: sampleClaimKey(requestId, claimToken),
      subject: { request_id: requestId, claim_token: claimToken },
      renew: (until) => renewSampleClaim(this.doc, this.tables.registry, requestId, claimToken, until),
      lost: () => new SampleClaimLostError(requestId),
      confirmedUntil: 0,
    });
  }

  release(inflight: string): void {
    this.#held.delete(inflight);
  }

  releaseSampleClaim(requestId: string, claimToken: string): void {
    this.#held.delete(sampleClaimKey(requestId, claimToken));
  }

  /**
   * Whether the model is still this holder's before it writes its blobs: without a call while more
   * than half of the lease this holder last confirmed is left (no re-plan can take a model whose
   * lease is live, E2: the sweeper's re-plan is conditioned on its expiry, and the scheduler claims
   * only a model with nothing in flight), otherwise by renewing it now (false, and the part's signal
   * aborted, if it is lost). Safety never rests on it
   * (E4's condition does); it keeps a stalled worker from writing blobs nothing will name.
   */
  async stillHeld(inflight: string): Promise<boolean> {
    const held = this.#held.get(inflight);
    if (held === undefined) return false;
    if (held.confirmedUntil - this.now() > this.leaseMs / 2) return true;
    return this.#renew(held);
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#held.clear();
  }

  #hold(held: Omit<Held, 'controller'>): AbortSignal {
    const controller = new AbortController();
    this.#held.set(held.key, { ...held, controller });
    return controller.signal;
  }

  async #renew(held: Held): Promise<boolean> {
    const until = this.now() + this.leaseMs;
    const kept = await held.renew(until);
    if (kept) held.confirmedUntil = Math.max(held.confirmedUntil, until);
    // Released meanwhile (its commit removed the lease): nothing is lost.
    if (!kept && this.#held.get(held.key) === held) this.#lose(held);
    return kept;
  }

  async #renewAll(): Promise<void> {
    await Promise.all(
      [...this.#held.values()].map(async (held) => {
        try {
          await this.#renew(held);
        } catch (error) {
          logger.warn('lease renewal failed; retrying on the next tick', {
            ...held.subject,
            error: error instanceof Error ? error.name : String(error),
          });
        }
      }),
    );
  }

  #lose(held: Held): void {
    this.#held.delete(held.key);
    logger.warn('lease lost: re-planned or claimed by another work item; stopping its part', held.subject);
    held.controller.abort(held.lost());
  }
}

function sampleClaimKey(requestId: string, claimToken: string): string {
  return `${registryKey.sampleClaim(requestId)}@${claimToken}`;
}

/**
 * Hands a model back for re-plan at once after an infrastructure error (E6), with the sweeper's
 * re-plan (`replanFor`), conditioned on this work item still being in flight rather than on the
 * lease having ended. True when this call released it; false when someone else already had.
 */
export async function releaseForReplan(
  doc: DynamoDBDocumentClient,
  modelsTable: string,
  modelId: string,
  inflight: string,
  now: number,
  maxAttempts: number,
): Promise<boolean> {
  const row = await readModelRow(doc, modelsTable, modelId);
  if (row === undefined || row.inflight !== inflight) return false;
  const replan = replanFor(row, now, maxAttempts);
  if (replan === undefined) return false;
  return replanModel(doc, modelsTable, replan, 'still-in-flight');
}
