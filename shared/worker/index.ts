/**
 * The worker runtime: executes work items through a `Backend` and commits each model (E1-E7). Two
 * drivers share it: `functions/worker/handler.ts` (SQS-triggered Lambda) and `local/worker-process.ts`
 * (a long-running process for GPU hosts, `npm run worker`).
 */
export { type CommitResult, commitModel, commitSample } from './commit.js';
export {
  type CommitTransaction,
  commitToken,
  type ModelCommit,
  modelCommitTransaction,
  type StepCommit,
  type StoredOutcome,
  sampleCommitTransaction,
} from './commit-items.js';
export { LeaseKeeper, LeaseLostError, releaseForReplan, renewLease } from './lease.js';
export { loadWorkItem, parseManifest, type WorkSource } from './load-work-item.js';
export { describeVerdict, type MessageVerdict, processWorkMessage } from './message.js';
export { PassBatcher } from './pass-batcher.js';
export * as results from './results.js';
export { runWorkItem } from './runtime.js';
export type {
  ModelOutcome,
  PartOutcome,
  SampleOutcome,
  WorkerClients,
  WorkerEvent,
  WorkerOptions,
  WorkItemOutcome,
} from './types.js';
