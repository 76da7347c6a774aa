import { loadavg } from 'node:os';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { BATCH_GET_MAX_KEYS } from '../shared/aws/batch-get.js';
import { config } from '../shared/base/config.js';
import { BATCH_WRITE_MAX_REQUESTS } from '../shared/repositories/prefix/grouping.js';
import { pointerKeys } from '../shared/repositories/prefix/pointer.js';
import {
  createPrefixStore,
  DEFAULT_PREFIX_TTL_SECONDS,
  DEFAULT_READS_IN_FLIGHT_PER_BATCH,
  type PrefixStore,
} from '../shared/repositories/prefix/store.js';
import type { PrefixPointer } from '../shared/repositories/prefix/types.js';
import {
  type BenchCase,
  type BenchResult,
  type CaseResult,
  type Counts,
  machine,
  runCase,
  type SideResult,
} from './harness.js';
import { attachMeter, createMeter, type Meter } from './metering.js';
import { type BenchCloud, type BenchTable, withBenchCloud } from './support/bench-cloud.js';
import { type CpuSample, cpuMeter } from './support/cpu.js';
import { injectRoundTripDelay } from './support/latency.js';
import { getPerCall, putPerCall, type RestoredCall } from './support/per-call-baseline.js';
import {
  buildWorkload,
  type EncodingStats,
  encodingStats,
  type Workload,
} from './support/prefix-workload.js';

/**
 * `npm run bench -- prefix [--quick]`: the prefix store's two numbers, each beside its baselines in
 * the same run. (1) Saving the unfinished calls of one cut: `saveCut` (grouped BatchWriteItem, group
 * commit) against one PutItem per call, sequential and with the store's own concurrency. (2) Those
 * calls resuming at once: restores through the shared read batcher (BatchGetItem) against one
 * strongly consistent GetItem per call, likewise. Every case runs on the local cloud as it is, and
 * again with a fixed delay before every DynamoDB call (a declared simulation of in-region round trips).
 * Each measured run gets a fresh table and a fresh attempt, so nothing is read from an earlier run.
 */

const SIMULATED_RTT_MS = 4;
/** The store's bounded parallelism, given explicitly so the concurrent baselines use the same. */
const CONCURRENCY = 8;
const READ_WINDOW_MS = 2;
const SEED = 20_260_601;
const VOCAB = 151_936;
const SAVE_DEADLINE_MS = 10 * 60_000;
const RTT_NOTE =
  `simulated: a fixed ${SIMULATED_RTT_MS} ms delay before every DynamoDB HTTP attempt (SDK middleware on ` +
  'the injected client), standing in for in-region round trips the loopback local cloud does not have';

interface Variant {
  readonly suffix: string;
  readonly delayMs: number;
  /** The one client every side of the variant uses, so the simulated delay is the same for all. */
  readonly doc: DynamoDBDocumentClient;
  readonly meter: Meter;
  /** HTTP attempts that went through the simulated delay (checked against the calls per side). */
  readonly delayed: { attempts: number };
  readonly startCpu: () => () => CpuSample;
}

/** One measured side: calls and capacity from the meter, CPU of both processes, plus `counts`. */
async function measured(v: Variant, body: () => Promise<Counts>): Promise<Counts> {
  v.meter.reset();
  v.delayed.attempts = 0;
  const stopCpu = v.startCpu();
  const counts = await body();
  const delayed: Counts = v.delayMs > 0 ? { delayed_attempts: v.delayed.attempts } : {};
  return { ddb_calls: v.meter.calls, ...counts, ...delayed, ...stopCpu() };
}

