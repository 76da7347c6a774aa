import { execFileSync } from 'node:child_process';

/** Pids of every live descendant of `root` whose command line passes `matches`. */
export function descendantsMatching(root: number, matches: (commandLine: string) => boolean): number[] {
  const table = execFileSync('ps', ['-e', '-o', 'pid=,ppid=,args='], { encoding: 'utf8' });
  const rows = table
    .split('\n')
    .map((line) => /^\s*(\d+)\s+(\d+)\s+(.*)$/.exec(line))
    .filter((match): match is RegExpExecArray => match !== null)
    .map((match) => ({ pid: Number(match[1]), ppid: Number(match[2]), args: match[3] ?? '' }));
  const descendants = new Set<number>([root]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const row of rows) {
      if (descendants.has(row.ppid) && !descendants.has(row.pid)) {
        descendants.add(row.pid);
        grew = true;
      }
    }
  }
  return rows
    .filter((row) => row.pid !== root && descendants.has(row.pid) && matches(row.args))
    .map((row) => row.pid);
}

/** `pgrep -f <pattern>`: the pids whose command line matches, as the brief's check runs it. */
export function pgrep(pattern: string): number[] {
  try {
    return execFileSync('pgrep', ['-f', pattern], { encoding: 'utf8' })
      .split('\n')
      .filter(Boolean)
      .map(Number);
  } catch {
    return []; // pgrep exits 1 when nothing matches
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The DynamoDB Local JVM itself (its watchdog shell names the jar too, but is not `java`). */
export function isDynamoDbLocalJvm(commandLine: string): boolean {
  return /^\S*java\s/.test(commandLine) && commandLine.includes('DynamoDBLocal');
}
