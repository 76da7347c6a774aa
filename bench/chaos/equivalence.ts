import { isDeepStrictEqual } from 'node:util';
import { Limiter } from '../../shared/aws/limiter.js';
import type {
  AdamParams,
  BackendState,
  ForwardBackwardInput,
  WeightsKind,
} from '../../shared/backend/backend.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { StepUserError } from '../../shared/base/errors.js';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import type { FutureRow } from '../../shared/domain/records.js';
import { type Answer, BASE_MODEL, WorkerHarness } from '../../test/support/worker-harness.js';

/**
 * R1, checked as the end-to-end suite checks it: every request's answer over HTTP equals what the
 * worker harness's sequential oracle gives (each model's requests run one at a time, in submit order,
 * directly on a fresh reference backend), bit-exact; and every checkpoint blob the system saved (each
 * model's final weights among them) equals the oracle's bytes for that save.
 *
 * A request ended with a server error has no effect in the oracle either; each such failure must be
 * one E2 allows (a model's attempts exhausted), else it is a violation of its own.
 */

/**
 * What the oracle reads: the submissions in submit order and the sampling sessions' targets; and the
 * base model the tenants create their models on (the reference backend's).
 */
export type OracleRecord = Pick<WorkerHarness, 'submissions' | 'samplingTargets' | 'baseModel'>;

export function newOracleRecord(): OracleRecord {
  return { submissions: [], samplingTargets: new Map(), baseModel: BASE_MODEL };
}

/** The harness's oracle, run over a record rather than a harness (it reads nothing else). */
function runOracle(
  record: OracleRecord,
  options: Parameters<WorkerHarness['oracle']>[0],
): Promise<Map<string, Answer>> {
  return WorkerHarness.prototype.oracle.call(record as WorkerHarness, options);
}

/**
 * The oracle's reference backend, keeping every exported checkpoint in call order. A model whose
 * create_model ended with a server error (E2) has no state; its later steps fail as the worker fails
 * them (a user error naming the missing weights), which the harness's oracle leaves to the backend.
 */
class OracleBackend extends ReferenceBackend {
  readonly exports: Uint8Array[] = [];

  override async forward(state: BackendState, input: ForwardBackwardInput) {
    return super.forward(stateOf(state), input);
  }
  override async forwardBackward(state: BackendState, input: ForwardBackwardInput) {
    return super.forwardBackward(stateOf(state), input);
  }
  override async optimStep(state: BackendState, params: AdamParams) {
    return super.optimStep(stateOf(state), params);
  }
  override async importWeights(state: BackendState, bytes: Uint8Array, options: { optimizer: boolean }) {
    return super.importWeights(stateOf(state), bytes, options);
  }
  override async exportWeights(state: BackendState, kind: WeightsKind): Promise<Uint8Array> {
    const bytes = await super.exportWeights(stateOf(state), kind);
    this.exports.push(bytes);
    return bytes;
  }
}

function stateOf(state: BackendState | undefined): BackendState {
  if (state === undefined)
    throw new StepUserError('the model has no weights: its create_model did not succeed');
  return state;
}

/** retrieve_future over HTTP for every submission, by its tenant; a failure reduced to its category. */
export async function answersOverHttp(
  record: OracleRecord,
  clientOf: (requestId: string) => TinkerClient,
): Promise<Map<string, Answer>> {
  const limiter = new Limiter(8);
  const answered = await Promise.all(
    record.submissions.map((submission) =>
      limiter.run(async (): Promise<[string, Answer]> => {
        const answer = await clientOf(submission.request_id).raw('POST', '/api/v1/retrieve_future', {
          request_id: submission.request_id,
        });
        if (answer.status !== 200) {
          return [submission.request_id, { http_status: answer.status, body: answer.body }];
        }
        const body = answer.body as Record<string, unknown>;
        return [
          submission.request_id,
          'error' in body && 'category' in body ? { category: body.category } : body,
        ];
      }),
    ),
  );
  return new Map(answered);
}

export interface Mismatch {
  readonly request_id: string;
  readonly kind: string;
  readonly got: string;
  readonly expected: string;
}

export interface EquivalenceReport {
  readonly equivalent: boolean;
  readonly compared: number;
  readonly mismatches: readonly Mismatch[];
  /** Requests ended with a server error, and those E2 does not explain. */
  readonly server_failed: number;
  /** The first few, as `<kind> <request_id>: <message>`. */
  readonly server_failed_examples: readonly string[];
  readonly server_failed_unexplained: readonly string[];
  readonly checkpoints_compared: number;
  readonly checkpoint_mismatches: readonly string[];
}

const ATTEMPTS_EXHAUSTED = /^Request failed after \d+ attempts$/;
const clip = (value: unknown) => JSON.stringify(value)?.slice(0, 300) ?? 'undefined';

export async function checkEquivalence(input: {
  readonly record: OracleRecord;
  readonly answers: ReadonlyMap<string, Answer>;
  readonly futures: ReadonlyMap<string, FutureRow>;
  /** A blob the system wrote, or undefined when it is missing. */
  readonly readBlob: (key: string) => Promise<Uint8Array | undefined>;
  /** The blob key a save's committed name record names (E3), by request id. */
  readonly checkpointBlobKey: (requestId: string) => string | undefined;
}): Promise<EquivalenceReport> {
  const { record, answers, futures } = input;
  const serverFailed = new Set<string>();
  const unexplained: string[] = [];
  const examples: string[] = [];
  for (const submission of record.submissions) {
    const error = futures.get(submission.request_id)?.error;
    if (error?.category !== 'server') continue;
    serverFailed.add(submission.request_id);
    if (examples.length < 10) examples.push(`${submission.kind} ${submission.request_id}: ${error.message}`);
    if (!ATTEMPTS_EXHAUSTED.test(error.message))
      unexplained.push(`${submission.request_id}: ${error.message}`);
  }
  const backend = new OracleBackend();
  const expected = await runOracle(record, { serverFailed, backend });

  const mismatches: Mismatch[] = [];
  for (const submission of record.submissions) {
    const got = answers.get(submission.request_id);
    const want = expected.get(submission.request_id);
    if (!isDeepStrictEqual(got, want)) {
      mismatches.push({
        request_id: submission.request_id,
        kind: submission.kind,
        got: clip(got),
        expected: clip(want),
      });
    }
  }

  // Saves the oracle completed exported their bytes in submit order.
  const exports = [...backend.exports];
  const checkpointMismatches: string[] = [];
  let checkpoints = 0;
  for (const submission of record.submissions) {
    if (submission.kind !== 'save_weights' && submission.kind !== 'save_weights_for_sampler') continue;
    if ('category' in (expected.get(submission.request_id) as object)) continue;
    const bytes = exports.shift();
    const key = input.checkpointBlobKey(submission.request_id);
    const saved = key === undefined ? undefined : await input.readBlob(key);
    checkpoints++;
    if (bytes === undefined || saved === undefined || !Buffer.from(bytes).equals(Buffer.from(saved))) {
      checkpointMismatches.push(
        `${submission.request_id} (${key ?? 'no committed name record'}${saved === undefined ? ', missing' : ''})`,
      );
    }
  }

  return {
    equivalent: mismatches.length === 0 && checkpointMismatches.length === 0 && unexplained.length === 0,
    compared: record.submissions.length,
    mismatches,
    server_failed: serverFailed.size,
    server_failed_examples: examples,
    server_failed_unexplained: unexplained,
    checkpoints_compared: checkpoints,
    checkpoint_mismatches: checkpointMismatches,
  };
}
