import { TinkerClient } from '../../shared/client/tinker-client.js';
import { cpuMeter } from '../support/cpu.js';
import { LoadClient } from './client.js';
import { type MemoryReport, sampleMemory } from './memory.js';
import { LoadRecorder, type LoadTally } from './recorder.js';

/**
 * Drives a running stack's HTTP API with `clients` concurrent load clients (bench/load/client.ts),
 * spread over `tenants` tenants with `keysPerTenant` API keys each, for `durationMs` (no round starts
 * later, past a client's first `minRoundsPerClient`) and at most `maxRequests` submits. Rounds under
 * way then finish; a future still pending `drainMs` after the deadline is counted as stuck, and
 * every open call is aborted then, so the run ends in bounded time whatever the stack does.
 */

export interface LoadTarget {
  /** Base URL of the HTTP API (127.0.0.1). */
  readonly apiUrl: string;
  /** A new API key for `tenant`. */
  readonly newApiKey: (tenant: string) => Promise<string>;
  /** Futures the stack still holds non-terminal (read after the run), when the target can tell. */
  readonly pendingFutures?: () => Promise<number>;
  /** Pid of the DynamoDB Local JVM, to sample its memory. */
  readonly jvmPid?: number;
}

export interface LoadOptions {
  readonly clients: number;
  readonly tenants: number;
  readonly keysPerTenant: number;
  readonly durationMs: number;
  readonly drainMs: number;
  readonly maxRequests: number;
  /** Rounds every client runs even past `durationMs` (so each one exercises the whole mix). */
  readonly minRoundsPerClient: number;
  /** A sampler checkpoint and a sample every this many training rounds. */
  readonly checkpointEvery: number;
  /** Ends the run early (Ctrl-C): open calls are aborted and no client starts anything new. */
  readonly signal?: AbortSignal;
}

export interface LoadReport extends LoadTally {
  readonly clients: number;
  readonly tenants: number;
  /** First submit to the last client finishing (the drain included). */
  readonly wall_ms: number;
  readonly submits_per_s: number;
  readonly completed_per_s: number;
  readonly clients_ended_early: number;
  readonly request_cap_reached: boolean;
  /** Non-terminal futures the stack holds after the run (must be 0), when the target can tell. */
  readonly pending_futures_after: number | undefined;
  readonly memory: MemoryReport;
  /** CPU time during the run: this process (runtime, handlers, fauxqs, clients) and the DynamoDB Local JVM. */
  readonly cpu_ms_process: number;
  readonly cpu_ms_jvm: number | undefined;
}

const round3 = (value: number) => Math.round(value * 1000) / 1000;

export async function runLoad(target: LoadTarget, options: LoadOptions): Promise<LoadReport> {
  const keys = await Promise.all(
    Array.from({ length: options.tenants * options.keysPerTenant }, (_, k) =>
      target.newApiKey(`load-${k % options.tenants}`),
    ),
  );
  const abort = new AbortController();
  const interrupted = () => abort.abort();
  options.signal?.addEventListener('abort', interrupted);
  if (options.signal?.aborted) abort.abort();
  const fetchWithAbort: typeof fetch = (input, init) => fetch(input, { ...init, signal: abort.signal });
  const recorder = new LoadRecorder();
  let reserved = 0;
  let capReached = false;
  const started = Date.now();
  const stopAt = started + options.durationMs;
  const hardStopAt = stopAt + options.drainMs;
  const run = {
    recorder,
    stopAt,
    hardStopAt,
    checkpointEvery: options.checkpointEvery,
    minRounds: options.minRoundsPerClient,
    signal: abort.signal,
    reserve: (n: number) => {
      if (reserved + n > options.maxRequests) {
        capReached = true;
        return false;
      }
      reserved += n;
      return true;
    },
  };
  // Open long polls would otherwise outlive the deadline by up to a poll's length.
  const deadline = setTimeout(() => abort.abort(), hardStopAt - Date.now() + 1_000);
  const memory = sampleMemory({ jvmPid: target.jvmPid });
  const cpu = cpuMeter(target.jvmPid ?? -1)();
  const wallStarted = performance.now();
  let finished: boolean[];
  try {
    finished = await Promise.all(
      Array.from({ length: options.clients }, (_, index) => {
        const apiKey = keys[index % keys.length] as string;
        const client = new TinkerClient({ baseUrl: target.apiUrl, apiKey, fetch: fetchWithAbort });
        return new LoadClient(client, index, run).start();
      }),
    );
  } finally {
    clearTimeout(deadline);
    options.signal?.removeEventListener('abort', interrupted);
    abort.abort();
  }
  const wallMs = performance.now() - wallStarted;
  const memoryReport = memory.stop();
  const cpuUsed = cpu();
  const tally = recorder.tally();
  return {
    clients: options.clients,
    tenants: options.tenants,
    wall_ms: round3(wallMs),
    submits_per_s: round3(tally.requests / (wallMs / 1000)),
    completed_per_s: round3(tally.futures_completed / (wallMs / 1000)),
    clients_ended_early: finished.filter((ok) => !ok).length,
    request_cap_reached: capReached,
    pending_futures_after: await target.pendingFutures?.(),
    ...tally,
    memory: memoryReport,
    cpu_ms_process: cpuUsed.cpu_ms_client,
    cpu_ms_jvm: Number.isNaN(cpuUsed.cpu_ms_ddb_local) ? undefined : cpuUsed.cpu_ms_ddb_local,
  };
}
