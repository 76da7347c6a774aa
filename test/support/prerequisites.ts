/**
 * One rule for tests whose prerequisites may be absent on a developer's machine: there they skip with
 * one line saying why; under CI (`CI=true`, set by `.ci/run`) a prerequisite that `.ci/run` installs
 * itself (the engine venv, Debian's Chromium) must be present, so its absence fails the run with the
 * same reason instead of passing with the tier silently skipped. The official SDK's tier, whose client
 * CI cannot have, skips in CI too and does not use this (test/sdk/run.ts).
 */

export function runningInCi(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.CI === 'true';
}

/** Says why the tests skip (stderr, once per file), or throws with that reason under CI. */
export function missingPrerequisite(reason: string, env: NodeJS.ProcessEnv = process.env): void {
  if (runningInCi(env)) {
    throw new Error(
      `${reason}; CI installs this prerequisite (.ci/run), so its tests fail instead of skipping`,
    );
  }
  console.warn(reason);
}
