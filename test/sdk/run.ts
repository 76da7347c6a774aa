import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { findPrerequisites, REPO_ROOT } from './python-env.js';

/**
 * `npm run test:sdk [vitest args]`: the SDK tier, or one line saying why it is skipped (no Python
 * 3.11+, no SDK source or pip-installed tinker) and exit 0, so CI without them still passes.
 */
const prerequisites = findPrerequisites();
if (!prerequisites.found) {
  process.stdout.write(`test:sdk skipped: ${prerequisites.missing}\n`);
  process.exit(0);
}
for (const version of prerequisites.missingVersions) {
  process.stdout.write(`test:sdk: SDK ${version} not found; running the others\n`);
}
const vitest = spawnSync(
  join(REPO_ROOT, 'node_modules', '.bin', 'vitest'),
  ['run', '--config', 'test/sdk/vitest.config.ts', ...process.argv.slice(2)],
  { cwd: REPO_ROOT, stdio: 'inherit' },
);
process.exit(vitest.status ?? 1);
