import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

/**
 * CPU time spent during a measured run, by this process (client: encoding, SDK marshalling,
 * decoding) and by the DynamoDB Local JVM (the emulator's own work). On a shared machine these say
 * more about the cost of each side than wall time does, which also counts waiting for a core.
 */

export interface CpuSample {
  readonly cpu_ms_client: number;
  readonly cpu_ms_ddb_local: number;
}

function clockTicksPerSecond(): number {
  try {
    const ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    return Number.isInteger(ticks) && ticks > 0 ? ticks : 100;
  } catch {
    return 100;
  }
}

/** utime + stime of a process in ms (Linux /proc), or NaN where /proc is not available. */
function processCpuMs(pid: number, ticksPerSecond: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may contain spaces) start at field 3: utime is 14, stime 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / ticksPerSecond;
  } catch {
    return Number.NaN;
  }
}

/** Starts a measurement; the returned function ends it. */
export function cpuMeter(emulatorPid: number): () => () => CpuSample {
  const ticksPerSecond = clockTicksPerSecond();
  return () => {
    const client = process.cpuUsage();
    const emulator = processCpuMs(emulatorPid, ticksPerSecond);
    return () => {
      const used = process.cpuUsage(client);
      return {
        cpu_ms_client: Math.round((used.user + used.system) / 1000),
        cpu_ms_ddb_local: Math.round(processCpuMs(emulatorPid, ticksPerSecond) - emulator),
      };
    };
  };
}
