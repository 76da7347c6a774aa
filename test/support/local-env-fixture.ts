import type { CloudEndpoints } from '../../local/cloud/cloud.js';
import { envFor, resourceNames } from '../../local/cloud/resources.js';
import { QUEUE_IDS, type QueueId, topology } from '../../shared/base/topology.js';

/** Where the fixture's endpoints point: a port nothing listens on (unit tests send nothing). */
export const NOWHERE = 'http://127.0.0.1:1';

/** A queue URL as the local cloud names it, on `NOWHERE`. */
export function queueUrlOf(name: string): string {
  return `${NOWHERE}/000000000000/${name}`;
}

/**
 * The environment the local runtime gives its functions (`envFor`) for resources provisioned under
 * `prefix`: `p-futures`, `p-work`, ... Unit tests of the grant and environment checks start from it.
 */
export function localEnvFixture(prefix = 'p'): {
  readonly env: Record<string, string>;
  readonly queueUrls: Readonly<Record<QueueId, string>>;
} {
  const names = resourceNames(topology, prefix);
  const queueUrls = Object.fromEntries(QUEUE_IDS.map((id) => [id, queueUrlOf(names.queues[id])])) as Record<
    QueueId,
    string
  >;
  const endpoints: CloudEndpoints = { dynamodb: NOWHERE, s3: NOWHERE, sqs: NOWHERE };
  return { env: envFor(topology, { ...names, queueUrls }, endpoints), queueUrls };
}
