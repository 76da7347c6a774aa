/** Latency summaries for the load benchmark: nearest-rank percentiles over every sample, in ms. */

export interface LatencySummary {
  readonly n: number;
  readonly p50_ms: number;
  readonly p90_ms: number;
  readonly p99_ms: number;
  readonly max_ms: number;
}

const round1 = (value: number) => Math.round(value * 10) / 10;

/** Nearest-rank percentile of an ascending array; 0 when empty. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[Math.min(sorted.length, rank) - 1] as number;
}

export function summarizeLatencies(samples: readonly number[]): LatencySummary {
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    n: sorted.length,
    p50_ms: round1(percentile(sorted, 50)),
    p90_ms: round1(percentile(sorted, 90)),
    p99_ms: round1(percentile(sorted, 99)),
    max_ms: round1(sorted.at(-1) ?? 0),
  };
}
