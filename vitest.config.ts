import { execFileSync } from 'node:child_process';
import { defineConfig } from 'vitest/config';

/**
 * The property tests' seed (test/support/property-seed.ts): FC_SEED, else the first 32 bits of the
 * commit checked out, else none (fast-check then draws a random seed per property, as by default).
 */
function propertySeed(): string {
  if (process.env.FC_SEED !== undefined) return process.env.FC_SEED;
  try {
    const head = execFileSync('git', ['rev-parse', 'HEAD'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    return String(Number.parseInt(head.slice(0, 8), 16) | 0);
  } catch {
    return '';
  }
}

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
    env: { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true', FC_SEED: propertySeed() },
    setupFiles: ['test/support/property-seed.ts'],
    projects: [
      {
        extends: true,
        // test/sdk is its own tier (`npm run test:sdk`, test/sdk/vitest.config.ts).
        test: { name: 'unit', include: ['test/**/*.test.ts'], exclude: [...CLOUD_SUITES, 'test/sdk/**'] },
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
