import type { S3Client } from '@aws-sdk/client-s3';
import type { Backend } from '../../backend/backend.js';
import { storageKeys } from '../../base/storage-keys.js';
import { putBytes } from './blobs.js';
import type { StoredOutcome } from './commit-items.js';
import { type StoredState, writeStateBlob } from './state-blobs.js';
import type { StepResult } from './steps.js';

/**
 * Where a completed step's result goes: inline on the future row when its JSON is small, else to S3
 * under `results/<request_id>/<run>.json` (`result_key`; the run's own key, E3). Inline results of
 * one commit share a budget so the transaction stays under DynamoDB's 4 MB (E4). Inline results are the JSON text, a string attribute,
 * not a DynamoDB map: DynamoDB numbers cannot hold every float64 (above 2^53 the SDK refuses them,
 * below 1e-130 DynamoDB does), and one unstorable loss used to fail the whole model's commit.
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
  run: string,
  outcome: StepResult,
  placement: ResultPlacement,
  s3: S3Client,
  bucket: string,
): Promise<StoredOutcome> {
  if (outcome.status === 'failed') return outcome;
  const unrepresentable = firstNonFinite(outcome.result);
  if (unrepresentable !== undefined) {
    // JSON has no NaN or infinity: the step's own output cannot be answered, which is that step's
    // failure (E6, like any bad input found at execution), not the model's.
    return {
      status: 'failed',
      error: {
        message: `the step's result is not finite (${unrepresentable}); check the inputs' magnitudes and the learning rate`,
        category: 'user',
      },
    };
  }
  const json = JSON.stringify(outcome.result);
  const bytes = Buffer.byteLength(json);
  if (bytes <= placement.inlineMaxBytes && bytes <= placement.budget) {
    placement.budget -= bytes;
    return { status: 'completed', result: json };
  }
  const key = storageKeys.result(requestId, run);
  await putBytes(s3, bucket, key, json, true);
  return { status: 'completed', result_key: key };
}

/**
 * The path of the first NaN or infinite number in a result (typed arrays included), or undefined.
 * Walked with an explicit stack; results are the backend's, not a client's, but may be large.
 */
export function firstNonFinite(value: unknown): string | undefined {
  const pending: { value: unknown; path: string }[] = [{ value, path: 'result' }];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const member = next.value;
    if (typeof member === 'number') {
      if (!Number.isFinite(member)) return `${next.path} is ${member}`;
    } else if (member instanceof Float32Array || member instanceof Float64Array) {
      const index = member.findIndex((x) => !Number.isFinite(x));
      if (index >= 0) return `${next.path}.${index} is ${member[index]}`;
    } else if (Array.isArray(member)) {
      member.forEach((item, index) => {
        pending.push({ value: item, path: `${next.path}.${index}` });
      });
    } else if (typeof member === 'object' && member !== null && !ArrayBuffer.isView(member)) {
      for (const [key, item] of Object.entries(member))
        pending.push({ value: item, path: `${next.path}.${key}` });
    }
  }
  return undefined;
}

/**
 * The new model state under its run's key (E3: `state/<model>/<epoch>/<run>.bin`), written streamed
 * (./state-blobs.ts), with its bytes when small enough for the StateCache; undefined when no step
 * changed the state.
 */
export async function storeState(
  backend: Backend,
  s3: S3Client,
  bucket: string,
  modelId: string,
  epoch: number,
  run: string,
  part: {
    readonly state: Parameters<Backend['serializeState']>[0] | undefined;
    readonly stateChanged: boolean;
  },
): Promise<StoredState | undefined> {
  if (!part.stateChanged || part.state === undefined) return undefined;
  return writeStateBlob(backend, s3, bucket, storageKeys.modelState(modelId, epoch, run), part.state);
}
