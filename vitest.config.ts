import { defineConfig } from 'vitest/config';

// Suites that need the local cloud (DynamoDB Local + fauxqs). Only their project starts it, so a
// unit-only run (`npm run test:unit`, `vitest run test/unit`) needs no Java and pays no start-up.
const CLOUD_SUITES = ['test/integration/**/*.test.ts', 'test/e2e/**/*.test.ts'];

export default defineConfig({
  test: {
    // Two cores: keep file parallelism modest.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
    projects: [
      {
        extends: true,
        test: { name: 'unit', include: ['test/**/*.test.ts'], exclude: CLOUD_SUITES },
      },
      {
        extends: true,
        test: {
          name: 'cloud',
          include: CLOUD_SUITES,
          // One local cloud per run, shared by all cloud suites (each provisions its own prefix).
          globalSetup: ['test/support/global-setup.ts'],
        },
      },
    ],
  },
});
