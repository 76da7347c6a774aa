import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { logger } from '../../base/logger.js';
import { WORK_LANES } from '../../base/topology.js';
import { acquireLane, releaseLane, renewLane } from '../../repositories/work-lanes.js';

/** A lane lease lasts this long and is renewed every third of it. */
export const LANE_LEASE_MS = 60_000;

export interface WorkLaneStore {
  readonly doc: DynamoDBDocumentClient;
  readonly registryTable: string;
  readonly pool: string;
}

/**
 * A worker process's work lane (S2 of docs/design.md#s1): the first free lane of the pool, leased and
 * renewed while the process runs, given back when it stops. `lost` aborts when a renewal finds the
 * lease taken (the process was paused past it): the process then stops polling the lane, and the
 * models it holds go to whoever consumes the lane, which rebuilds them (S4).
 */
export class WorkLane {
  readonly #controller = new AbortController();
  readonly #timer: NodeJS.Timeout;

  private constructor(
    readonly lane: number,
    readonly worker: string,
    private readonly store: WorkLaneStore,
    private readonly leaseMs: number,
    private readonly now: () => number,
  ) {
    this.#timer = setInterval(() => void this.#renew(), Math.max(1, Math.floor(leaseMs / 3)));
    this.#timer.unref();
  }

  /** The first lane this worker can lease, or undefined when all `lanes` are held by live workers. */
  static async acquire(
    store: WorkLaneStore,
    worker: string,
    options: { readonly lanes?: number; readonly leaseMs?: number; readonly now?: () => number } = {},
  ): Promise<WorkLane | undefined> {
    const lanes = options.lanes ?? WORK_LANES;
    const leaseMs = options.leaseMs ?? LANE_LEASE_MS;
    const now = options.now ?? Date.now;
    for (let lane = 0; lane < lanes; lane++) {
      if (await acquireLane(store.doc, store.registryTable, store.pool, lane, worker, now(), leaseMs)) {
        return new WorkLane(lane, worker, store, leaseMs, now);
      }
    }
    return undefined;
  }

  get lost(): AbortSignal {
    return this.#controller.signal;
  }

  /** Stops renewing and gives the lane back. */
  async release(): Promise<void> {
    clearInterval(this.#timer);
    if (this.#controller.signal.aborted) return;
    await releaseLane(
      this.store.doc,
      this.store.registryTable,
      this.store.pool,
      this.lane,
      this.worker,
    ).catch((error: unknown) =>
      logger.warn('work lane not given back; its lease expires', {
        lane: this.lane,
        error: error instanceof Error ? error.message : String(error),
      }),
    );
  }

  /** The process is dying without a word: stop renewing; the lease lapses for another worker. */
  abandon(): void {
    clearInterval(this.#timer);
  }

  async #renew(): Promise<void> {
    const { doc, registryTable, pool } = this.store;
    try {
      const held = await renewLane(
        doc,
        registryTable,
        pool,
        this.lane,
        this.worker,
        this.now() + this.leaseMs,
      );
      if (!held) {
        logger.warn('work lane taken by another worker; no longer polled', { lane: this.lane });
        clearInterval(this.#timer);
        this.#controller.abort();
      }
    } catch (error) {
      logger.warn('work lane renewal failed; retried at the next one', {
        lane: this.lane,
        error: error instanceof Error ? error.message : String(error),
      });
    }
  }
}
