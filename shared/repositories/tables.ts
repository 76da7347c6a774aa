import { type Config, config } from '../base/config.js';
import type { TableId } from '../base/topology.js';

/**
 * Table names, resolved once at the edge (a handler, the worker's runtime, a CLI) and passed to the
 * repositories, so no write looks its table up on its own. Each function resolves only the tables it
 * is granted: reading another's variable throws the `ConfigError` it would throw on AWS.
 */
export type Tables<K extends TableId = TableId> = Readonly<Record<K, string>>;

export function resolveTables<K extends TableId>(ids: readonly K[], source: Config = config()): Tables<K> {
  return Object.fromEntries(ids.map((id) => [id, source.table(id)])) as Record<K, string>;
}