function variant(cloud: BenchCloud, delayMs: number): Variant {
  const dynamo = cloud.newDynamoClient();
  const meter = createMeter();
  attachMeter(dynamo, meter, { dynamo: true });
  injectRoundTripDelay(dynamo, delayMs);
  const delayed = { attempts: 0 };
  // Beside the delay (same step, same priority): counts the attempts it applied to.
  dynamo.middlewareStack.add(
    (next) => async (args) => {
      delayed.attempts += 1;
      return next(args);
    },
    { step: 'finalizeRequest', name: 'benchRoundTripCount', priority: 'low' },
  );
  return {
    suffix: delayMs > 0 ? `-rtt${delayMs}ms` : '',
    delayMs,
    doc: DynamoDBDocumentClient.from(dynamo, { marshallOptions: { removeUndefinedValues: true } }),
    meter,
    delayed,
    startCpu: cpuMeter(cloud.dynamodbPid),
  };
}

let attempts = 0;
function nextAttempt(label: string): string {
  attempts += 1;
  return `bench-${label}-${Date.now().toString(36)}-${attempts}`;
}

function round(value: number, digits = 3): number {
  const factor = 10 ** digits;
  return Math.round(value * factor) / factor;
}

/** A fresh table before every measured run; the previous one is dropped (memory stays flat). */
class TableRotation {
  private current: BenchTable | undefined;

  constructor(private readonly cloud: BenchCloud) {}

  get tableName(): string {
    if (this.current === undefined) throw new Error('no table yet: prepare runs before every subject');
    return this.current.tableName;
  }

  async next(): Promise<void> {
    await this.current?.drop();
    this.current = await this.cloud.freshTable('prefixes');
  }

  async close(): Promise<void> {
    await this.current?.drop();
    this.current = undefined;
  }
}

interface Setting {
  readonly cloud: BenchCloud;
  readonly workload: Workload;
  readonly stats: EncodingStats;
  readonly limits: { readonly maxRows: number; readonly maxTokens: number };
  readonly repeats: number;
}

function storeOn(doc: DynamoDBDocumentClient, tableName: string, setting: Setting): PrefixStore {
  return createPrefixStore({
    client: doc,
    tableName,
    limits: setting.limits,
    writeConcurrency: CONCURRENCY,
    readConcurrency: CONCURRENCY,
    readWindowMs: READ_WINDOW_MS,
  });
}

/** Saves every row through `saveCut`; throws unless every call was acknowledged as saved. */
async function saveAll(store: PrefixStore, workload: Workload, attempt: string) {
  const cut = store.saveCut(workload.rows, { attempt, deadline: Date.now() + SAVE_DEADLINE_MS });
  const acks = await Promise.all(cut.acks);
  const report = await cut.done;
  const pointers: PrefixPointer[] = [];
  for (const ack of acks) {
    if (ack.status !== 'saved')
      throw new Error(`save of ${ack.callId} failed: ${ack.reason}: ${ack.message}`);
    pointers.push(ack.pointer);
  }
  const commits = report.groups.filter((group) => group.outcome === 'committed').length;
  return { pointers, commits };
}

function params(setting: Setting, v: Variant): Record<string, number | string> {
  const { spec, totalTokens } = setting.workload;
  return {
    calls: spec.calls,
    tokens_min: spec.minTokens,
    tokens_max: spec.maxTokens,
    token_counts: `log-uniform, seed ${spec.seed}`,
    token_ids: `uniform over a ${spec.vocab}-token vocabulary`,
    logprobs: 'float32',
    total_tokens: totalTokens,
    stored_items: setting.stats.items,
    concurrency: CONCURRENCY,
    group_max_rows: setting.limits.maxRows,
    group_max_tokens: setting.limits.maxTokens,
    repeats: setting.repeats,
    warm_up: 'one untimed save and restore of 32 calls through each side before the cases',
    // The one asymmetry, by contract: the baselines store and check rows only.
    ours_also:
      'writes one commit record per group (P2) and reads it back on restore, checking every row ' +
      'against it (P4a)',
    simulated_rtt_ms: v.delayMs,
    ...(v.delayMs > 0 ? { note: RTT_NOTE } : {}),
    load_avg_1m_start: round(loadavg()[0] ?? 0, 2),
  };
}

