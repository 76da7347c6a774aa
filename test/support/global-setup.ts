import type { TestProject } from 'vitest/node';
import { type CloudEndpoints, startLocalCloud } from '../../local/cloud/cloud.js';

declare module 'vitest' {
  export interface ProvidedContext {
    localCloud: CloudEndpoints;
  }
}

/** One local cloud per test run, for the `cloud` project only; test files reach it via `inject`. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const cloud = await startLocalCloud();
  project.provide('localCloud', cloud.endpoints);
  return () => cloud.stop();
}
