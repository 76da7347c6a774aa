import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import { createInterface, type Interface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { Context, SQSEvent } from 'aws-lambda';
import { createWorkerHandler } from '../functions/worker/handler.js';
import { startLocalStack } from '../local/runtime/stack.js';
import type { SamplerModel } from '../shared/backend/backend.js';
import { EngineBackend } from '../shared/backend/engine/engine-backend.js';
import { EngineProcess } from '../shared/backend/engine/engine-process.js';
import type { FrameBuilder } from '../shared/backend/engine/frame.js';
import {
  engineBaseModels,
  TINY_MODEL_DIR,
  TORCH_ENGINE_VENV,
  torchEngineCommand,
  torchEnginePython,
} from '../shared/backend/engine/installed-engines.js';
import {
  BASE_MODELS_VAR,
  COALESCE_WINDOW_VAR,
  engineCoalesceWindowMs,
  resetConfig,
} from '../shared/base/config.js';
import { requestIdTime } from '../shared/base/ids.js';
import { type In, TinkerClient } from '../shared/client/tinker-client.js';
import { createApiKey } from '../shared/repositories/api-keys.js';
import type { datum } from '../shared/services/api/schemas.js';
import { StateCache } from '../shared/services/worker/state-cache.js';
import { modelSizeCases } from './engine-sizes.js';
import { type BenchResult, type CaseResult, type Counts, machine, runCase, type Subject } from './harness.js';
import { AwsCallCounter, type CallCount, callsBetween } from './support/aws-calls.js';
import { countWorkItems } from './support/bench-cloud.js';
import { cpuMeter } from './support/cpu.js';

/**
 * `npm run bench -- engine [--quick]`: the torch engine (engines/torch, the tiny model, CPU, float32)
 * through the whole worker runtime as `npm start -- --engine torch` runs it (HTTP API, streams,
 * scheduler, S3 work item + queue, worker, engine process over docs/engine-protocol.md, commit,
 * retrieve_future), each case beside its baseline in the same run:
 *
 * - `forward_backward` / `sample`: tokens per second against the same work as a plain PEFT loop in
 *   one Python process (bench/support/engine_plain_loop.py: `get_peft_model`, log_softmax, AdamW;
 *   `generate` with a KV cache), steps sized at the start of the run so the plain loop's step takes
 *   at least a second here (`minStepMs`; the machine's load moves it several times over). The stack
 *   runs with S5's coalescing window as engine pools do (`engineCoalesceWindowMs`); training has a
 *   second baseline, `stack_window_off`: the same stack with the window off (COALESCE_WINDOW_MS=0),
 *   where the step's forward_backward is dispatched before its optim_step arrives; both stack sides
 *   report `optim_after_fb_ms`, the gap between the two submits. Sampling
 *   has a second baseline, `stack_one_slice`: the same stack with the worker sampling in one slice
 *   instead of 64-token slices, each of which resumes from the tokens so far (P6).
 * - `sample_rotation`: more sampling calls than the torch engine keeps live states for (8), submitted
 *   together so one work item runs them side by side, one slice each in turn, against the same calls
 *   through `generate` one after another, and through the stack in one slice.
 * - `concurrent_samples_<n>`: n sampling calls of num_samples=1 submitted at once (an RL loop's
 *   group x batch) through the stack, whose version 2 engine decodes them in shared steps (B1),
 *   beside one `generate` of n rows (`plain_generate_batch`), the same calls straight to the engine
 *   (`engine_alone`: the engine process without the stack), those calls on one adapter
 *   (`engine_alone_1_adapter`) and spread over 8 adapters (`engine_alone_8_adapters`), and the stack
 *   on a protocol version 1 engine (`stack_protocol_1`: one call at a time in 64-token slices, the
 *   figure before batched decode).
 * - `fixed_cost`: the smallest step (one datum of 16 tokens) the same two ways: what a work item
 *   costs besides its compute, with what it is made of: engine round trips, state bytes
 *   serialized and loaded, the engine's time in serialize/deserialize, and AWS calls.
 * - `eight_models`: eight models' forward_backward submitted together (the scheduler puts them in
 *   one work item; the engine fuses their passes into one batch) against one at a time.
 * - `state_moved`: a model's next work item reusing its resident engine handle (G3) against loading
 *   its state from S3 (a worker without the state cache, on an EngineBackend that keeps no
 *   resident handles, over the same engine process).
 *
 * - `model_sizes`: one SDK step (256 tokens, rank 32) on random Llama models of about 0.1M, 13M and
 *   100M parameters, each through a stack of its own with the state resident, beside a plain PEFT loop
 *   (./engine-sizes.ts).
 *
 * `BENCH_CASES=sample,fixed_cost` runs a subset (for investigating one case); the default runs all.
 *
 * Engine time per operation comes from the worker's side of the protocol (each request's round
 * trip, from when it is written); `fixed_ms_per_work_item` is a side's wall time less its engine
 * compute (run_passes, optim_step, sample), per work item.
 */

const HERE = path.dirname(fileURLToPath(import.meta.url));
const PLAIN_LOOP = path.join(HERE, 'support', 'engine_plain_loop.py');
const RANK = 8;
const SEED = 20_261_202;
const COMPUTE_OPS = ['run_passes', 'forward', 'forward_backward', 'optim_step', 'sample'];
/**
 * Torch threads on both sides: one, so the local stack has the machine's other core, and two torch
 * threads spinning against other jobs on 2 cores do not swing a step's time several times over.
 */
const TORCH_THREADS = 1;
/**
 * The base model every case runs on: the tiny model, or `BENCH_ENGINE_MODEL` (a model folder, e.g.
 * `.local/models/llama-13m`, written by `npm run engine:install`) to see the same cases at another
 * size (the results file then names the model: `engine-<folder>.json`).
 */
const MODEL_DIR =
  process.env.BENCH_ENGINE_MODEL === undefined
    ? TINY_MODEL_DIR
    : path.resolve(process.env.BENCH_ENGINE_MODEL);
const RESULT_NAME = MODEL_DIR === TINY_MODEL_DIR ? 'engine' : `engine-${path.basename(MODEL_DIR)}`;

interface Shape {
  readonly repeats: number;
  /**
   * The step sizes grow (doubling: datums, sampled tokens) until the plain loop's step takes this
   * long, measured here before the cases run, so the ratio is about steps of at least this much
   * compute on whatever the machine's load is.
   */
  readonly minStepMs: number;
  /** forward_backward: datums (the first size tried, the largest) x tokens per datum. */
  readonly batch: readonly [number, number, number];
  /** sample: sequences x new tokens (the first size tried, the largest), after a prompt of this many tokens. */
  readonly sample: readonly [number, number, number, number];
  /**
   * sample_rotation: sampling calls submitted together (more than the torch engine keeps live states
   * for, 8), each of sequences x new tokens, after sample's prompt.
   */
  readonly rotation: readonly [number, number, number];
  /** concurrent_samples: the call counts, each call num_samples=1 x this many new tokens. */
  readonly concurrent: readonly [readonly number[], number];
  readonly models: number;
  readonly modelBatch: readonly [number, number];
  readonly stateBatch: readonly [number, number];
}

const FULL: Shape = {
  repeats: 3,
  minStepMs: 1000,
  batch: [16, 512, 128],
  sample: [8, 32, 1024, 64],
  rotation: [16, 2, 256],
  concurrent: [[32, 128], 128],
  models: 8,
  modelBatch: [2, 128],
  stateBatch: [4, 128],
};
const QUICK: Shape = {
  repeats: 1,
  minStepMs: 250,
  batch: [8, 128, 128],
  sample: [4, 16, 256, 32],
  rotation: [12, 2, 128],
  concurrent: [[32], 64],
  models: 8,
  modelBatch: [1, 64],
  stateBatch: [2, 64],
};

/**
 * concurrent_samples' call counts: the shape's, or `BENCH_CONCURRENT_CALLS` (comma-separated, e.g.
 * `128` for the 128-call case at `--quick`'s 64 tokens).
 */
function concurrentCalls(shape: Shape): readonly number[] {
  const named = process.env.BENCH_CONCURRENT_CALLS;
  if (named === undefined || named === '') return shape.concurrent[0];
  const counts = named.split(',').map(Number);
  if (counts.some((count) => !Number.isInteger(count) || count < 1)) {
    throw new Error(`BENCH_CONCURRENT_CALLS must list positive integers, not ${named}`);
  }
  return counts;
}

/** Deterministic token rows (xorshift), the same in every run and on both sides. */
function tokenRows(rows: number, length: number, salt: number): number[][] {
  let x = (SEED ^ (salt * 0x9e3779b1)) >>> 0 || 1;
  const next = () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x % 256;
  };
  return Array.from({ length: rows }, () => Array.from({ length: length + 1 }, next));
}

