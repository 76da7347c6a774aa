import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { logger } from '../../base/logger.js';
import { readCancelledClaims } from '../../repositories/samples/claims.js';

/**
 * The cancels of a work item's running samples (W9). cancel_future marks a running sample's claim
 * (repositories/samples/claims.ts); while samples run, one strongly consistent read of their claims
 * per period (one BatchGetItem per 100 samples, beside the `cut#<pool>` poll and at its period) finds
 * the marked ones and aborts their signals, so each stops at its next slice or engine step and
 * commits cancelled.
 */
export interface CancelPoll {
  readonly everyMs: number;
  readonly doc: DynamoDBDocumentClient;
  readonly registryTable: string;
}

interface Watched {
  readonly claimToken: string;
  readonly controller: AbortController;
}

export class CancelWatch {
  readonly #watched = new Map<string, Watched>();
  #poller: NodeJS.Timeout | undefined;
  #polling = false;

  constructor(poll: CancelPoll | undefined) {
    if (poll !== undefined && poll.everyMs > 0) {
      this.#poller = setInterval(() => void this.#pollOnce(poll), poll.everyMs);
      this.#poller.unref();
    }
  }

  /** Watches a running sample's claim; the signal aborts once its cancel is seen. */
  watch(requestId: string, claimToken: string): AbortSignal {
    const controller = new AbortController();
    this.#watched.set(requestId, { claimToken, controller });
    return controller.signal;
  }

  unwatch(requestId: string): void {
    this.#watched.delete(requestId);
  }

  dispose(): void {
    if (this.#poller !== undefined) clearInterval(this.#poller);
    this.#poller = undefined;
    this.#watched.clear();
  }

  async #pollOnce(poll: CancelPoll): Promise<void> {
    if (this.#polling || this.#watched.size === 0) return;
    this.#polling = true;
    try {
      const claims = new Map([...this.#watched].map(([id, watched]) => [id, watched.claimToken]));
      for (const requestId of await readCancelledClaims(poll.doc, poll.registryTable, claims)) {
        const watched = this.#watched.get(requestId);
        if (watched === undefined || watched.controller.signal.aborted) continue;
        logger.info('cancel requested: the running sample stops at its next step', {
          request_id: requestId,
        });
        watched.controller.abort();
      }
    } catch (error) {
      logger.warn('cancel poll failed; polling again', {
        error: error instanceof Error ? error.name : String(error),
      });
    } finally {
      this.#polling = false;
    }
  }
}
