/** Public surface of the prefix checkpoint store. */
export { type BackoffPolicy, type Clock, DEFAULT_BACKOFF, realClock } from './backoff.js';
export { DEFAULT_MAX_ITEM_BYTES, type EncodedCutRow, encodeCutRow } from './codec/cut-row.js';
export { PrefixCorruptError } from './errors.js';
export { abortGroup, commitGroup, type GroupOutcome, readGroupRecord } from './group-commit.js';
export { type GroupLimits, groupRows } from './grouping.js';
export type { CutReport, CutSave, GroupReport, SaveCutOptions } from './save-cut.js';
export {
  createPrefixStore,
  DEFAULT_PREFIX_TTL_SECONDS,
  type PrefixStore,
  type PrefixStoreOptions,
} from './store.js';
export type * from './types.js';
