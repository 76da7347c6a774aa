import { parseRunKey } from '../../shared/base/storage-keys.js';
import { type FutureRow, type ModelRow, STATE_CHANGING_REQUEST_TYPES } from '../../shared/domain/records.js';
import { reportedStateTag, stateTagOf } from '../../test/support/noisy-backend.js';

/**
 * E3-E5 on a non-deterministic backend (`NoisyBackend`): every committed model row's `state_ref` is
 * readable, and the state it names is the one its results were produced with. Each state the noisy
 * backend makes carries a fresh tag, and each forward_backward and optim_step reports the tag of the
 * state it produced; so the state under `state_ref` must carry the tag that the model's last
 * completed state-changing step reports. A losing run's PUT landing on the committed key after the
 * winner's commit (what same-key writes allowed) shows as a mismatch. Models whose last
 * state-changing step reports no tag (create_model, load_weights) are only checked for readability.
 * With resident state (S3) the row's `state_ref` is a snapshot: it is compared with the last
 * state-changing step at or before `snapshot_through`, when the run that wrote it ran that step.
 */
export interface LineageReport {
  /** Model rows that name a state. */
  readonly models_checked: number;
  readonly states_readable: number;
  /** Models whose state tag was compared with their last state-changing step's. */
  readonly tags_compared: number;
  readonly unreadable: readonly string[];
  readonly mismatched: readonly string[];
}

export async function checkLineage(input: {
  readonly models: ReadonlyMap<string, ModelRow>;
  readonly futures: ReadonlyMap<string, FutureRow>;
  /** An object's bytes, or undefined when it is missing. */
  readonly readBlob: (key: string) => Promise<Uint8Array | undefined>;
  /** A completed row's result (inline or under its `result_key`). */
  readonly readResult: (row: FutureRow) => Promise<unknown>;
}): Promise<LineageReport> {
  const lastStateStep = new Map<string, FutureRow>();
  for (const row of input.futures.values()) {
    if (
      row.status !== 'completed' ||
      row.seq === undefined ||
      !STATE_CHANGING_REQUEST_TYPES.has(row.request_type)
    )
      continue;
    const model = input.models.get(row.model_id);
    // The snapshot is the state after `snapshot_through` (S3); later steps are in the replay log.
    if (model === undefined || row.seq > (model.snapshot_through ?? model.applied_through)) continue;
    const last = lastStateStep.get(row.model_id);
    if (last === undefined || (last.seq ?? 0) < row.seq) lastStateStep.set(row.model_id, row);
  }
  let checked = 0;
  let readable = 0;
  let compared = 0;
  const unreadable: string[] = [];
  const mismatched: string[] = [];
  for (const model of input.models.values()) {
    if (model.state_ref === undefined) continue;
    checked++;
    const bytes = await input.readBlob(model.state_ref);
    const tag = bytes === undefined ? undefined : stateTagOf(bytes);
    if (tag === undefined) {
      unreadable.push(
        `${model.model_id}: ${model.state_ref}${bytes === undefined ? ' missing' : ' not a noisy state'}`,
      );
      continue;
    }
    readable++;
    const step = lastStateStep.get(model.model_id);
    if (step === undefined) continue;
    // Only a snapshot written by the run that ran the step carries that step's state: a holder's
    // let-go snapshot, or one written after rebuilding by replay (S4: a noisy replay draws fresh
    // tags), holds the same model state under another tag.
    if (step.run !== undefined && parseRunKey(model.state_ref)?.run !== step.run) continue;
    const reported = reportedStateTag(await input.readResult(step));
    if (reported === undefined) continue;
    compared++;
    if (reported !== tag) {
      mismatched.push(
        `${model.model_id}: ${model.state_ref} holds state ${tag}, its seq ${step.seq} (${step.request_type}) reported ${reported}`,
      );
    }
  }
  return {
    models_checked: checked,
    states_readable: readable,
    tags_compared: compared,
    unreadable,
    mismatched,
  };
}
