import { Limiter } from '../../aws/limiter.js';
import { logger } from '../../base/logger.js';
import {
  type ModelClaim,
  releaseFor,
  type SampleClaimWritten,
  sampleReleaseFor,
} from '../../domain/planning/claim.js';
import type { SchedulerAdapters } from './adapters.js';
import type { TickCounters } from './counters.js';

/**
 * The claims a pass holds until its manifest is sent: those it won, and those whose write threw
 * (a timeout may have landed them; the release's condition settles which).
 */
export interface HeldClaims {
  readonly models: ModelClaim[];
  readonly samples: SampleClaimWritten[];
}

export function noClaimsHeld(): HeldClaims {
  return { models: [], samples: [] };
}

export interface FailedPass {
  readonly pool: string;
  readonly work_item_id: string;
  /** What failed the pass; the caller rethrows it. */
  readonly error: unknown;
}

/**
 * Gives back the claims of a pass that failed after claiming and before its manifest was sent, so the
 * next tick dispatches the same work at once instead of after the lease, and no model is charged an
 * attempt for the infrastructure's failure (E7). Best effort and never throws: a release that errors
 * leaves its claim to the lease and the sweeper's re-plan, as if the pass had crashed. Releases run
 * `concurrency` at a time; one warning reports the pass's error and what was given back.
 */
export async function releaseClaims(
  adapters: Pick<SchedulerAdapters, 'releaseModel' | 'releaseSample'>,
  held: HeldClaims,
  concurrency: number,
  failed: FailedPass,
  counters: TickCounters,
): Promise<void> {
  const limiter = new Limiter(concurrency);
  const tally = { claims_released: 0, releases_refused: 0, release_errors: 0 };
  const unreleased: string[] = [];
  const releaseErrors = new Set<string>();
  const settle = (id: string, release: () => Promise<boolean>) =>
    limiter.run(async () => {
      try {
        if (await release()) tally.claims_released++;
        else tally.releases_refused++;
      } catch (error) {
        tally.release_errors++;
        unreleased.push(id);
        releaseErrors.add(error instanceof Error ? error.name : String(error));
      }
    });
  await Promise.all([
    ...held.models.map((claim) => settle(claim.model_id, () => adapters.releaseModel(releaseFor(claim)))),
    ...held.samples.map((claim) =>
      settle(claim.request_id, () => adapters.releaseSample(sampleReleaseFor(claim))),
    ),
  ]);
  counters.claims_released += tally.claims_released;
  counters.releases_refused += tally.releases_refused;
  counters.release_errors += tally.release_errors;
  logger.warn('dispatch failed after claiming; claims given back', {
    pool: failed.pool,
    work_item_id: failed.work_item_id,
    error: failed.error,
    models_held: held.models.length,
    samples_held: held.samples.length,
    ...tally,
    ...(unreleased.length === 0
      ? {}
      : { left_to_lease: unreleased.join(','), release_error_names: [...releaseErrors].join(',') }),
  });
}
