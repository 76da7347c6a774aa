import type { S3Client } from '@aws-sdk/client-s3';
import type { Backend } from '../backend/backend.js';
import { storageKeys } from '../storage-keys.js';
import { putBytes } from './blobs.js';
import type { StoredOutcome } from './commit-items.js';
import { toJson } from './results.js';
import type { StepResult } from './steps.js';

/**
 * Where a completed step's result goes: inline on the future row when its JSON is small, else to S3
 * under `results/<request_id>.json` (`result_key`). Inline results of one commit share a budget so the
 * transaction stays under DynamoDB's 4 MB (E4).
 */
export const COMMIT_INLINE_BUDGET_BYTES = 2 * 1024 * 1024;

export interface ResultPlacement {
  readonly inlineMaxBytes: number;
  /** Inline bytes still available to this commit; decremented as results are placed inline. */
  budget: number;
}

/** Decides and, for large results, writes. Pure apart from the PUT. */
export async function storeOutcome(
  requestId: string,
  outcome: StepResult,
  placement: ResultPlacement,
  s3: S3Client,
): Promise<StoredOutcome> {
  if (outcome.status === 'failed') return outcome;
  const json = JSON.stringify(outcome.result);
  const bytes = Buffer.byteLength(json);
  if (bytes <= placement.inlineMaxBytes && bytes <= placement.budget) {
    placement.budget -= bytes;
    return { status: 'completed', result: toJson(outcome.result) };
  }
  const key = storageKeys.result(requestId);
  await putBytes(s3, key, json, true);
  return { status: 'completed', result_key: key };
}

/** The new model state under its fenced key (E3); undefined when no step changed the state. */
export async function storeState(
  backend: Backend,
  s3: S3Client,
  modelId: string,
  epoch: number,
  part: {
    readonly state: Parameters<Backend['serializeState']>[0] | undefined;
    readonly stateChanged: boolean;
  },
): Promise<string | undefined> {
  if (!part.stateChanged || part.state === undefined) return undefined;
  const key = storageKeys.modelState(modelId, epoch);
  await putBytes(s3, key, await backend.serializeState(part.state));
  return key;
}
