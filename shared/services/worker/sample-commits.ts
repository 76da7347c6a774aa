import DataLoader from 'dataloader';
import { realSleep } from '../../aws/backoff.js';
import {
  type CommitStore,
  commitSamples,
  type SampleCommitRequest,
  type SampleCommitResult,
  type Sleep,
} from './commit.js';

/**
 * How long a sample's commit waits for others to share its transaction. Calls that share an
 * engine's decode steps (B1) end in the same step, within a millisecond or two of each other here.
 */
export const SAMPLE_COMMIT_WINDOW_MS = 2;

/**
 * Gathers the sample commits of one work item that arrive within `windowMs` of the first and runs
 * them together (`commitSamples`): one log position ADD and one transaction for up to 33 samples
 * instead of one each, with each sample's answer exactly its own commit's.
 */
export class SampleCommits {
  readonly #loader: DataLoader<SampleCommitRequest, SampleCommitResult>;

  constructor(store: CommitStore, windowMs = SAMPLE_COMMIT_WINDOW_MS, sleep: Sleep = realSleep) {
    this.#loader = new DataLoader<SampleCommitRequest, SampleCommitResult>(
      (requests) => commitSamples(requests, store, sleep),
      {
        cache: false,
        batchScheduleFn: (run) => (windowMs > 0 ? setTimeout(run, windowMs) : setImmediate(run)),
      },
    );
  }

  commit(request: SampleCommitRequest): Promise<SampleCommitResult> {
    return this.#loader.load(request);
  }
}