function datumOf(row: readonly number[]): In<typeof datum> {
  const tokens = row.slice(0, -1);
  return {
    model_input: { chunks: [{ type: 'encoded_text', tokens }] },
    loss_fn_inputs: { target_tokens: { data: row.slice(1), dtype: 'int64', shape: [tokens.length] } },
  };
}

interface OpStats {
  calls: number;
  ms: number;
  bytesSent: number;
  bytesReceived: number;
}

function bytesIn(value: unknown): number {
  if (ArrayBuffer.isView(value)) return value.byteLength;
  if (Array.isArray(value)) return value.reduce((sum: number, item) => sum + bytesIn(item), 0);
  if (value !== null && typeof value === 'object') {
    return Object.values(value).reduce((sum: number, item) => sum + bytesIn(item), 0);
  }
  return 0;
}

/** The worker's side of the protocol, timing and sizing each request by op. */
class MeteredEngineProcess extends EngineProcess {
  readonly ops = new Map<string, OpStats>();
  /**
   * `sample` slices that named the previous slice's continuation. The engine continues each key it
   * still holds; the torch engine holds what it answered unless the state went stale, so these are
   * the slices that did not replay.
   */
  keyedSlices = 0;

  override async call(
    op: string,
    build: (frame: FrameBuilder) => Record<string, unknown>,
    options: { readonly run?: number; readonly timeoutMs?: number } = {},
  ): Promise<{ readonly result: Record<string, unknown>; readonly run: number }> {
    let sent = 0;
    // From when the request leaves the queue of requests (build runs just before it is written), so a
    // request waiting behind another is not counted twice.
    let started = 0;
    const answer = await super.call(
      op,
      (frame) => {
        started = performance.now();
        const args = build(frame);
        sent = frame.buffers.reduce((sum, buffer) => sum + buffer.byteLength, 0);
        if (op === 'sample' && typeof args.continuation === 'string') this.keyedSlices += 1;
        return args;
      },
      options,
    );
    const stats = this.ops.get(op) ?? { calls: 0, ms: 0, bytesSent: 0, bytesReceived: 0 };
    stats.calls += 1;
    stats.ms += performance.now() - started;
    stats.bytesSent += sent;
    stats.bytesReceived += bytesIn(answer.result);
    this.ops.set(op, stats);
    return answer;
  }