function saveCase(setting: Setting, v: Variant, tables: TableRotation): BenchCase {
  const { workload, stats } = setting;
  const ttl = (): number => Math.floor(Date.now() / 1000) + DEFAULT_PREFIX_TTL_SECONDS;
  const bytes = {
    bytes_per_token: round(stats.tokenIdBytesPerToken),
    row_bytes_per_token: round(stats.itemBytesPerToken),
  };
  const perCall = (concurrency: number) => (): Promise<Counts> =>
    measured(v, async () => {
      const table = { doc: v.doc, tableName: tables.tableName };
      await putPerCall(table, workload.rows, nextAttempt('put'), concurrency, ttl());
      return { wcu: v.meter.wcu, ...bytes };
    });
  return {
    name: `save-${workload.spec.calls}${v.suffix}`,
    params: params(setting, v),
    repeats: setting.repeats,
    prepare: () => tables.next(),
    ours: () =>
      measured(v, async () => {
        const store = storeOn(v.doc, tables.tableName, setting);
        const { commits } = await saveAll(store, workload, nextAttempt('cut'));
        return {
          min_calls: Math.ceil(stats.items / BATCH_WRITE_MAX_REQUESTS) + commits,
          wcu: v.meter.wcu,
          ...bytes,
        };
      }),
    baselines: { sequential: perCall(1), concurrent: perCall(CONCURRENCY) },
  };
}

/** The restore case, and the check of its last run's results (the next prepare checks the others). */
function restoreCase(
  setting: Setting,
  v: Variant,
  tables: TableRotation,
): { benchCase: BenchCase; checkLast: () => void } {
  const { workload } = setting;
  const expected = new Map(workload.rows.map((row) => [row.callId, row]));
  let pointers: PrefixPointer[] = [];
  let unchecked: RestoredCall[] = [];
  let distinctKeys = 0;

  // Checked outside the timed runs: every restore must give back exactly what was saved.
  const checkRestored = (): void => {
    for (const restored of unchecked) {
      const row = expected.get(restored.callId);
      const same =
        row !== undefined &&
        restored.tokens.length === row.tokens.length &&
        restored.tokens.every((token, i) => token === row.tokens[i]) &&
        restored.logprobs.every((logprob, i) => logprob === row.logprobs[i]);
      if (!same) throw new Error(`restore of ${restored.callId} differs from what was saved`);
    }
    if (unchecked.length > 0 && unchecked.length !== workload.rows.length) {
      throw new Error(`restored ${unchecked.length} of ${workload.rows.length} calls`);
    }
    unchecked = [];
  };

  const perCall = (concurrency: number) => (): Promise<Counts> =>
    measured(v, async () => {
      unchecked = await getPerCall({ doc: v.doc, tableName: tables.tableName }, pointers, concurrency);
      return { rcu: v.meter.rcu };
    });

  const benchCase: BenchCase = {
    name: `restore-${workload.spec.calls}${v.suffix}`,
    params: {
      ...params(setting, v),
      // Ours sends one batch's calls this many at a time; baseline_concurrent keeps `concurrency`.
      reads_in_flight_per_batch: DEFAULT_READS_IN_FLIGHT_PER_BATCH,
    },
    repeats: setting.repeats,
    // Untimed: a fresh table holding a fresh save, written without the simulated delay or the meter.
    prepare: async () => {
      checkRestored();
      await tables.next();
      const writer = storeOn(setting.cloud.admin.doc, tables.tableName, setting);
      pointers = (await saveAll(writer, workload, nextAttempt('prep'))).pointers;
      distinctKeys = new Set(pointers.flatMap((pointer) => pointerKeys(pointer))).size;
    },
    ours: () =>
      measured(v, async () => {
        const store = storeOn(v.doc, tables.tableName, setting);
        const started = performance.now();
        let firstAnswer = Number.POSITIVE_INFINITY;
        const outcomes = await Promise.all(
          pointers.map((pointer) =>
            store.restore({ pointer, contentId: workload.contentId }).then((outcome) => {
              firstAnswer = Math.min(firstAnswer, performance.now() - started);
              return outcome;
            }),
          ),
        );
        unchecked = outcomes.map((outcome) => {
          if (outcome.kind !== 'restored') {
            throw new Error(`restore of ${outcome.callId}: ${outcome.reason}: ${outcome.detail}`);
          }
          return outcome;
        });
        return {
          min_calls: Math.ceil(distinctKeys / BATCH_GET_MAX_KEYS),
          rcu: v.meter.rcu,
          // Restores are answered as their call comes back, not when the whole batch is in.
          first_answer_ms: round(firstAnswer),
        };
      }),
    baselines: { sequential: perCall(1), concurrent: perCall(CONCURRENCY) },
  };
  return { benchCase, checkLast: checkRestored };
}

