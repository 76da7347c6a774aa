/**
 * Which items of a batch failed, read from a handler's `{ batchItemFailures }` answer the way Lambda
 * reads it: no answer or an empty list is success; an entry without a usable `itemIdentifier`, or
 * one naming no item of the batch, fails the whole batch.
 */
export function failedItems(result: unknown, batchIds: readonly string[]): 'all' | ReadonlySet<string> {
  if (typeof result !== 'object' || result === null || !('batchItemFailures' in result)) return new Set();
  const failures = result.batchItemFailures;
  if (failures === null || failures === undefined) return new Set();
  if (!Array.isArray(failures)) return 'all';
  const known = new Set(batchIds);
  const failed = new Set<string>();
  for (const failure of failures as unknown[]) {
    const id =
      typeof failure === 'object' && failure !== null && 'itemIdentifier' in failure
        ? failure.itemIdentifier
        : undefined;
    if (typeof id !== 'string' || !known.has(id)) return 'all';
    failed.add(id);
  }
  return failed;
}
