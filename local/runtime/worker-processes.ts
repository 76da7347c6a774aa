import { type ChildProcessByStdio, spawn } from 'node:child_process';
import * as path from 'node:path';
import type { Readable } from 'node:stream';
import { PROJECT_ROOT } from '../../shared/base/env-file.js';

/**
 * `npm start -- --workers N`: N worker processes (`bin/worker.ts`, what `npm run worker` and the GPU
 * fleet's tasks run) against the local stack, in place of the in-process worker handler, so routing to
 * work lanes, draining (SIGTERM) and recovery from a killed worker (SIGKILL) happen as they do between
 * hosts. Each prints through this process, its lines prefixed with its number and pid. A worker that
 * exits is not restarted: its lane and holds go back (drained) or lapse (killed), and the others take
 * its models (S3, S4).
 */

export interface WorkerProcessesOptions {
  readonly count: number;
  /** The local stack's env file (the worker reads its variables and checks its calls against its grants). */
  readonly envFile: string;
  /** Each worker's engine; unset, the reference backend. */
  readonly engine?: { readonly name: string; readonly baseModel: string };
  /** A backend module instead (the worker's `--backend`; tests pass a slowed reference backend). */
  readonly backend?: string;
  /** Variables over this process's environment for the workers. */
  readonly env?: Readonly<Record<string, string>>;
  /** The worker's `--grace-seconds` (default its own). */
  readonly graceSeconds?: number;
  /** Its `--wait-seconds`: the long poll a drain waits out (default 5). */
  readonly waitSeconds?: number;
  readonly print: (line: string) => void;
}

export interface WorkerProcess {
  readonly index: number;
  readonly pid: number;
  /** Its exit code, or the signal that ended it. */
  readonly exited: Promise<number | NodeJS.Signals | null>;
}

export interface WorkerProcesses {
  readonly workers: readonly WorkerProcess[];
  /** SIGTERM to every live worker (each drains and lets go of its models), then waits for them all. */
  stop(): Promise<void>;
}

const WORKER_SCRIPT = path.join(PROJECT_ROOT, 'bin', 'worker.ts');

export function startWorkerProcesses(options: WorkerProcessesOptions): WorkerProcesses {
  const args = [
    '--env-file',
    options.envFile,
    '--wait-seconds',
    String(options.waitSeconds ?? 5),
    ...(options.graceSeconds === undefined ? [] : ['--grace-seconds', String(options.graceSeconds)]),
    ...(options.backend === undefined ? [] : ['--backend', options.backend]),
    ...(options.engine === undefined
      ? []
      : ['--engine', options.engine.name, '--base-model', options.engine.baseModel]),
  ];
  const children: ChildProcessByStdio<null, Readable, Readable>[] = [];
  const workers: WorkerProcess[] = [];
  for (let index = 1; index <= options.count; index++) {
    const child = spawn(process.execPath, ['--import', 'tsx', WORKER_SCRIPT, ...args], {
      cwd: PROJECT_ROOT,
      env: { ...process.env, ...options.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own process group: a terminal's Ctrl-C reaches `npm start` alone, whose one SIGTERM then
      // drains the worker (a second signal would abandon its work item at once).
      detached: true,
    });
    const pid = child.pid;
    if (pid === undefined) throw new Error(`worker ${index} did not start`);
    const prefix = `[worker ${index} pid ${pid}] `;
    for (const stream of [child.stdout, child.stderr]) {
      let pending = '';
      stream.on('data', (chunk: Buffer) => {
        const lines = (pending + chunk.toString()).split('\n');
        pending = lines.pop() ?? '';
        for (const line of lines) options.print(`${prefix}${line}`);
      });
    }
    const exited = new Promise<number | NodeJS.Signals | null>((resolve) =>
      child.once('exit', (code, signal) => {
        options.print(`${prefix}exited (${signal ?? `code ${code}`})`);
        resolve(signal ?? code);
      }),
    );
    children.push(child);
    workers.push({ index, pid, exited });
    options.print(`${prefix}started`);
  }
  // Never outlive this process, even when it exits without stopping them.
  process.once('exit', () => {
    for (const child of children)
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      for (const child of children) {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      }
      await Promise.all(workers.map((worker) => worker.exited));
    })();
    return stopping;
  };
  return { workers, stop };
}
