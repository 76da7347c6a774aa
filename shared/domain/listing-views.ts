import type { CheckpointKind } from './records.js';
import { formatCheckpointPath } from './tinker-path.js';

/**
 * The answers of the listing routes (docs/design.md#c1), shaped as the SDK parses them (TrainingRun,
 * Checkpoint, Cursor), and the offset paging they share. Pure.
 */

/** What a listing index row holds of a checkpoint (its projected attributes). */
export interface CheckpointRow {
  readonly model_id: string;
  readonly kind: CheckpointKind;
  readonly name: string;
  readonly created_at: number;
  readonly expires_at?: number;
  readonly public?: boolean;
  readonly size_bytes?: number;
  /** From the name record itself (never projected into the listing indexes): see `withCheckpointMetadata`. */
  readonly user_metadata?: Readonly<Record<string, string>>;
}

export interface CheckpointView {
  readonly checkpoint_id: string;
  readonly checkpoint_type: 'training' | 'sampler';
  readonly time: string;
  readonly tinker_path: string;
  readonly size_bytes: number | null;
  readonly public: boolean;
  readonly expires_at: string | null;
  /** Only when the save gave it (SDK releases after 0.25.0; older ones ignore extra fields). */
  readonly user_metadata?: Readonly<Record<string, string>>;
}

export interface Cursor {
  readonly offset: number;
  readonly limit: number;
  readonly total_count: number;
}

/** Times go out timezone-aware (the SDK's CLI compares them with aware datetimes): ISO 8601 with Z. */
export function isoTime(ms: number): string {
  return new Date(ms).toISOString();
}

const KIND_ID: Readonly<Record<CheckpointKind, string>> = { weights: 'weights', sampler: 'sampler_weights' };

/** `checkpoint_id` as the SDK forms it from a path: `weights/<name>` or `sampler_weights/<name>`. */
export function checkpointId(kind: CheckpointKind, name: string): string {
  return `${KIND_ID[kind]}/${name}`;
}

export function checkpointView(row: CheckpointRow): CheckpointView {
  return {
    checkpoint_id: checkpointId(row.kind, row.name),
    checkpoint_type: row.kind === 'weights' ? 'training' : 'sampler',
    time: isoTime(row.created_at),
    tinker_path: formatCheckpointPath({ modelId: row.model_id, kind: row.kind, name: row.name }),
    size_bytes: row.size_bytes ?? null,
    public: row.public === true,
    expires_at: row.expires_at === undefined ? null : isoTime(row.expires_at),
    ...(row.user_metadata === undefined ? {} : { user_metadata: row.user_metadata }),
  };
}

/** What a TrainingRun is built from: the model row's fixed fields and its seq counter's last submit. */
export interface RunFacts {
  readonly model_id: string;
  readonly tenant: string;
  readonly base_model: string;
  readonly lora_rank: number;
  readonly created_at: number;
  /** The seq counter's `updated_at`: when the run's last training request was submitted. */
  readonly last_request_at?: number;
  readonly user_metadata?: Readonly<Record<string, unknown>>;
}

export interface TrainingRunView {
  readonly training_run_id: string;
  readonly base_model: string;
  readonly model_owner: string;
  readonly is_lora: true;
  readonly corrupted: false;
  readonly lora_rank: number;
  readonly last_request_time: string;
  readonly last_checkpoint: CheckpointView | null;
  readonly last_sampler_checkpoint: CheckpointView | null;
  readonly user_metadata: Readonly<Record<string, string>> | null;
}

export interface LatestCheckpoints {
  readonly weights?: CheckpointRow;
  readonly sampler?: CheckpointRow;
}

export function trainingRunView(run: RunFacts, latest: LatestCheckpoints): TrainingRunView {
  return {
    training_run_id: run.model_id,
    base_model: run.base_model,
    model_owner: run.tenant,
    is_lora: true,
    corrupted: false,
    lora_rank: run.lora_rank,
    last_request_time: isoTime(run.last_request_at ?? run.created_at),
    last_checkpoint: latest.weights === undefined ? null : checkpointView(latest.weights),
    last_sampler_checkpoint: latest.sampler === undefined ? null : checkpointView(latest.sampler),
    user_metadata: run.user_metadata === undefined ? null : stringMetadata(run.user_metadata),
  };
}

/**
 * The SDK types `TrainingRun.user_metadata` as `dict[str, str]` though create_model takes any JSON
 * values: strings are kept, anything else is sent as its JSON text.
 */
export function stringMetadata(metadata: Readonly<Record<string, unknown>>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(metadata).map(([key, value]) => [
      key,
      typeof value === 'string' ? value : JSON.stringify(value),
    ]),
  );
}

/** The newest row of each kind, from rows newest first. */
export function latestOfEachKind(rowsNewestFirst: readonly CheckpointRow[]): LatestCheckpoints {
  const weights = rowsNewestFirst.find((row) => row.kind === 'weights');
  const sampler = rowsNewestFirst.find((row) => row.kind === 'sampler');
  return { ...(weights ? { weights } : {}), ...(sampler ? { sampler } : {}) };
}

export interface PageRequest {
  readonly limit: number;
  readonly offset: number;
}

/** Offset paging over the whole ordered list: the page's items and the cursor the SDK reads. */
export function pageOf<T>(all: readonly T[], page: PageRequest): { items: T[]; cursor: Cursor } {
  return {
    items: all.slice(page.offset, page.offset + page.limit),
    cursor: { offset: page.offset, limit: page.limit, total_count: all.length },
  };
}
