import type { BackendState } from '../../backend/backend.js';
import { InfrastructureError } from '../../base/errors.js';
import {
  type ModelRow,
  type ReplayEntry,
  STATE_CHANGING_REQUEST_TYPES,
  type TrainingRequestType,
} from '../../domain/records.js';
import { readPayloads } from '../../repositories/payloads.js';
import { stepPayloadOf } from './load-work-item.js';
import { executeStep, type PartState, type StepEnv } from './steps.js';

/**
 * Rebuilding a committed state that this process does not hold (S4 of docs/design.md#s1): the row's
 * snapshot (`state_ref`), then the committed steps after it (`replay`) run again from their stored
 * payloads. Nothing is published: the outcomes are dropped, the futures keep what their commits
 * wrote. Replay is exact on the reference backend and within R1's tolerance on an engine.
 */

export function changesState(type: TrainingRequestType): boolean {
  return STATE_CHANGING_REQUEST_TYPES.has(type);
}

/**
 * Steps whose replay would depend on something other than their payload (a checkpoint's blob, which
 * its owner may delete): a commit that ran one writes a snapshot, so it is never replayed.
 */
export function forcesSnapshot(type: TrainingRequestType): boolean {
  return type === 'load_weights' || type === 'save_weights';
}

/** How the state was obtained, for logs and tests. */
export interface Rebuilt {
  readonly state: BackendState | undefined;
  readonly replayed: number;
}

/**
 * The state after the row's `applied_through`: its snapshot loaded by `load` (undefined before
 * create_model committed), then its replay log. Throws `InfrastructureError` when a payload cannot
 * be read or a replayed step fails: the work item is re-planned (E6), the row unchanged.
 */
export async function rebuildState(
  row: Pick<ModelRow, 'model_id' | 'state_ref' | 'replay' | 'applied_through'>,
  load: (key: string) => Promise<BackendState>,
  env: StepEnv,
): Promise<Rebuilt> {
  const entries: readonly ReplayEntry[] = row.replay ?? [];
  const [base, reads] = await Promise.all([
    row.state_ref === undefined ? Promise.resolve(undefined) : load(row.state_ref),
    entries.length === 0
      ? undefined
      : readPayloads(
          env.clients.s3,
          env.bucket,
          entries.map((entry) => entry.request_id),
        ),
  ]);
  const part: PartState = { state: base, stateChanged: false, unloaded: false, saved: new Map() };
  for (const entry of entries) {
    if (entry.seq > row.applied_through) {
      throw new InfrastructureError(
        `model ${row.model_id}: replay entry ${entry.seq} is past applied_through`,
        {
          context: { model_id: row.model_id, seq: entry.seq },
        },
      );
    }
    const payload = reads?.payloads.get(entry.request_id);
    if (payload === undefined) {
      throw new InfrastructureError(
        `model ${row.model_id}: the payload of step ${entry.seq} to replay is unreadable`,
        {
          context: { model_id: row.model_id, request_id: entry.request_id },
        },
      );
    }
    const execution = await executeStep(
      {
        request_id: entry.request_id,
        seq: entry.seq,
        request_type: entry.request_type,
        payload: stepPayloadOf(payload),
      },
      part,
      env,
    );
    if (execution.outcome.status !== 'completed') {
      throw new InfrastructureError(
        `model ${row.model_id}: replaying step ${entry.seq} (${entry.request_type}) failed: ${execution.outcome.error.message}`,
        { context: { model_id: row.model_id, request_id: entry.request_id } },
      );
    }
  }
  return { state: part.state, replayed: entries.length };
}
