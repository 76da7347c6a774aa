import type { S3Client } from '@aws-sdk/client-s3';
import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { awsClients } from '../../aws/clients.js';
import type { Backend, BackendState } from '../../backend/backend.js';
import { config } from '../../base/config.js';
import { mintRunId } from '../../base/ids.js';
import { logger } from '../../base/logger.js';
import type { ModelHolder } from '../../domain/records.js';
import { letGoModel, readModelRow, renewHold } from '../../repositories/models.js';
import { storeState } from './outputs.js';

/**
 * Resident model states (S1 and S3 of docs/design.md#s1): the states a worker process keeps in its
 * backend between work items, so a step's commit records results and `applied_through`, never state
 * bytes. One per process (a GPU host's `npm run worker`, the local engine stack), shared by every work
 * item it runs; the Lambda worker has none (it holds nothing between invocations) and writes the whole
 * state at every commit.
 *
 * Soundness: an entry is kept only after its work item's commit landed, and is used only by a work
 * item whose `base_applied_through` equals the entry's: every commit advances `applied_through`, so
 * equality means no other worker committed the model since, and the entry is exactly the committed
 * state (E3-E5 unchanged). A work item takes its entry out while it runs (one owner per state); a
 * miss rebuilds the state from the snapshot and the replay log (./recovery.ts, S4).
 *
 * Letting go (idle for `holdIdleMs`, over `maxModels`, drain and SIGTERM through `letGoAll`) writes a
 * snapshot when steps were committed since the last one and clears `holder` on condition that this
 * process still holds the model at the same `applied_through` (a fenced, conditional write like E4).
 */
export interface ResidencyPolicy {
  /** Models kept at most; the least recently used is let go first (0: no residency). */
  readonly maxModels: number;
  /** Snapshot at the commit that brings the replay log to this many steps. */
  readonly snapshotEverySteps: number;
  /** ... or at the first commit this long after the oldest step not in a snapshot. */
  readonly snapshotEveryMs: number;
  /** Let go of a model not used for this long. */
  readonly idleMs: number;
  /** `holder_until` is set this far ahead; renewed every third of it. */
  readonly holdMs: number;
}

/** The policy of `config().tunables` (docs/configuration.md#resident-state). */
export function configuredResidencyPolicy(): ResidencyPolicy {
  const { tunables } = config();
  return {
    maxModels: tunables.residentModels,
    snapshotEverySteps: tunables.snapshotEverySteps,
    snapshotEveryMs: tunables.snapshotEverySeconds * 1000,
    idleMs: tunables.holdIdleSeconds * 1000,
    holdMs: tunables.holdSeconds * 1000,
  };
}

/** The configured models table and bucket, through the process's clients. */
export function configuredResidencyStore(): ResidencyStore {
  const { doc, s3 } = awsClients();
  return { doc, s3, modelsTable: config().table('models'), bucket: config().bucket };
}

/** One resident model: its state after `appliedThrough`, as committed by this process. */
export interface ResidentModel {
  readonly modelId: string;
  readonly state: BackendState;
  readonly appliedThrough: number;
  /** The epoch of the commit that left it here: a let-go snapshot's key is under it (E3). */
  readonly epoch: number;
  /** Steps in the row's replay log (committed since the row's snapshot). */
  readonly replayLength: number;
  /** When the oldest of those was committed; undefined when the log is empty. */
  readonly unsnapshottedSince: number | undefined;
  lastUsed: number;
}

/** Where residency writes: the models table, the bucket and their clients, resolved by the driver. */
export interface ResidencyStore {
  readonly doc: DynamoDBDocumentClient;
  readonly s3: S3Client;
  readonly modelsTable: string;
  readonly bucket: string;
}

export interface ResidencyCounters {
  /** Work items that found their model's state resident. */
  hits: number;
  /** Work items that rebuilt it (snapshot + replay). */
  misses: number;
  /** Let-goes, and the snapshots they wrote. */
  let_go: number;
  let_go_snapshots: number;
  /** Holds found taken by another worker (renewal or let-go condition failed). */
  lost: number;
}

