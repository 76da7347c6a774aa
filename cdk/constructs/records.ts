/**
 * Typed iteration over the topology's records, whose keys are known ids (`Object.entries` would
 * widen them to `string`). Absent entries of a partial record are skipped.
 */
export function entriesOf<K extends string, V>(record: Readonly<Partial<Record<K, V>>>): [K, V][] {
  return (Object.entries(record) as [K, V | undefined][]).filter(
    (entry): entry is [K, V] => entry[1] !== undefined,
  );
}

/** Builds a record with the same keys as `record`, in declaration order. */
export function mapRecord<K extends string, V, W>(
  record: Readonly<Record<K, V>>,
  map: (key: K, value: V) => W,
): Record<K, W> {
  return Object.fromEntries(entriesOf<K, V>(record).map(([key, value]) => [key, map(key, value)])) as Record<
    K,
    W
  >;
}

/** Construct ids and output names: `workDlq` and `work-dlq` both become `WorkDlq`. */
export function pascalCase(name: string): string {
  return name
    .split(/[^A-Za-z0-9]+/)
    .filter((part) => part.length > 0)
    .map((part) => part.charAt(0).toUpperCase() + part.slice(1))
    .join('');
}
