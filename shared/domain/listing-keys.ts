/**
 * The sort key of the registry's listing indexes (`by_owner`, `by_parent`): a creation time in
 * milliseconds, zero-padded to 13 digits so string order is time order, then the parts that make it
 * unique, joined by `#`. Pure; every writer of a `list_sort` builds it here.
 */
export function listSortKey(createdAtMs: number, ...parts: string[]): string {
  return [String(Math.max(0, Math.floor(createdAtMs))).padStart(13, '0'), ...parts].join('#');
}