export class Residency {
  /** This process's holder id: unique per process start, so a restarted worker holds nothing. */
  readonly holder: ModelHolder;
  readonly counters: ResidencyCounters = { hits: 0, misses: 0, let_go: 0, let_go_snapshots: 0, lost: 0 };
  readonly #models = new Map<string, ResidentModel>();
  /** Let-goes in progress, so `letGoAll` waits for them too. */
  readonly #letting = new Set<Promise<void>>();
  readonly #timer: NodeJS.Timeout | undefined;
  #stopped = false;

  readonly #store: ResidencyStore | (() => ResidencyStore);

  /**
   * `store`: where let-goes and renewals write; a function is called at the first write (a driver
   * that builds its residency before its environment is set), default: the configured table and
   * bucket through the process's clients.
   */
  constructor(
    readonly backend: Backend,
    store: ResidencyStore | (() => ResidencyStore) = configuredResidencyStore,
    readonly policy: ResidencyPolicy = configuredResidencyPolicy(),
    options: { readonly lane?: number; readonly worker?: string; readonly now?: () => number } = {},
  ) {
    this.#store = store;
    this.holder = {
      worker: options.worker ?? `w-${mintRunId()}`,
      ...(options.lane === undefined ? {} : { lane: options.lane }),
    };
    this.now = options.now ?? Date.now;
    if (policy.maxModels > 0) {
      this.#timer = setInterval(() => void this.maintain(), Math.max(1, Math.floor(policy.holdMs / 3)));
      this.#timer.unref();
    }
  }

  readonly now: () => number;

  get enabled(): boolean {
    return this.policy.maxModels > 0 && !this.#stopped;
  }

  get size(): number {
    return this.#models.size;
  }

  /** Whether the model is held now (its entry may still be stale for a given work item). */
  has(modelId: string): boolean {
    return this.#models.has(modelId);
  }

