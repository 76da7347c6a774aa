import { readFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';

/**
 * The runtime's memory during a load run, sampled every second: this process's RSS and V8 heap (the
 * local runtime, its handlers and fauxqs live here, beside the load clients), and the DynamoDB Local
 * JVM's RSS when its pid is given. Also the event loop's delay, which explains latencies on a busy
 * machine better than wall time does.
 */

export interface Extent {
  readonly start: number;
  readonly peak: number;
  readonly end: number;
}

export interface MemoryReport {
  readonly samples: number;
  readonly rss_mb: Extent;
  readonly heap_used_mb: Extent;
  /** Undefined when no JVM pid was given or /proc is not readable. */
  readonly jvm_rss_mb: Extent | undefined;
  /** Every tenth sample (about every 10 s), to tell a plateau from growth. */
  readonly heap_used_mb_every_10s: readonly number[];
  readonly rss_mb_every_10s: readonly number[];
  readonly event_loop_delay_p99_ms: number;
  readonly event_loop_delay_max_ms: number;
}

interface Sample {
  readonly rss: number;
  readonly heapUsed: number;
  readonly jvmRss: number | undefined;
}

const MB = 1024 * 1024;
const round1 = (value: number) => Math.round(value * 10) / 10;

/** VmRSS of a process in bytes (Linux /proc), or undefined. */
function processRss(pid: number): number | undefined {
  try {
    const match = /^VmRSS:\s+(\d+)\s+kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

function extent(values: readonly number[]): Extent {
  return {
    start: round1((values[0] ?? 0) / MB),
    peak: round1(Math.max(...values) / MB),
    end: round1((values.at(-1) ?? 0) / MB),
  };
}

function everyTenth(values: readonly number[]): number[] {
  return values
    .filter((_, index) => index % 10 === 0 || index === values.length - 1)
    .map((v) => round1(v / MB));
}

/** Starts sampling now (first sample taken at once); `stop()` takes a last sample and reports. */
export function sampleMemory(options: { jvmPid?: number; periodMs?: number } = {}): {
  stop(): MemoryReport;
} {
  const samples: Sample[] = [];
  const take = () => {
    const { rss, heapUsed } = process.memoryUsage();
    samples.push({
      rss,
      heapUsed,
      jvmRss: options.jvmPid === undefined ? undefined : processRss(options.jvmPid),
    });
  };
  const delay = monitorEventLoopDelay({ resolution: 20 });
  delay.enable();
  take();
  const timer = setInterval(take, options.periodMs ?? 1_000);
  timer.unref();
  return {
    stop: () => {
      clearInterval(timer);
      delay.disable();
      take();
      const jvm = samples.map((sample) => sample.jvmRss);
      return {
        samples: samples.length,
        rss_mb: extent(samples.map((sample) => sample.rss)),
        heap_used_mb: extent(samples.map((sample) => sample.heapUsed)),
        jvm_rss_mb: jvm.every((value) => value !== undefined) ? extent(jvm) : undefined,
        heap_used_mb_every_10s: everyTenth(samples.map((sample) => sample.heapUsed)),
        rss_mb_every_10s: everyTenth(samples.map((sample) => sample.rss)),
        event_loop_delay_p99_ms: round1(delay.percentile(99) / 1e6),
        event_loop_delay_max_ms: round1(delay.max / 1e6),
      };
    },
  };
}
