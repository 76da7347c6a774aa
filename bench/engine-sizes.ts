import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { createWorkerHandler } from '../functions/worker/handler.js';
import { startLocalStack } from '../local/runtime/stack.js';
import { EngineBackend } from '../shared/backend/engine/engine-backend.js';
import {
  engineBaseModels,
  TINY_MODEL_DIR,
  torchEngineCommand,
  writeRandomModel,
} from '../shared/backend/engine/installed-engines.js';
import { BASE_MODELS_VAR, COALESCE_WINDOW_VAR, engineCoalesceWindowMs } from '../shared/base/config.js';
import { LOCAL_DIR } from '../shared/base/env-file.js';
import { TinkerClient } from '../shared/client/tinker-client.js';
import { createApiKey } from '../shared/repositories/api-keys.js';
import { Residency } from '../shared/services/worker/residency.js';
import { type CaseResult, type Counts, runCase } from './harness.js';

/**
 * The model-size sweep of `npm run bench -- engine` (case `model_sizes`): the same SDK step (one datum
 * of 256 tokens, `forward_backward` + `optim_step` submitted together, LoRA rank 32) on random Llama
 * folders of three sizes, written by the engine's own tool (`python -m tinker_engine.tiny_model`), each
 * through its own local stack and engine process as `npm start -- --engine torch` runs it (the worker
 * keeps the state resident, S1), beside a plain PEFT loop on the same model in the same run.
 *
 * What it reports per size: the ratio of the two (tokens per second), the runtime's cost per step (the
 * stack's wall per step less the engine's compute for it), work items per step, state bytes serialized
 * and state objects written per step (both 0 between snapshots with resident state).
 */

export interface ModelSize {
  readonly name: string;
  /** Absent: the tiny model `npm run engine:install` writes. */
  readonly dims?: {
    readonly hidden: number;
    readonly layers: number;
    readonly heads: number;
    readonly intermediate: number;
  };
}

export const MODEL_SIZES: readonly ModelSize[] = [
  { name: 'tiny' },
  // About 13M parameters (vocabulary 256): the "hidden 512, 4 layers".
  { name: '13m', dims: { hidden: 512, layers: 4, heads: 8, intermediate: 1376 } },
  // About 100M parameters: "hidden 1024, 8 layers".
  { name: '100m', dims: { hidden: 1024, layers: 8, heads: 16, intermediate: 2752 } },
];

const RANK = 32;
const TOKENS = 256;
const MODEL_SEED = 20_261_205;

/** The folder of a size, written by the engine's tool when missing (the same bytes every time). */
async function modelDir(size: ModelSize): Promise<string> {
  if (size.dims === undefined) return TINY_MODEL_DIR;
  return writeRandomModel(path.join(LOCAL_DIR, 'models', `bench-llama-${size.name}`), {
    ...size.dims,
    seed: MODEL_SEED,
  });
}

export interface SizeSweepTools {
  readonly python: string;
  readonly threads: number;
  readonly repeats: number;
  /** SDK steps per timed side. */
  readonly steps: number;
  readonly tokenRows: (rows: number, length: number, salt: number) => number[][];
  /** A metered engine process over `command` and its ops' compute time since a mark. */
  readonly meteredEngine: (command: ReturnType<typeof torchEngineCommand>) => {
    readonly process: ConstructorParameters<typeof EngineBackend>[0];
    readonly computeMs: () => number;
    /** Engine time so far in one op (`run_passes`, `optim_step`). */
    readonly opMs: (op: string) => number;
    readonly stateBytesSerialized: () => number;
  };
  readonly plainLoop: () => {
    send(command: Record<string, unknown>): Promise<Record<string, number>>;
    stop(): void;
  };
}

const round3 = (value: number) => Math.round(value * 1000) / 1000;

/** One case per size, each on its own stack and engine, stopped before the next size starts. */
export async function modelSizeCases(tools: SizeSweepTools): Promise<CaseResult[]> {
  // `BENCH_MODEL_SIZES=tiny,13m` runs some of the sizes.
  const only = process.env.BENCH_MODEL_SIZES?.split(',');
  const sizes = MODEL_SIZES.filter((size) => only === undefined || only.includes(size.name));
  const cases: CaseResult[] = [];
  for (const size of sizes) cases.push(await sizeCase(tools, size));
  return cases;
}