  /** The models held now (for tests and logs). */
  heldModels(): string[] {
    return [...this.#models.keys()];
  }

  /**
   * The model's resident state if it is the committed state after `baseAppliedThrough`, taken out
   * (the work item owns it until its commit); undefined otherwise. A stale entry is dropped.
   */
  take(modelId: string, baseAppliedThrough: number): ResidentModel | undefined {
    const entry = this.#models.get(modelId);
    if (entry === undefined) {
      this.counters.misses += 1;
      return undefined;
    }
    this.#models.delete(modelId);
    const usable = entry.appliedThrough === baseAppliedThrough && (this.backend.holds?.(entry.state) ?? true);
    if (!usable) {
      this.counters.misses += 1;
      this.backend.release?.(entry.state);
      return undefined;
    }
    this.counters.hits += 1;
    return entry;
  }

  /** Whether the commit about to be made should carry a snapshot (S3's count and age triggers). */
  snapshotDue(replayLength: number, unsnapshottedSince: number | undefined): boolean {
    if (replayLength >= this.policy.snapshotEverySteps) return true;
    return unsnapshottedSince !== undefined && this.now() - unsnapshottedSince >= this.policy.snapshotEveryMs;
  }

  /** `holder_until` for a commit made now. */
  holdUntil(): number {
    return this.now() + this.policy.holdMs;
  }

  /** After the model's commit landed: keep its state; past `maxModels`, let go of the least recently used. */
  keep(entry: Omit<ResidentModel, 'lastUsed'>): void {
    if (!this.enabled) {
      this.backend.release?.(entry.state);
      return;
    }
    const previous = this.#models.get(entry.modelId);
    if (previous !== undefined && previous.state !== entry.state) this.backend.release?.(previous.state);
    this.#models.delete(entry.modelId);
    this.#models.set(entry.modelId, { ...entry, lastUsed: this.now() });
    for (const [modelId] of this.#models) {
      if (this.#models.size <= this.policy.maxModels) break;
      this.#startLetGo(modelId, 'evicted');
    }
  }

  /** A work item's state that will not be kept (its part failed, or the model was unloaded). */
  discard(state: BackendState | undefined): void {
    if (state !== undefined) this.backend.release?.(state);
  }

  /** Renews the holds and lets go of idle models; runs on the timer, callable by tests. */
  async maintain(): Promise<void> {
    if (this.#stopped) return;
    const now = this.now();
    const until = now + this.policy.holdMs;
    const renewals: Promise<void>[] = [];
    for (const entry of [...this.#models.values()]) {
      if (now - entry.lastUsed >= this.policy.idleMs) {
        this.#startLetGo(entry.modelId, 'idle');
        continue;
      }
      renewals.push(
        renewHold(this.store.doc, this.store.modelsTable, entry.modelId, this.holder.worker, until).then(
          (held) => {
            if (held || this.#models.get(entry.modelId) !== entry) return;
            // Another worker committed the model: what this process holds is no longer its state.
            this.counters.lost += 1;
            this.#models.delete(entry.modelId);
            this.backend.release?.(entry.state);
          },
          (error: unknown) =>
            logger.warn('hold renewal failed; retried at the next renewal', {
              model_id: entry.modelId,
              error: error instanceof Error ? error.message : String(error),
            }),
        ),
      );
    }
    await Promise.all(renewals);
  }

  /**
   * Lets go of every model (drain, SIGTERM, shutdown): snapshots what the rows do not have yet and
   * clears the holds, so another worker resumes from the snapshot without replaying. Stops the timer;
   * what is kept afterwards is let go at once.
   */
  async letGoAll(): Promise<void> {
    this.#stopped = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    for (const modelId of [...this.#models.keys()]) this.#startLetGo(modelId, 'shutdown');
    while (this.#letting.size > 0) await Promise.allSettled([...this.#letting]);
  }

  /**
   * The process is dying without a word (a kill, a crash): stop renewing and forget what it holds,
   * writing nothing. Its holds lapse after `holdMs` and the next worker rebuilds by replay (S4).
   */
  abandon(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#models.clear();
  }

  #startLetGo(modelId: string, reason: string): void {
    const entry = this.#models.get(modelId);
    if (entry === undefined) return;
    this.#models.delete(modelId);
    const done = this.#letGo(entry, reason).finally(() => this.#letting.delete(done));
    this.#letting.add(done);
  }

  get store(): ResidencyStore {
    return typeof this.#store === 'function' ? this.#store() : this.#store;
  }

  async #letGo(entry: ResidentModel, reason: string): Promise<void> {
    const { store } = this;
    try {
      // A hold another worker took since is dropped without writing a snapshot nobody would name.
      const current = await readModelRow(store.doc, store.modelsTable, entry.modelId);
      if (
        current?.holder?.worker !== this.holder.worker ||
        current.applied_through !== entry.appliedThrough
      ) {
        this.counters.lost += 1;
        return;
      }
      let stateRef: string | undefined;
      if (entry.replayLength > 0) {
        // Under this process's own run key for the commit's epoch (E3): unique to this holder and seq.
        const stored = await storeState(
          this.backend,
          store.s3,
          store.bucket,
          entry.modelId,
          entry.epoch,
          `${this.holder.worker}.t${entry.appliedThrough}`,
          { state: entry.state, stateChanged: true },
        );
        stateRef = stored?.key;
        this.counters.let_go_snapshots += 1;
      }
      const landed = await letGoModel(store.doc, store.modelsTable, {
        model_id: entry.modelId,
        worker: this.holder.worker,
        applied_through: entry.appliedThrough,
        ...(stateRef === undefined ? {} : { state_ref: stateRef }),
      });
      if (landed) this.counters.let_go += 1;
      else this.counters.lost += 1;
      logger.info('resident model let go', {
        model_id: entry.modelId,
        reason,
        applied_through: entry.appliedThrough,
        snapshot: stateRef ?? 'current',
        landed,
      });
    } catch (error) {
      // The row keeps its snapshot and replay log: whoever takes the model next rebuilds it (S4).
      logger.warn('letting go of a resident model failed; its log still rebuilds it', {
        model_id: entry.modelId,
        reason,
        error: error instanceof Error ? error.message : String(error),
      });
    } finally {
      this.backend.release?.(entry.state);
    }
  }
}
