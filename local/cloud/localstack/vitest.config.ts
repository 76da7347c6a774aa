import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

/**
 * The integration suite with LocalStack in place of the local cloud (`npm run test:localstack`):
 * the same test files, whose `setupTestCloud()` provisions a fresh prefix of the topology's resources
 * on whatever endpoints globalSetup provides.
 */
export default defineConfig({
  root: fileURLToPath(new URL('../../../', import.meta.url)),
  test: {
    include: ['test/integration/**/*.test.ts'],
    globalSetup: ['local/cloud/localstack/global-setup.ts'],
    maxWorkers: 2,
    testTimeout: 120_000,
    hookTimeout: 120_000,
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  },
});
