/**
 * Pure split of a cut's rows into groups (P1), and of a group's items into BatchWriteItem calls.
 * Input order is kept, so a group holds calls that arrived together.
 */

export interface GroupLimits {
  /** At most this many rows a group (config `prefixGroupRows`). */
  readonly maxRows: number;
  /** At most this many tokens a group (config `prefixGroupTokens`); a larger row forms a group alone. */
  readonly maxTokens: number;
}

/** BatchWriteItem takes at most 25 put or delete requests a call. */
export const BATCH_WRITE_MAX_REQUESTS = 25;

export function groupRows<T>(rows: readonly T[], tokensOf: (row: T) => number, limits: GroupLimits): T[][] {
  if (limits.maxRows < 1 || limits.maxTokens < 1) throw new RangeError('group limits must be positive');
  const groups: T[][] = [];
  let current: T[] = [];
  let currentTokens = 0;
  for (const row of rows) {
    const tokens = tokensOf(row);
    if (tokens > limits.maxTokens) {
      // Oversized: alone, and the group in progress is closed so order is kept.
      if (current.length > 0) groups.push(current);
      groups.push([row]);
      current = [];
      currentTokens = 0;
      continue;
    }
    if (current.length >= limits.maxRows || currentTokens + tokens > limits.maxTokens) {
      groups.push(current);
      current = [];
      currentTokens = 0;
    }
    current.push(row);
    currentTokens += tokens;
  }
  if (current.length > 0) groups.push(current);
  return groups;
}

export function batchesOf<T>(items: readonly T[], size: number = BATCH_WRITE_MAX_REQUESTS): T[][] {
  if (size < 1) throw new RangeError('batch size must be positive');
  const batches: T[][] = [];
  for (let start = 0; start < items.length; start += size) batches.push(items.slice(start, start + size));
  return batches;
}