  snapshot(): Map<string, OpStats> {
    return new Map([...this.ops].map(([op, stats]) => [op, { ...stats }]));
  }
}

function opsBetween(before: Map<string, OpStats>, after: Map<string, OpStats>): Map<string, OpStats> {
  const diff = new Map<string, OpStats>();
  for (const [op, stats] of after) {
    const earlier = before.get(op) ?? { calls: 0, ms: 0, bytesSent: 0, bytesReceived: 0 };
    if (stats.calls === earlier.calls) continue;
    diff.set(op, {
      calls: stats.calls - earlier.calls,
      ms: stats.ms - earlier.ms,
      bytesSent: stats.bytesSent - earlier.bytesSent,
      bytesReceived: stats.bytesReceived - earlier.bytesReceived,
    });
  }
  return diff;
}

/** The plain loop's process: one JSON command per line, one JSON answer per line. */
class PlainLoop {
  readonly #child: ChildProcessWithoutNullStreams;
  readonly #lines: Interface;
  readonly #pending: ((line: string) => void)[] = [];
  #stderr = '';

  constructor(python: string) {
    this.#child = spawn(python, [PLAIN_LOOP, '--threads', String(TORCH_THREADS)], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.#child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      this.#stderr = (this.#stderr + chunk).slice(-4000);
    });
    this.#lines = createInterface({ input: this.#child.stdout });
    this.#lines.on('line', (line) => this.#pending.shift()?.(line));
    this.#child.on('exit', (code) => {
      for (const waiting of this.#pending.splice(0)) {
        waiting(JSON.stringify({ error: `plain loop exited (${code}): ${this.#stderr}` }));
      }
    });
  }

  async send(command: Record<string, unknown>): Promise<Record<string, number>> {
    const line = await new Promise<string>((resolve) => {
      this.#pending.push(resolve);
      this.#child.stdin.write(`${JSON.stringify(command)}\n`);
    });
    const answer = JSON.parse(line) as Record<string, number> & { error?: string };
    if (answer.error !== undefined) throw new Error(answer.error);
    return answer;
  }

  stop(): void {
    this.#child.stdin.end();
  }
}

const round3 = (value: number) => Math.round(value * 1000) / 1000;

