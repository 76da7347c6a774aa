import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Benchmark harness: each case runs its subject ("ours") and its baselines in the same process and
 * run, interleaved and repeated, and records the median wall time beside deterministic counts
 * (consumed capacity, calls, bytes) that do not depend on the machine's speed.
 */

export type Counts = Record<string, number>;

/** One measured execution: the counts it produced (wall time is measured by the harness). */
export type Subject = () => Promise<Counts>;

export interface BenchCase {
  readonly name: string;
  /** Parameters recorded beside the results (N, payload size, ...). */
  readonly params: Record<string, number | string>;
  readonly ours: Subject;
  /** The first baseline is `baseline`; further ones are written as `baseline_<key>`. */
  readonly baselines: Record<string, Subject>;
  readonly repeats: number;
  /** Runs before each repeat (for example to reset state); not timed. */
  readonly prepare?: () => Promise<void>;
}

export interface SideResult extends Counts {
  readonly wall_ms: number;
}

export interface CaseResult {
  readonly name: string;
  readonly [key: string]: unknown;
}

export interface BenchResult {
  readonly name: string;
  readonly machine: {
    readonly cpus: number;
    readonly cpu_model: string;
    readonly memory_gb: number;
    readonly node: string;
  };
  readonly quick: boolean;
  readonly cases: CaseResult[];
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** Counts are medians too: deterministic counts come out identical on every repeat anyway. */
function summarize(runs: readonly { wall: number; counts: Counts }[]): SideResult {
  const keys = new Set(runs.flatMap((run) => Object.keys(run.counts)));
  const counts: Counts = {};
  for (const key of keys) counts[key] = round(median(runs.map((run) => run.counts[key] ?? 0)));
  return { wall_ms: round(median(runs.map((run) => run.wall))), ...counts };
}

function round(value: number): number {
  return Math.round(value * 1000) / 1000;
}

async function timed(subject: Subject): Promise<{ wall: number; counts: Counts }> {
  const started = process.hrtime.bigint();
  const counts = await subject();
  return { wall: Number(process.hrtime.bigint() - started) / 1e6, counts };
}

export async function runCase(benchCase: BenchCase): Promise<CaseResult> {
  const sides = ['ours', ...Object.keys(benchCase.baselines)];
  const runs = new Map<string, { wall: number; counts: Counts }[]>(sides.map((side) => [side, []]));
  for (let repeat = 0; repeat < benchCase.repeats; repeat++) {
    // Interleave, rotating the order so no side always runs first (warm caches, JIT).
    const order = sides.map((_, index) => sides[(index + repeat) % sides.length]!);
    for (const side of order) {
      await benchCase.prepare?.();
      const subject = side === 'ours' ? benchCase.ours : benchCase.baselines[side]!;
      runs.get(side)!.push(await timed(subject));
    }
  }
  const result: Record<string, unknown> = { name: benchCase.name, ...benchCase.params };
  const ours = summarize(runs.get('ours')!);
  result.ours = ours;
  Object.keys(benchCase.baselines).forEach((side, index) => {
    result[index === 0 ? 'baseline' : `baseline_${side}`] = summarize(runs.get(side)!);
  });
  const baseline = result.baseline as SideResult | undefined;
  if (baseline) result.ratio_wall = round(baseline.wall_ms / Math.max(ours.wall_ms, 1e-3));
  return result as CaseResult;
}

export function machine(): BenchResult['machine'] {
  return {
    cpus: cpus().length,
    cpu_model: cpus()[0]?.model ?? 'unknown',
    memory_gb: Math.round(totalmem() / 2 ** 30),
    node: process.version,
  };
}

const resultsDir = join(dirname(fileURLToPath(import.meta.url)), 'results');

export function writeResult(result: BenchResult): string {
  mkdirSync(resultsDir, { recursive: true });
  // A --quick run never overwrites the full results bench/README.md quotes.
  const path = join(resultsDir, `${result.name}${result.quick ? '.quick' : ''}.json`);
  writeFileSync(path, `${JSON.stringify(result, null, 2)}\n`);
  return path;
}

/** A readable table: one row per case and side, counts as columns. */
export function formatTable(result: BenchResult): string {
  const rows: string[][] = [];
  const columns = new Set<string>(['wall_ms']);
  for (const benchCase of result.cases) {
    for (const [key, value] of Object.entries(benchCase)) {
      if (key === 'ours' || key.startsWith('baseline')) {
        for (const column of Object.keys(value as SideResult)) columns.add(column);
      }
    }
  }
  const header = ['case', 'side', ...columns, 'ratio_wall'];
  for (const benchCase of result.cases) {
    for (const [key, value] of Object.entries(benchCase)) {
      if (key !== 'ours' && !key.startsWith('baseline')) continue;
      const side = value as SideResult;
      rows.push([
        benchCase.name,
        key,
        ...[...columns].map((column) => String(side[column] ?? '')),
        key === 'ours' ? String(benchCase.ratio_wall ?? '') : '',
      ]);
    }
  }
  const widths = header.map((cell, index) => Math.max(cell.length, ...rows.map((row) => row[index]!.length)));
  const line = (cells: string[]) => cells.map((cell, index) => cell.padEnd(widths[index]!)).join('  ');
  return [line(header), line(widths.map((width) => '-'.repeat(width))), ...rows.map(line)].join('\n');
}
