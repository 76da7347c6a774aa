/**
 * The worker runtime: executes work items through a `Backend` and commits each model (E1-E7). Two
 * drivers share it: `functions/worker/handler.ts` (SQS-triggered Lambda) and `bin/worker.ts`
 * (a long-running process for GPU hosts, `npm run worker`).
 */
export { type CommitResult, commitModel, commitSample, returnSampleToPending } from './commit.js';
export {
  type CommitTransaction,
  commitToken,
  type ModelCommit,
  modelCommitTransaction,
  type StepCommit,
  type StoredOutcome,
  sampleCommitTransaction,
  sampleCutTransaction,
} from './commit-items.js';
export { DEFAULT_CUT_POLL_MS, WorkItemCut } from './cut.js';
export { LeaseKeeper, LeaseLostError, releaseForReplan } from './lease.js';
export { loadWorkItem, parseManifest, type WorkSource } from './load-work-item.js';
export { describeVerdict, type MessageVerdict, processWorkMessage } from './message.js';
export { PassBatcher } from './pass-batcher.js';
export * as results from './results.js';
export { DEFAULT_CUT_SAVE_MS, DEFAULT_SLICE_TOKENS, runWorkItem } from './runtime.js';
export { parsePrefixRef, sequenceCallId } from './sample-resume.js';
export {
  CUT_SAVE_MARGIN_MS,
  DEFAULT_DEADLINE_MARGINS,
  type DeadlineMargins,
  DeadlineStop,
  GraceStop,
  type StopOptions,
  type StopTimers,
} from './stop-policy.js';
export type {
  ModelOutcome,
  PartOutcome,
  SampleCutReport,
  SampleOutcome,
  SequenceStartReport,
  WorkerClients,
  WorkerEvent,
  WorkerOptions,
  WorkItemOutcome,
} from './types.js';
