import { type ChildProcessByStdio, spawn } from 'node:child_process';
import type { Readable } from 'node:stream';

/**
 * Runs a command under a tiny POSIX shell guard so that it can never outlive this Node process.
 *
 * The guard starts the command in the background, prints its pid, then checks twice a second that
 * the command is alive and that the guard's parent is still this process. When the parent is gone
 * (exit, crash, even SIGKILL, which runs no JavaScript) or the guard receives TERM/INT/HUP, it sends
 * TERM to the command and waits for it. On Linux the parent check reads the guard's own parent pid
 * (it changes the moment the parent dies, even while the dead parent awaits reaping as a zombie,
 * which `kill -0` would still report alive); elsewhere it falls back to `kill -0`. A non-interactive
 * shell starts background jobs with SIGINT ignored, so Ctrl-C reaches the command only through the
 * guard, which turns it into an orderly TERM.
 */
const GUARD_SCRIPT = `
parent=$1; shift
"$@" &
child=$!
echo "watchdog-child-pid $child"
finish() { kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; exit 0; }
trap finish TERM INT HUP
parent_alive() {
  if [ -r /proc/$$/stat ]; then
    read -r _ _ _ ppid _ < /proc/$$/stat
    [ "$ppid" = "$parent" ]
  else
    kill -0 "$parent" 2>/dev/null
  fi
}
while parent_alive && kill -0 "$child" 2>/dev/null; do
  sleep 0.5 & wait $!
done
finish
`;

export interface GuardedProcess {
  /** The guard shell; signal it to stop the command. */
  readonly guard: ChildProcessByStdio<null, Readable, Readable>;
  /** Pid of the guarded command itself (for example the JVM). */
  readonly pid: number;
  /** Resolves when the guard (and so the command) has exited. */
  readonly exited: Promise<void>;
  /** The last output of the command, for error messages. */
  recentOutput(): string;
  /** TERM, then KILL after `graceMs`; resolves once both processes are gone. */
  stop(graceMs?: number): Promise<void>;
}

const OUTPUT_TAIL_CHARS = 4_000;

export function spawnGuarded(command: string, args: readonly string[], cwd: string): Promise<GuardedProcess> {
  const guard = spawn('/bin/sh', ['-c', GUARD_SCRIPT, 'watchdog', String(process.pid), command, ...args], {
    cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const remember = (chunk: Buffer): void => {
    output = (output + chunk.toString('utf8')).slice(-OUTPUT_TAIL_CHARS);
  };
  guard.stdout.on('data', remember);
  guard.stderr.on('data', remember);
  const exited = new Promise<void>((resolve) => {
    if (guard.exitCode !== null || guard.signalCode !== null) resolve();
    else guard.once('exit', () => resolve());
  });

  return new Promise((resolve, reject) => {
    const onExit = (): void => reject(new Error(`${command} exited at start-up: ${output.trim()}`));
    guard.once('exit', onExit);
    guard.once('error', reject);
    const onData = (): void => {
      const match = /watchdog-child-pid (\d+)/.exec(output);
      if (match === null) return;
      guard.stdout.off('data', onData);
      guard.off('exit', onExit);
      const pid = Number(match[1]);
      resolve({
        guard,
        pid,
        exited,
        recentOutput: () => output,
        stop: async (graceMs = 5_000) => {
          if (guard.exitCode === null && guard.signalCode === null) guard.kill('SIGTERM');
          const timer = setTimeout(() => {
            killQuietly(pid);
            guard.kill('SIGKILL');
          }, graceMs);
          await exited;
          clearTimeout(timer);
          // The guard waits for the command, so this only matters if the guard itself was killed.
          await waitForExit(pid, graceMs);
        },
      });
    };
    guard.stdout.on('data', onData);
  });
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

async function waitForExit(pid: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (isAlive(pid)) {
    if (Date.now() > deadline) {
      killQuietly(pid);
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