export async function run(options: { quick: boolean }): Promise<BenchResult> {
  if (!existsSync(path.join(MODEL_DIR, 'config.json'))) {
    throw new Error(`bench engine: the model is missing (${MODEL_DIR}): npm run engine:install`);
  }
  const python = torchEnginePython(TORCH_ENGINE_VENV);
  const shape = options.quick ? QUICK : FULL;
  const only = process.env.BENCH_CASES?.split(',');
  const selected = (name: string) => only === undefined || only.includes(name);
  // The size sweep runs first, each size on a stack and engine of its own (S1's figures).
  const sizeCases = selected('model_sizes')
    ? await modelSizeCases({
        python,
        threads: TORCH_THREADS,
        repeats: shape.repeats,
        steps: options.quick ? 2 : 3,
        tokenRows,
        meteredEngine: (command) => {
          const metered = new MeteredEngineProcess(command, { worker: 'bench engine sizes' });
          const sum = (pick: (op: string, stats: OpStats) => number) =>
            [...metered.snapshot()].reduce((total, [op, stats]) => total + pick(op, stats), 0);
          return {
            process: metered,
            computeMs: () => sum((op, stats) => (COMPUTE_OPS.includes(op) ? stats.ms : 0)),
            opMs: (name) => sum((op, stats) => (op === name ? stats.ms : 0)),
            stateBytesSerialized: () =>
              sum((op, stats) => (op === 'serialize_state' ? stats.bytesReceived : 0)),
          };
        },
        plainLoop: () => new PlainLoop(python),
      })
    : [];
  if (only?.every((name) => name === 'model_sizes')) {
    return { name: RESULT_NAME, machine: machine(), quick: options.quick, cases: sizeCases };
  }
  const command = torchEngineCommand({ baseModel: MODEL_DIR, device: 'cpu', dtype: 'float32' });
  const engine = new MeteredEngineProcess(
    { ...command, args: [...command.args, '--threads', String(TORCH_THREADS)] },
    { worker: 'bench engine' },
  );
  const resident = new EngineBackend(engine, { name: 'torch' });
  // Keeps no resident handle: every work item loads its state's bytes (state_moved's baseline).
  const reloading = new EngineBackend(engine, { name: 'torch', maxResidentStates: 0 });
  await resident.start();
  // The same engine pinned to protocol version 1 (slices, one request at a time): concurrent_samples' baseline.
  const legacyEngine = new EngineProcess(
    { ...command, args: [...command.args, '--threads', String(TORCH_THREADS)] },
    { worker: 'bench engine v1', protocolVersions: [1] },
  );
  const legacy = new EngineBackend(legacyEngine, { name: 'torch' });
  let mode: 'default' | 'reload' | 'one_slice' | 'legacy' = 'default';
  const handlers = {
    default: createWorkerHandler({ backend: resident }),
    reload: createWorkerHandler({ backend: reloading, worker: { states: new StateCache(0) } }),
    // Samples in one slice (no cut checks between 64-token slices, no prefix replays): sample's second baseline.
    one_slice: createWorkerHandler({ backend: resident, worker: { sampleSliceTokens: 1 << 20 } }),
    legacy: createWorkerHandler({ backend: legacy }),
  };
  const calls = new AwsCallCounter();
  const stack = await startLocalStack({
    prefix: `bench-engine-${Date.now().toString(36)}`,
    extraEnv: {
      [BASE_MODELS_VAR]: JSON.stringify(engineBaseModels(MODEL_DIR)),
      // As `npm start -- --engine` runs (local/runtime/engine-stack.ts); `stack_window_off` turns it off.
      [COALESCE_WINDOW_VAR]: String(engineCoalesceWindowMs()),
      POWERTOOLS_LOG_LEVEL: 'WARN',
    },
    runtime: {
      handlers: {
        worker: (event: unknown, context: unknown) => handlers[mode](event as SQSEvent, context as Context),
      },
      onSdkClient: calls.install,
    },
  });
  const plain = new PlainLoop(python);
  const cpu = cpuMeter(stack.cloud.dynamodbPid);
  const onSignal = () =>
    void stack
      .stop()
      .then(() => Promise.all([engine.stop(), legacyEngine.stop()]))
      .finally(() => process.exit(130));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const load = [loadavg()[0] ?? 0];
  try {
    const { clients, resources } = stack;
    const apiKey = await createApiKey(clients.doc, resources.tables.registry, 'bench');
    const client = new TinkerClient({ baseUrl: stack.apiUrl, apiKey });
    const { session_id } = await client.createSession({ tags: ['bench-engine'] });
    let modelSeq = 0;
    let samplingSeq = 0;
    const seqIds = new Map<string, number>();
    const nextSeq = (modelId: string) => {
      const next = (seqIds.get(modelId) ?? 0) + 1;
      seqIds.set(modelId, next);
      return next;
    };
    const createModel = async (seed: number) => {
      const created = await client.createModel({
        session_id,
        model_seq_id: modelSeq++,
        base_model: MODEL_DIR,
        lora_config: { rank: RANK, seed },
      });
      await client.waitFor(created.request_id);
      return created.model_id;
    };
    const forwardBackward = async (modelId: string, rows: readonly number[][]) =>
      (
        await client.forwardBackward({
          model_id: modelId,
          seq_id: nextSeq(modelId),
          forward_backward_input: { data: rows.map(datumOf), loss_fn: 'cross_entropy' },
        })
      ).request_id;
    const optimStep = async (modelId: string) =>
      (
        await client.optimStep({
          model_id: modelId,
          seq_id: nextSeq(modelId),
          adam_params: { learning_rate: 1e-4 },
        })
      ).request_id;
    /** The last training step's gap between its two submits (their request ids' times). */
    let optimAfterFbMs = 0;
    /** One training step as the SDK sends it: both requests, then wait for both. */
    const trainStep = async (modelId: string, rows: readonly number[][]) => {
      const ids = [await forwardBackward(modelId, rows), await optimStep(modelId)];
      optimAfterFbMs = requestIdTime(ids[1]!) - requestIdTime(ids[0]!);
      await Promise.all(ids.map((id) => client.waitFor(id)));
    };
    /** A training side, with the gap between its step's submits. */
    const withGap =
      (side: Subject): Subject =>
      async () => ({ ...(await side()), optim_after_fb_ms: optimAfterFbMs });
    /**
     * `side` with S5's coalescing window off: the scheduler reads its settings per invocation, so
     * the variable and a fresh read of the configuration reach its next tick.
     */
    const windowOff =
      (side: Subject): Subject =>
      async () => {
        const before = process.env[COALESCE_WINDOW_VAR];
        process.env[COALESCE_WINDOW_VAR] = '0';
        resetConfig();
        try {
          return await side();
        } finally {
          if (before === undefined) delete process.env[COALESCE_WINDOW_VAR];
          else process.env[COALESCE_WINDOW_VAR] = before;
          resetConfig();
        }
      };
    const workItems = () => countWorkItems(clients.s3, resources.bucket);

    /**
     * `calls` sampling calls of `numSamples` x `newTokens` after `prompt`, on a sampling session of their
     * own, submitted at once through `worker`'s handler and awaited together; `seedOf(first, c)` keys
     * call c of the batch whose first seq_id is `first`.
     */
    const callsTogether = async (
      calls: number,
      numSamples: number,
      newTokens: number,
      prompt: readonly number[],
      seedOf: (first: number, call: number) => number,
    ) => {
      const { sampling_session_id } = await client.createSamplingSession({
        session_id,
        sampling_session_seq_id: samplingSeq++,
        base_model: MODEL_DIR,
      });
      let callSeq = 0;
      return async (worker: typeof mode): Promise<void> => {
        mode = worker;
        try {
          const first = callSeq;
          callSeq += calls;
          const submitted = await Promise.all(
            Array.from({ length: calls }, (_, c) =>
              client.asample({
                sampling_session_id,
                seq_id: first + c,
                num_samples: numSamples,
                prompt: { chunks: [{ type: 'encoded_text', tokens: [...prompt] }] },
                sampling_params: { max_tokens: newTokens, temperature: 1, seed: seedOf(first, c) },
              }),
            ),
          );
          await Promise.all(submitted.map(({ request_id }) => client.waitFor(request_id)));
        } finally {
          mode = 'default';
        }
      };
    };

    /** Runs `body` through the stack and reports what it cost: engine ops, work items, AWS calls. */
    const throughStack = (tokens: number, body: () => Promise<void>) => async (): Promise<Counts> => {
      const itemsBefore = await workItems();
      const opsBefore = engine.snapshot();
      const keyedBefore = engine.keyedSlices;
      const callsBefore = calls.snapshot();
      const cpuEnd = cpu();
      const started = performance.now();
      await body();
      const wall = performance.now() - started;
      const { cpu_ms_client: cpuNode, cpu_ms_ddb_local: cpuDdbLocal } = cpuEnd();
      const items = (await workItems()) - itemsBefore;
      const ops = opsBetween(opsBefore, engine.snapshot());
      const aws = callsBetween(callsBefore, calls.snapshot());
      load.push(loadavg()[0] ?? 0);
      const counts = breakdown(wall, items, ops, aws);
      const slices = ops.get('sample')?.calls ?? 0;
      if (slices > 0) {
        counts.sample_slices = slices;
        counts.sample_slices_keyed = engine.keyedSlices - keyedBefore;
      }
      // The stack's CPU (this process: api, scheduler, worker, fauxqs, the client; and DynamoDB
      // Local's JVM), which says more than wall time where other jobs share the machine.
      return {
        tokens,
        tokens_per_s: round3(tokens / (wall / 1000)),
        ...counts,
        cpu_ms_node: cpuNode,
        cpu_ms_ddb_local: cpuDdbLocal,
      };
    };
    const plainly = (tokens: number, command: Record<string, unknown>) => async (): Promise<Counts> => {
      const started = performance.now();
      const answer = await plain.send(command);
      const wall = performance.now() - started;
      return {
        tokens,
        tokens_per_s: round3(tokens / (wall / 1000)),
        compute_ms: round3(answer.compute_ms ?? 0),
      };
    };

    const tinyRows = tokenRows(1, 16, 2);
    await plain.send({ op: 'setup', model: MODEL_DIR, rank: RANK, batches: { tiny: tinyRows } });
    /** The smallest size from `start` (doubling, at most `max`) whose plain step takes minStepMs. */
    const calibrate = async (start: number, max: number, stepMs: (size: number) => Promise<number>) => {
      for (let size = start; ; size *= 2) {
        const ms = Math.min(await stepMs(size), await stepMs(size));
        if (ms >= shape.minStepMs || size * 2 > max) return { size, plainStepMs: round3(ms) };
      }
    };
    const [firstDatums, maxDatums, length] = shape.batch;
    const trainSize = await calibrate(firstDatums, maxDatums, async (size) => {
      await plain.send({ op: 'add_batch', name: `step-${size}`, rows: tokenRows(size, length, 1) });
      return (await plain.send({ op: 'train_step', batch: `step-${size}` })).compute_ms ?? 0;
    });
    const datums = trainSize.size;
    const batchRows = tokenRows(datums, length, 1);
    const trained = await createModel(1);
    // Warm-up, untimed: the first step of a model and of the plain loop.
    await trainStep(trained, tinyRows);
    await plain.send({ op: 'train_step', batch: 'tiny' });

    const cases: CaseResult[] = [...sizeCases];
    if (selected('forward_backward')) {
      cases.push(
        await runCase({
          name: 'forward_backward',
          params: {
            datums,
            tokens_per_datum: length,
            rank: RANK,
            steps: 'forward_backward + optim_step',
            plain_step_ms_when_sized: trainSize.plainStepMs,
          },
          // The headline ratio: more repeats, since other jobs on the machine swing single steps.
          repeats: shape.repeats + 2,
          ours: withGap(throughStack(datums * length, () => trainStep(trained, batchRows))),
          baselines: {
            plain_peft_loop: plainly(datums * length, { op: 'train_step', batch: `step-${datums}` }),
            stack_window_off: windowOff(
              withGap(throughStack(datums * length, () => trainStep(trained, batchRows))),
            ),
          },
        }),
      );
    }

    if (selected('sample')) {
      const [samples, firstTokens, maxTokens, promptLength] = shape.sample;
      const prompt = tokenRows(1, promptLength - 1, 3)[0] as number[];
      const sampleSize = await calibrate(
        firstTokens,
        maxTokens,
        async (size) =>
          (await plain.send({ op: 'sample', prompt, num_samples: samples, max_tokens: size, seed: 1 }))
            .compute_ms ?? 0,
      );
      const newTokens = sampleSize.size;
      const { sampling_session_id } = await client.createSamplingSession({
        session_id,
        sampling_session_seq_id: samplingSeq++,
        base_model: MODEL_DIR,
      });
      let sampleSeq = 0;
      const sampleOnce = async (worker: typeof mode) => {
        mode = worker;
        try {
          const seq = sampleSeq++;
          const { request_id } = await client.asample({
            sampling_session_id,
            seq_id: seq,
            num_samples: samples,
            prompt: { chunks: [{ type: 'encoded_text', tokens: prompt }] },
            sampling_params: { max_tokens: newTokens, temperature: 1, seed: seq },
          });
          await client.waitFor(request_id);
        } finally {
          mode = 'default';
        }
      };
      cases.push(
        await runCase({
          name: 'sample',
          params: {
            num_samples: samples,
            max_tokens: newTokens,
            prompt_tokens: promptLength,
            plain_step_ms_when_sized: sampleSize.plainStepMs,
          },
          repeats: shape.repeats,
          ours: throughStack(samples * newTokens, () => sampleOnce('default')),
          baselines: {
            plain_peft_loop: plainly(samples * newTokens, {
              op: 'sample',
              prompt,
              num_samples: samples,
              max_tokens: newTokens,
              seed: 1,
            }),
            stack_one_slice: throughStack(samples * newTokens, () => sampleOnce('one_slice')),
          },
        }),
      );
    }

    if (selected('sample_rotation')) {
      const [calls, samples, newTokens] = shape.rotation;
      const prompt = tokenRows(1, shape.sample[3] - 1, 5)[0] as number[];
      // Each call's draws keyed by its place in the batch: every repeat samples the same tokens.
      const rotation = await callsTogether(calls, samples, newTokens, prompt, (_, c) => c);
      const tokens = calls * samples * newTokens;
      cases.push(
        await runCase({
          name: 'sample_rotation',
          params: { calls, num_samples: samples, max_tokens: newTokens, prompt_tokens: prompt.length },
          repeats: shape.repeats,
          ours: throughStack(tokens, () => rotation('default')),
          baselines: {
            plain_peft_loop: async (): Promise<Counts> => {
              const started = performance.now();
              let computeMs = 0;
              for (let c = 0; c < calls; c++) {
                const answer = await plain.send({
                  op: 'sample',
                  prompt,
                  num_samples: samples,
                  max_tokens: newTokens,
                  seed: c,
                });
                computeMs += answer.compute_ms ?? 0;
              }
              const wall = performance.now() - started;
              return { tokens, tokens_per_s: round3(tokens / (wall / 1000)), compute_ms: round3(computeMs) };
            },
            stack_one_slice: throughStack(tokens, () => rotation('one_slice')),
          },
        }),
      );
    }

    for (const calls of concurrentCalls(shape)) {
      const name = `concurrent_samples_${calls}`;
      if (!selected(name) && !selected('concurrent_samples')) continue;
      const newTokens = shape.concurrent[1];
      const prompt = tokenRows(1, shape.sample[3] - 1, 7)[0] as number[];
      const together = await callsTogether(calls, 1, newTokens, prompt, (first, c) => first + c);
      // The engine alone: the same calls straight to the engine process, on the base model or spread
      // over 8 adapters (4 calls each at 32).
      // Its own backend over the same process, so the stack's samplers do not evict these 9.
      const direct = new EngineBackend(engine, { name: 'torch', maxSamplers: 16 });
      const base = await direct.loadSampler(MODEL_DIR, null);
      const adapters = await Promise.all(
        Array.from({ length: 8 }, async (_, a) => {
          const state = await resident.createModel({
            base_model: MODEL_DIR,
            lora_config: { rank: RANK, seed: 100 + a },
          });
          return direct.loadSampler(MODEL_DIR, await resident.exportWeights(state, 'sampler'));
        }),
      );
      const alone = (samplerOf: (call: number) => SamplerModel) => async (): Promise<Counts> => {
        const started = performance.now();
        await Promise.all(
          Array.from({ length: calls }, (_, c) =>
            direct.sample(samplerOf(c), {
              num_samples: 1,
              prompt: { chunks: [{ type: 'encoded_text', tokens: Int32Array.from(prompt) }] },
              sampling_params: { max_tokens: newTokens, temperature: 1, seed: c },
            }),
          ),
        );
        const wall = performance.now() - started;
        return { tokens: calls * newTokens, tokens_per_s: round3((calls * newTokens) / (wall / 1000)) };
      };
      const tokens = calls * newTokens;
      cases.push(
        await runCase({
          name,
          params: { calls, num_samples: 1, max_tokens: newTokens, prompt_tokens: prompt.length },
          repeats: shape.repeats,
          ours: throughStack(tokens, () => together('default')),
          baselines: {
            plain_generate_batch: plainly(tokens, {
              op: 'sample',
              prompt,
              num_samples: calls,
              max_tokens: newTokens,
              seed: 1,
            }),
            engine_alone: alone(() => base),
            engine_alone_1_adapter: alone(() => adapters[0] as SamplerModel),
            engine_alone_8_adapters: alone((c) => adapters[c % adapters.length] as SamplerModel),
            stack_protocol_1: throughStack(tokens, () => together('legacy')),
          },
        }),
      );
    }

    if (selected('fixed_cost')) {
      cases.push(
        await runCase({
          name: 'fixed_cost',
          params: { datums: 1, tokens_per_datum: 16, steps: 'forward_backward + optim_step' },
          repeats: shape.repeats + 2,
          ours: throughStack(16, () => trainStep(trained, tinyRows)),
          baselines: { plain_peft_loop: plainly(16, { op: 'train_step', batch: 'tiny' }) },
        }),
      );
    }

    if (selected('eight_models')) {
      const models = await Promise.all(Array.from({ length: shape.models }, (_, m) => createModel(10 + m)));
      const [modelDatums, modelLength] = shape.modelBatch;
      const modelRows = models.map((_, m) => tokenRows(modelDatums, modelLength, 100 + m));
      const modelTokens = shape.models * modelDatums * modelLength;
      cases.push(
        await runCase({
          name: 'eight_models',
          params: { models: shape.models, datums: modelDatums, tokens_per_datum: modelLength },
          repeats: shape.repeats,
          ours: throughStack(modelTokens, async () => {
            const ids = await Promise.all(models.map((id, m) => forwardBackward(id, modelRows[m] ?? [])));
            await Promise.all(ids.map((id) => client.waitFor(id)));
          }),
          baselines: {
            one_at_a_time: throughStack(modelTokens, async () => {
              for (const [m, id] of models.entries()) {
                await client.waitFor(await forwardBackward(id, modelRows[m] ?? []));
              }
            }),
          },
        }),
      );
    }

    if (selected('state_moved')) {
      const [stateDatums, stateLength] = shape.stateBatch;
      const stateRows = tokenRows(stateDatums, stateLength, 4);
      const moved = await createModel(2);
      await trainStep(moved, stateRows);
      const stateStep = (reloaded: boolean) =>
        throughStack(stateDatums * stateLength, async () => {
          mode = reloaded ? 'reload' : 'default';
          try {
            await trainStep(moved, stateRows);
          } finally {
            mode = 'default';
          }
        });
      cases.push(
        await runCase({
          name: 'state_moved',
          params: { datums: stateDatums, tokens_per_datum: stateLength, rank: RANK },
          repeats: shape.repeats + 2,
          ours: stateStep(false),
          baselines: { reloaded_from_s3: stateStep(true) },
        }),
      );
    }

    return {
      name: RESULT_NAME,
      machine: machine(),
      quick: options.quick,
      cases: cases.map((c) => ({
        ...c,
        load_average: `${Math.min(...load).toFixed(1)}-${Math.max(...load).toFixed(1)}`,
      })),
    };
  } finally {
    plain.stop();
    await stack.stop();
    await Promise.all([engine.stop(), legacyEngine.stop()]);
  }
}

