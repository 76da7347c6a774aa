import type { Topology } from '../shared/base/topology.js';
import { mapRecord } from './constructs/records.js';

/**
 * The topology without the named indexes, for staging new indexes on a deployed stack:
 * CloudFormation adds at most one global secondary index per table per stack update, so a release
 * that declares two on one table is deployed once with `-c omitIndexes=<one of them>`, then without
 * it (docs/operations.md#adding-indexes-to-a-deployed-stack). An unknown name is refused, so a typo
 * cannot deploy a stack missing nothing.
 */
export function withoutIndexes(topology: Topology, names: readonly string[]): Topology {
  const declared = new Set(
    Object.values(topology.tables).flatMap((table) => table.indexes.map((i) => i.name)),
  );
  const unknown = names.filter((name) => !declared.has(name));
  if (unknown.length > 0) throw new Error(`omitIndexes names no declared index: ${unknown.join(', ')}`);
  const omitted = new Set(names);
  return {
    ...topology,
    tables: mapRecord(topology.tables, (_id, table) => ({
      ...table,
      indexes: table.indexes.filter((index) => !omitted.has(index.name)),
    })),
  };
}
