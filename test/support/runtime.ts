import {
  type LocalRuntime,
  type LocalRuntimeOptions,
  startLocalRuntime,
} from '../../local/runtime/lambda-runtime.js';
import { topology } from '../../shared/base/topology.js';
import type { TestCloud } from './cloud.js';

export type CloudRuntimeOptions = Partial<Omit<LocalRuntimeOptions, 'queueUrls'>>;

/**
 * The local runtime on a provisioned cloud: the real topology unless `options.topology` replaces it,
 * the cloud's environment with `options.env` over it, and the cloud's queues (a stream trigger
 * reports the batches it gives up on to one that no function's env names). Stream reads are polled
 * every 50 ms unless asked otherwise, so tests wait less.
 */
export function startCloudRuntime(
  cloud: Pick<TestCloud, 'env' | 'names'>,
  options: CloudRuntimeOptions = {},
): Promise<LocalRuntime> {
  return startLocalRuntime({
    topology,
    streamPollIntervalMs: 50,
    ...options,
    env: { ...cloud.env, ...options.env },
    queueUrls: cloud.names.queueUrls,
  });
}
