import { defineConfig } from 'vitest/config';

/**
 * The SDK tier (`npm run test:sdk`, through test/sdk/run.ts): the official Tinker Python SDK against
 * one local stack that globalSetup starts. Kept out of `npm test` (the main config excludes test/sdk).
 */
export default defineConfig({
  test: {
    include: ['test/sdk/**/*.test.ts'],
    globalSetup: ['test/sdk/global-setup.ts'],
    // Two cores, and each file runs both SDK versions' scripts at once.
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 180_000,
    teardownTimeout: 30_000,
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
