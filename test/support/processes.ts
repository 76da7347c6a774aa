import { type ChildProcessByStdio, execFileSync, spawn } from 'node:child_process';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';

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

/** `pgrep -f <pattern>`: the pids whose command line matches, as a check for leftover processes runs it. */
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

export type ScriptProcess = ChildProcessByStdio<null, Readable, Readable>;

export interface RunningScript {
  readonly child: ScriptProcess;
  /** Everything the script printed so far, stdout and stderr interleaved. */
  output(): string;
  /** Its exit code, once it exits. */
  readonly exited: Promise<number | null>;
}

/**
 * Runs a repository script the way its npm script does, minus npm: one node process to signal;
 * `args` follow the script's name.
 */
export function runScript(
  script: string,
  env: NodeJS.ProcessEnv = process.env,
  args: readonly string[] = [],
): RunningScript {
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], {
    cwd: fileURLToPath(new URL('../../', import.meta.url)),
    env: { ...env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, output: () => output, exited };
}