interface Targets {
  /** rtt cases: every side's every DynamoDB call went through the same simulated delay. */
  readonly rtt_on_every_call?: boolean;
  readonly calls_over_min: number;
  readonly calls_within_3_of_min: boolean;
  readonly ratio_wall_target: number;
  readonly ratio_wall_met: boolean;
  readonly ratio_wall_concurrent: number;
  readonly not_slower_than_concurrent: boolean;
  readonly bytes_per_token_under_3?: boolean;
}

/** The targets, judged from the medians; recorded beside the numbers, never enforced. */
function judge(result: CaseResult, rtt: boolean, save: boolean): CaseResult {
  const ours = result.ours as SideResult;
  const concurrent = result.baseline_concurrent as SideResult;
  const oursCalls = ours.ddb_calls ?? 0;
  const minCalls = ours.min_calls ?? 0;
  const ratio = typeof result.ratio_wall === 'number' ? result.ratio_wall : 0;
  const ratioConcurrent = round(concurrent.wall_ms / Math.max(ours.wall_ms, 1e-3));
  // CPU of both processes: what each side costs, much less sensitive to a shared machine's load.
  const cpuOf = (side: SideResult): number => (side.cpu_ms_client ?? 0) + (side.cpu_ms_ddb_local ?? 0);
  const ratioCpu = round(cpuOf(result.baseline as SideResult) / Math.max(cpuOf(ours), 1));
  const target = rtt ? 5 : 2;
  const sides = [ours, result.baseline as SideResult, concurrent];
  const targets: Targets = {
    ...(rtt
      ? { rtt_on_every_call: sides.every((side) => (side.delayed_attempts ?? 0) >= (side.ddb_calls ?? 1)) }
      : {}),
    calls_over_min: oursCalls - minCalls,
    calls_within_3_of_min: oursCalls - minCalls <= 3,
    ratio_wall_target: target,
    ratio_wall_met: ratio >= target,
    ratio_wall_concurrent: ratioConcurrent,
    not_slower_than_concurrent: ratioConcurrent >= 1,
    ...(save ? { bytes_per_token_under_3: (ours.bytes_per_token ?? Number.POSITIVE_INFINITY) < 3 } : {}),
  };
  return {
    ...result,
    ratio_wall_concurrent: ratioConcurrent,
    ratio_cpu: ratioCpu,
    targets,
    load_avg_1m_end: round(loadavg()[0] ?? 0, 2),
  };
}

/**
 * One small untimed pass of every code path (both sides, save and restore) before the cases, so the
 * first measured run does not pay for JIT warm-up of DynamoDB Local (its JVM stops at the client
 * compiler, TieredStopAtLevel=1) and of this process.
 */
async function warmUp(setting: Setting, tables: TableRotation): Promise<void> {
  const small = buildWorkload({ calls: 32, minTokens: 256, maxTokens: 4_096, vocab: VOCAB, seed: SEED + 1 });
  await tables.next();
  const table = { doc: setting.cloud.admin.doc, tableName: tables.tableName };
  const store = storeOn(table.doc, table.tableName, setting);
  const { pointers } = await saveAll(store, small, nextAttempt('warm'));
  await Promise.all(pointers.map((pointer) => store.restore({ pointer, contentId: small.contentId })));
  await putPerCall(
    table,
    small.rows,
    nextAttempt('warm-put'),
    CONCURRENCY,
    Math.floor(Date.now() / 1000) + 3600,
  );
  await getPerCall(table, pointers, CONCURRENCY);
}

