import { spawnSync } from 'node:child_process';

const MINIMUM_JAVA = 17;

export const JAVA_MISSING_MESSAGE =
  `DynamoDB Local needs Java ${MINIMUM_JAVA}+ on PATH; install it (e.g. \`apt-get install openjdk-17-jre-headless\`, ` +
  '`brew install openjdk@17`) and retry.';

/** Parses the major version from `java -version` output ("1.8.0_x" is Java 8, "17.0.15" is 17). */
export function javaMajorVersion(versionOutput: string): number | undefined {
  const match = /version "(\d+)(?:\.(\d+))?/.exec(versionOutput);
  if (match === null) return undefined;
  const first = Number(match[1]);
  return first === 1 ? Number(match[2]) : first;
}

/** Fails with one line naming what to install when `java` is missing or older than 17. */
export function requireJava(command = 'java'): void {
  const probe = spawnSync(command, ['-version'], { encoding: 'utf8', timeout: 10_000 });
  if (probe.error !== undefined || probe.status !== 0) throw new Error(JAVA_MISSING_MESSAGE);
  const major = javaMajorVersion(`${probe.stderr}${probe.stdout}`);
  if (major === undefined || major < MINIMUM_JAVA) {
    throw new Error(`${JAVA_MISSING_MESSAGE} Found Java ${major ?? 'of unknown version'}.`);
  }
}