/** What a side through the stack was made of, per work item. */
function breakdown(
  wall: number,
  items: number,
  ops: Map<string, OpStats>,
  aws: readonly CallCount[],
): Counts {
  const perItem = (value: number) => round3(value / Math.max(items, 1));
  let computeMs = 0;
  let roundTrips = 0;
  const counts: Counts = { work_items: items };
  for (const [op, stats] of ops) {
    roundTrips += stats.calls;
    if (COMPUTE_OPS.includes(op)) computeMs += stats.ms;
  }
  const stateOps = ['serialize_state', 'deserialize_state'] as const;
  counts.engine_compute_ms = round3(computeMs);
  counts.fixed_ms_per_work_item = perItem(wall - computeMs);
  counts.engine_round_trips_per_work_item = perItem(roundTrips);
  for (const op of stateOps) {
    const stats = ops.get(op);
    counts[`${op}_per_work_item`] = perItem(stats?.calls ?? 0);
    counts[`${op}_ms_per_work_item`] = perItem(stats?.ms ?? 0);
  }
  counts.state_bytes_serialized_per_work_item = perItem(ops.get('serialize_state')?.bytesReceived ?? 0);
  counts.state_bytes_loaded_per_work_item = perItem(ops.get('deserialize_state')?.bytesSent ?? 0);
  const other = [...ops]
    .filter(([op]) => !COMPUTE_OPS.includes(op) && !(stateOps as readonly string[]).includes(op))
    .reduce((sum, [, stats]) => sum + stats.ms, 0);
  counts.other_engine_ms_per_work_item = perItem(other);
  const sum = (match: (count: CallCount) => boolean) =>
    aws.filter(match).reduce((total, count) => total + count.calls, 0);
  counts.aws_calls_per_work_item = perItem(sum(() => true));
  counts.worker_aws_calls_per_work_item = perItem(sum((count) => count.caller === 'worker'));
  counts.worker_s3_gets_per_work_item = perItem(
    sum((count) => count.caller === 'worker' && count.service === 's3' && count.operation === 'GetObject'),
  );
  return counts;
}