function summary(cases: readonly CaseResult[]): string {
  const lines = cases.map((result) => {
    const targets = result.targets as Targets;
    const marks = [
      ...(targets.rtt_on_every_call === undefined
        ? []
        : [`rtt on every call of every side ${targets.rtt_on_every_call ? 'ok' : 'MISSED'}`]),
      `calls ${targets.calls_within_3_of_min ? 'ok' : 'MISSED'} (+${targets.calls_over_min} over min)`,
      `ratio_wall ${String(result.ratio_wall)} ${targets.ratio_wall_met ? 'ok' : 'MISSED'} (>= ${targets.ratio_wall_target})`,
      `vs concurrent ${targets.ratio_wall_concurrent} ${targets.not_slower_than_concurrent ? 'ok' : 'MISSED'}`,
      ...(targets.bytes_per_token_under_3 === undefined
        ? []
        : [`bytes/token ${targets.bytes_per_token_under_3 ? 'ok' : 'MISSED'}`]),
    ];
    return `${result.name.padEnd(22)} ${marks.join('; ')}; ratio_cpu ${String(result.ratio_cpu)}`;
  });
  return ['targets (medians):', ...lines].join('\n');
}

export async function run(options: { quick: boolean }): Promise<BenchResult> {
  const workload = buildWorkload(
    options.quick
      ? { calls: 64, minTokens: 256, maxTokens: 4_096, vocab: VOCAB, seed: SEED }
      : { calls: 512, minTokens: 1_024, maxTokens: 32_768, vocab: VOCAB, seed: SEED },
  );
  const stats = encodingStats(workload);
  const loadAtStart = loadavg().map((load) => round(load, 2));
  console.log(`load average at the start: ${loadAtStart.join(' ')} (${machine().cpus} cpus, shared)`);
  const { prefixGroupRows, prefixGroupTokens } = config().tunables;
  return withBenchCloud(async (cloud) => {
    const setting: Setting = {
      cloud,
      workload,
      stats,
      limits: { maxRows: prefixGroupRows, maxTokens: prefixGroupTokens },
      repeats: options.quick ? 1 : 3,
    };
    const tables = new TableRotation(cloud);
    const cases: CaseResult[] = [];
    try {
      await warmUp(setting, tables);
      // BENCH_CASES=save,restore-512-rtt4ms runs a subset (for investigating one case): a name
      // matches a case whose name it is, or starts with followed by '-'. The default runs all four.
      const only = process.env.BENCH_CASES?.split(',');
      const wanted = (name: string): boolean =>
        only === undefined || only.some((prefix) => name === prefix || name.startsWith(`${prefix}-`));
      for (const delayMs of [0, SIMULATED_RTT_MS]) {
        const v = variant(cloud, delayMs);
        if (delayMs > 0) console.log(`${v.suffix.slice(1)} cases: ${RTT_NOTE}`);
        const save = saveCase(setting, v, tables);
        if (wanted(save.name)) cases.push(judge(await runCase(save), delayMs > 0, true));
        const restore = restoreCase(setting, v, tables);
        if (!wanted(restore.benchCase.name)) continue;
        const result = await runCase(restore.benchCase);
        restore.checkLast();
        cases.push(judge(result, delayMs > 0, false));
      }
    } finally {
      await tables.close();
    }
    console.log(
      `${summary(cases)}\nload average at the end: ${loadavg()
        .map((load) => round(load, 2))
        .join(' ')}\n`,
    );
    return { name: 'prefix', machine: machine(), quick: options.quick, cases };
  });
}
