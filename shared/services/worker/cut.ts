import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { logger } from '../../base/logger.js';
import type { CutSave } from '../../repositories/prefix/save-cut.js';
import type { CutRow, SaveAck } from '../../repositories/prefix/types.js';
import { readCutRequest } from '../ops/control-store.js';
import { cutRequestedSince } from '../ops/controls.js';

/**
 * A work item's cut, as its samples see it. A cut is requested by any trigger (the driver's signal,
 * a condition checked at slice boundaries, the operator's `cut#<pool>` record) and latched, so every
 * sample of the work item answers the same. Samples then hand their unfinished sequences over, and
 * once every sample still generating has done so, all rows go out in one `saveCut` (P1 batches across
 * the whole work item); each sample gets back the acknowledgements of its own rows only.
 */

/** Default period of the `cut#<pool>` poll: a modest read rate per running worker. */
export const DEFAULT_CUT_POLL_MS = 2_000;

export interface CutTriggers {
  readonly signal?: AbortSignal;
  readonly when?: () => boolean;
  /** Polls `cut#<pool>`; a request made after `startedAt` (epoch ms) cuts. */
  readonly poll?: {
    readonly pool: string;
    readonly everyMs: number;
    readonly startedAt: number;
    readonly doc: DynamoDBDocumentClient;
    readonly registryTable: string;
  };
}

/** One sample's membership: it must either hand over its rows or leave; both are idempotent. */
export interface CutParticipant {
  /** Hands over this sample's rows (possibly none) and waits for their acknowledgements, in order. */
  save(rows: readonly CutRow[]): Promise<SaveAck[]>;
  /** The sample no longer generates (finished, failed, or not this worker's). */
  leave(): void;
}

interface Handover {
  readonly rows: readonly CutRow[];
  readonly resolve: (acks: SaveAck[]) => void;
}

export class WorkItemCut {
  readonly #latch = new AbortController();
  readonly #triggers: CutTriggers;
  readonly #save: (rows: readonly CutRow[]) => CutSave;
  #generating = 0;
  #handovers: Handover[] = [];
  #poller: NodeJS.Timeout | undefined;
  #polling = false;

  constructor(triggers: CutTriggers, save: (rows: readonly CutRow[]) => CutSave) {
    this.#triggers = triggers;
    this.#save = save;
    const { signal, poll } = triggers;
    if (signal !== undefined) {
      if (signal.aborted) this.#trip('the driver asked for a cut');
      else signal.addEventListener('abort', () => this.#trip('the driver asked for a cut'), { once: true });
    }
    if (poll !== undefined && poll.everyMs > 0) {
      this.#poller = setInterval(() => void this.#pollOnce(poll), poll.everyMs);
      this.#poller.unref();
    }
  }

  /** Whether the work item is being cut; evaluates the boundary condition, then stays true. */
  get requested(): boolean {
    if (!this.#latch.signal.aborted && this.#triggers.when?.() === true) {
      this.#trip('the cut condition holds');
    }
    return this.#latch.signal.aborted;
  }

  /** Registers a sample that is going to generate. */
  join(): CutParticipant {
    this.#generating += 1;
    let member = true;
    const leave = (): void => {
      if (!member) return;
      member = false;
      this.#generating -= 1;
      this.#flushIfComplete();
    };
    return {
      save: (rows) =>
        new Promise<SaveAck[]>((resolve) => {
          this.#handovers.push({ rows, resolve });
          leave();
        }),
      leave,
    };
  }

  /** Stops polling. Samples that are still members are answered by their own exit paths. */
  dispose(): void {
    if (this.#poller !== undefined) clearInterval(this.#poller);
    this.#poller = undefined;
  }

  #trip(why: string): void {
    if (this.#latch.signal.aborted) return;
    logger.info('cut requested: running samples save their prefixes', { why });
    this.#latch.abort();
  }

  async #pollOnce(poll: NonNullable<CutTriggers['poll']>): Promise<void> {
    if (this.#polling || this.#latch.signal.aborted) return;
    this.#polling = true;
    try {
      const record = await readCutRequest(poll.doc, poll.registryTable, poll.pool);
      if (cutRequestedSince(record, poll.startedAt)) this.#trip(`cut#${poll.pool} was requested`);
    } catch (error) {
      logger.warn('cut request poll failed; polling again', {
        error: error instanceof Error ? error.name : String(error),
      });
    } finally {
      this.#polling = false;
    }
  }

  /** Saves once no sample is generating any more: everyone who will hand over rows has done so. */
  #flushIfComplete(): void {
    if (this.#generating > 0 || this.#handovers.length === 0) return;
    const handovers = this.#handovers;
    this.#handovers = [];
    const rows = handovers.flatMap((handover) => handover.rows);
    if (rows.length === 0) {
      for (const handover of handovers) handover.resolve([]);
      return;
    }
    let saved: CutSave;
    try {
      saved = this.#save(rows);
    } catch (error) {
      // Not expected (saveCut answers bad rows per row); every sample then restarts or keeps its pointer.
      const message = error instanceof Error ? error.message : String(error);
      logger.error('the cut could not be saved', { error: message });
      for (const handover of handovers) {
        handover.resolve(
          handover.rows.map((row) => ({
            status: 'failed',
            callId: row.callId,
            reason: 'write-failed',
            message,
          })),
        );
      }
      return;
    }
    let offset = 0;
    for (const handover of handovers) {
      const own = saved.acks.slice(offset, offset + handover.rows.length);
      offset += handover.rows.length;
      void Promise.all(own).then(handover.resolve);
    }
  }
}
