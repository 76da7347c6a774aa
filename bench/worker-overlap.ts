import { existsSync } from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import { runWorkerProcess } from '../bin/worker.js';
import { startLocalStack } from '../local/runtime/stack.js';
import { EngineBackend } from '../shared/backend/engine/engine-backend.js';
import { EngineProcess } from '../shared/backend/engine/engine-process.js';
import {
  engineBaseModels,
  TINY_MODEL_DIR,
  torchEngineCommand,
} from '../shared/backend/engine/installed-engines.js';
import { BASE_MODELS_VAR } from '../shared/base/config.js';
import { FUNCTION_IDS } from '../shared/base/topology.js';
import { TinkerClient } from '../shared/client/tinker-client.js';
import { createApiKey } from '../shared/repositories/api-keys.js';
import { type BenchResult, type Counts, machine, runCase } from './harness.js';
import { countWorkItems } from './support/bench-cloud.js';

/**
 * `npm run bench -- worker-overlap [--quick]`: an RL loop's sampling round through `npm run worker`'s
 * loop (bin/worker.ts) on the torch engine (CPU, float32, 1 torch thread, the tiny model), the local
 * stack's API and scheduler around it and no worker Lambda. `calls` sampling calls of num_samples=1
 * arrive as `work_items` work items: each group of calls is submitted once the scheduler dispatched the
 * previous group's work item, as calls that reach the scheduler across its ticks do.
 *
 * - ours: the worker process with its default `--max-work-items` (4): every work item runs at once,
 *   so the later groups' calls join the engine's decode steps (B1) while the first group decodes;
 * - baseline (`one_at_a_time`): `--max-work-items 1`, each work item after the one before.
 *
 * Counts: tokens generated, tokens/s, work items dispatched for the round.
 */

interface Shape {
  readonly calls: number;
  readonly workItems: number;
  readonly newTokens: number;
  readonly repeats: number;
}

const FULL: Shape = { calls: 32, workItems: 3, newTokens: 128, repeats: 3 };
const QUICK: Shape = { calls: 16, workItems: 2, newTokens: 32, repeats: 2 };
const PROMPT = [5, 17, 29, 41, 53, 65, 77, 89];
const round3 = (value: number) => Math.round(value * 1000) / 1000;

export async function run(options: { quick: boolean }): Promise<BenchResult> {
  if (!existsSync(path.join(TINY_MODEL_DIR, 'config.json'))) {
    throw new Error(
      `bench worker-overlap: the tiny model is missing (${TINY_MODEL_DIR}): npm run engine:install`,
    );
  }
  const shape = options.quick ? QUICK : FULL;
  const command = torchEngineCommand({ baseModel: TINY_MODEL_DIR, device: 'cpu', dtype: 'float32' });
  const engine = new EngineProcess(
    { ...command, args: [...command.args, '--threads', '1'] },
    { worker: 'bench worker-overlap' },
  );
  const backend = new EngineBackend(engine, { name: 'torch' });
  await backend.start();
  const stack = await startLocalStack({
    prefix: `bench-overlap-${Date.now().toString(36)}`,
    extraEnv: {
      [BASE_MODELS_VAR]: JSON.stringify(engineBaseModels(TINY_MODEL_DIR)),
      POWERTOOLS_LOG_LEVEL: 'WARN',
    },
    // The worker process consumes the work queue; the worker Lambda does not run.
    runtime: { functions: FUNCTION_IDS.filter((id) => id !== 'worker') },
  });
  const load = [loadavg()[0] ?? 0];
  try {
    const { clients, resources } = stack;
    const apiKey = await createApiKey(clients.doc, resources.tables.registry, 'bench');
    const client = new TinkerClient({ baseUrl: stack.apiUrl, apiKey });
    const { session_id } = await client.createSession({ tags: ['bench-worker-overlap'] });
    const { sampling_session_id } = await client.createSamplingSession({
      session_id,
      sampling_session_seq_id: 0,
      base_model: TINY_MODEL_DIR,
    });
    const workItems = () => countWorkItems(clients.s3, resources.bucket);
    let seq = 0;
    /** One round: the groups submitted one dispatch apart, then every call awaited. */
    const sampleRound = async (): Promise<Counts> => {
      const before = await workItems();
      const per = Math.ceil(shape.calls / shape.workItems);
      const ids: string[] = [];
      for (let group = 0; group < shape.workItems; group++) {
        const size = Math.min(per, shape.calls - group * per);
        const submitted = await Promise.all(
          Array.from({ length: size }, () => {
            const seqId = seq++;
            return client.asample({
              sampling_session_id,
              seq_id: seqId,
              num_samples: 1,
              prompt: { chunks: [{ type: 'encoded_text', tokens: PROMPT }] },
              sampling_params: { max_tokens: shape.newTokens, temperature: 1, seed: seqId },
            });
          }),
        );
        ids.push(...submitted.map((answer) => answer.request_id));
        // The next group reaches the scheduler after this one's work item went out.
        while ((await workItems()) < before + group + 1)
          await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await Promise.all(ids.map((id) => client.waitFor(id)));
      const tokens = shape.calls * shape.newTokens;
      return { tokens, work_items: (await workItems()) - before };
    };
    /** A worker process loop for the side's round; stopped after it, its last poll awaited untimed. */
    let previous: Promise<unknown> = Promise.resolve();
    const side = (maxWorkItems: number | undefined) => async (): Promise<Counts> => {
      const stop = new AbortController();
      const started = performance.now();
      previous = stack.runtime.runAs('worker', () =>
        runWorkerProcess({
          queueUrl: resources.queueUrls.work,
          backend,
          sqs: clients.sqs,
          stop: stop.signal,
          waitTimeSeconds: 1,
          ...(maxWorkItems === undefined ? {} : { maxWorkItems }),
          print: () => {},
        }),
      );
      try {
        const counts = await sampleRound();
        const wall = performance.now() - started;
        load.push(loadavg()[0] ?? 0);
        return { ...counts, tokens_per_s: round3((counts.tokens ?? 0) / (wall / 1000)) };
      } finally {
        stop.abort();
      }
    };
    // Untimed: the engine's first sampler load and first decode steps.
    await side(undefined)();
    await previous;
    const result = await runCase({
      name: `sampling_round_${shape.calls}_calls_${shape.workItems}_work_items`,
      params: {
        calls: shape.calls,
        work_items: shape.workItems,
        num_samples: 1,
        max_tokens: shape.newTokens,
        prompt_tokens: PROMPT.length,
      },
      repeats: shape.repeats,
      prepare: async () => {
        await previous;
      },
      ours: side(undefined),
      baselines: { one_at_a_time: side(1) },
    });
    await previous;
    return {
      name: 'worker-overlap',
      machine: machine(),
      quick: options.quick,
      cases: [{ ...result, load_average: load.map(round3) }],
    };
  } finally {
    await stack.stop();
    await engine.stop();
  }
}
