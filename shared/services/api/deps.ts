import type { AwsClients } from '../../aws/clients.js';
import type { Config } from '../../base/config.js';
import { resolveTables, type Tables } from '../../repositories/tables.js';

/**
 * What the API's operations reach: its clients, the three tables it is granted and the payload
 * bucket. Built once per request at the edge (`handleApiRequest`) from the configuration and passed
 * down to every repository, so nothing below the router looks a name up on its own.
 */
export interface ApiDeps {
  readonly clients: AwsClients;
  readonly tables: Tables<'futures' | 'models' | 'registry'>;
  readonly bucket: string;
}

export function resolveApiDeps(clients: AwsClients, source: Config): ApiDeps {
  return { clients, tables: resolveTables(['futures', 'models', 'registry'], source), bucket: source.bucket };
}
