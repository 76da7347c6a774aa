import type { TestProject } from 'vitest/node';
import { startLocalStack } from '../../local/runtime/stack.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import { findPrerequisites, prepareSdkPython, type SdkPython } from './python-env.js';

/** What the SDK tier's test files get: the stack's URL, a key per tenant, and how to run each SDK. */
export interface SdkTier extends SdkPython {
  readonly baseUrl: string;
  /** Keys of two tenants: `owner` makes models and checkpoints, `other` must not reach them. */
  readonly apiKeys: { readonly owner: string; readonly other: string };
}

declare module 'vitest' {
  export interface ProvidedContext {
    sdkTier: SdkTier;
  }
}

/**
 * The whole local stack in this process, as `npm start` runs it (local cloud, API, scheduler, worker
 * and sweeper behind their triggers, on loopback), with the Python environment prepared alongside.
 * `npm run test:sdk` (run.ts) has already skipped the tier when Python or the SDK is missing.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const prerequisites = findPrerequisites();
  if (!prerequisites.found) throw new Error(`the SDK tier cannot run: ${prerequisites.missing}`);
  const [preparing, starting] = await Promise.allSettled([
    prepareSdkPython(prerequisites),
    // Streams polled every 50 ms (npm start: 250 ms), so the SDK's many round trips wait less.
    startLocalStack({ prefix: 'sdk', streamPollIntervalMs: 50, extraEnv: { POWERTOOLS_LOG_LEVEL: 'WARN' } }),
  ]);
  if (starting.status === 'rejected') throw starting.reason;
  const stack = starting.value;
  try {
    if (preparing.status === 'rejected') throw preparing.reason;
    const { torchMissing } = preparing.value;
    if (torchMissing !== null) {
      process.stdout.write(
        `test:sdk: forward_backward_custom skipped (no torch): ${torchMissing.split('\n')[0]}\n`,
      );
    }
    const [owner, other] = await Promise.all([
      createApiKey(stack.clients.doc, stack.resources.tables.registry, 'sdk-owner'),
      createApiKey(stack.clients.doc, stack.resources.tables.registry, 'sdk-other'),
    ]);
    project.provide('sdkTier', { ...preparing.value, baseUrl: stack.apiUrl, apiKeys: { owner, other } });
  } catch (error) {
    await stack.stop();
    throw error;
  }
  return () => stack.stop();
}