async function sizeCase(tools: SizeSweepTools, size: ModelSize): Promise<CaseResult> {
  const dir = await modelDir(size);
  const command = torchEngineCommand({ baseModel: dir, device: 'cpu', dtype: 'float32' });
  const metered = tools.meteredEngine({
    ...command,
    args: [...command.args, '--threads', String(tools.threads)],
  });
  const backend = new EngineBackend(metered.process, { name: 'torch' });
  await backend.start();
  const residency = new Residency(backend);
  const stack = await startLocalStack({
    prefix: `bench-sizes-${size.name}-${Date.now().toString(36)}`,
    extraEnv: {
      [BASE_MODELS_VAR]: JSON.stringify(engineBaseModels(dir)),
      // As `npm start -- --engine torch` runs: one work item per SDK step (S5).
      [COALESCE_WINDOW_VAR]: String(engineCoalesceWindowMs()),
      POWERTOOLS_LOG_LEVEL: 'WARN',
    },
    runtime: { handlers: { worker: createWorkerHandler({ backend, worker: { residency } }) } },
  });
  const plain = tools.plainLoop();
  const load = [loadavg()[0] ?? 0];
  try {
    const { clients, resources } = stack;
    const apiKey = await createApiKey(clients.doc, resources.tables.registry, `bench-${size.name}`);
    const client = new TinkerClient({ baseUrl: stack.apiUrl, apiKey });
    const { session_id } = await client.createSession({ tags: ['bench-sizes'] });
    const created = await client.createModel({
      session_id,
      model_seq_id: 0,
      base_model: dir,
      lora_config: { rank: RANK, seed: 1 },
    });
    await client.waitFor(created.request_id);
    const modelId = created.model_id;
    const row = tools.tokenRows(1, TOKENS, 7)[0] as number[];
    const datum = {
      model_input: { chunks: [{ type: 'encoded_text' as const, tokens: row.slice(0, -1) }] },
      loss_fn_inputs: {
        target_tokens: { data: row.slice(1), dtype: 'int64' as const, shape: [TOKENS] },
      },
    };
    let seq = 0;
    const sdkStep = async () => {
      const fb = await client.forwardBackward({
        model_id: modelId,
        seq_id: ++seq,
        forward_backward_input: { data: [datum], loss_fn: 'cross_entropy' },
      });
      const optim = await client.optimStep({
        model_id: modelId,
        seq_id: ++seq,
        adam_params: { learning_rate: 1e-4 },
      });
      await Promise.all([client.waitFor(fb.request_id), client.waitFor(optim.request_id)]);
    };
    const count = async (prefix: string) => {
      const page = await clients.s3.send(
        new ListObjectsV2Command({ Bucket: resources.bucket, Prefix: prefix }),
      );
      return page.KeyCount ?? 0;
    };
    await plain.send({ op: 'setup', model: dir, rank: RANK, batches: { step: [row] } });
    // Warm-up, untimed: the first step on each side.
    await sdkStep();
    await plain.send({ op: 'train_step', batch: 'step' });
    const config = JSON.parse(readFileSync(path.join(dir, 'config.json'), 'utf8')) as {
      hidden_size: number;
      num_hidden_layers: number;
    };
    const tokens = tools.steps * TOKENS;
    return await runCase({
      name: `model_sizes_${size.name}`,
      params: {
        model: size.name,
        hidden_size: config.hidden_size,
        layers: config.num_hidden_layers,
        rank: RANK,
        tokens_per_step: TOKENS,
        steps: tools.steps,
      },
      repeats: tools.repeats,
      ours: async (): Promise<Counts> => {
        const [items, states] = [await count('work/'), await count('state/')];
        const compute = metered.computeMs();
        const [passes, optim] = [metered.opMs('run_passes'), metered.opMs('optim_step')];
        const serialized = metered.stateBytesSerialized();
        const started = performance.now();
        for (let step = 0; step < tools.steps; step++) await sdkStep();
        const wall = performance.now() - started;
        const computeMs = metered.computeMs() - compute;
        load.push(loadavg()[0] ?? 0);
        return {
          tokens,
          tokens_per_s: round3(tokens / (wall / 1000)),
          engine_compute_ms_per_step: round3(computeMs / tools.steps),
          run_passes_ms_per_step: round3((metered.opMs('run_passes') - passes) / tools.steps),
          optim_step_ms_per_step: round3((metered.opMs('optim_step') - optim) / tools.steps),
          runtime_ms_per_step: round3((wall - computeMs) / tools.steps),
          work_items_per_step: round3(((await count('work/')) - items) / tools.steps),
          state_bytes_serialized_per_step: round3(
            (metered.stateBytesSerialized() - serialized) / tools.steps,
          ),
          state_objects_written_per_step: round3(((await count('state/')) - states) / tools.steps),
        };
      },
      baselines: {
        plain_peft_loop: async (): Promise<Counts> => {
          const started = performance.now();
          let computeMs = 0;
          for (let step = 0; step < tools.steps; step++) {
            computeMs += (await plain.send({ op: 'train_step', batch: 'step' })).compute_ms ?? 0;
          }
          const wall = performance.now() - started;
          return {
            tokens,
            tokens_per_s: round3(tokens / (wall / 1000)),
            compute_ms_per_step: round3(computeMs / tools.steps),
          };
        },
      },
    }).then((result) => ({
      ...result,
      load_average: `${Math.min(...load).toFixed(1)}-${Math.max(...load).toFixed(1)}`,
    }));
  } finally {
    plain.stop();
    await residency.letGoAll();
    await stack.stop();
    await backend.stop();
  }
}
