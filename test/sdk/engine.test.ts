import path from 'node:path';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { engineStack } from '../../local/runtime/engine-stack.js';
import { type LocalStack, startLocalStack } from '../../local/runtime/stack.js';
import type { EngineBackend } from '../../shared/backend/engine/engine-backend.js';
import { writeRandomModel } from '../../shared/backend/engine/installed-engines.js';
import { LOCAL_DIR } from '../../shared/base/env-file.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import { engineUnderTest } from '../support/engine/engine-under-test.js';
import { LOGPROB_TOLERANCE, runScenario, type ScenarioReport } from './scenario.js';

/**
 * The official SDK on the torch engine (G1-G6): a stack of this file's own, started as
 * `npm start -- --engine torch` starts it (local/runtime/engine-stack.ts; the tiny model), and
 * scenarios/engine.py run against it with SDK 0.25.0. Without the engine's venv it skips with one line
 * (under CI, which installs the engine, it fails instead: test/support/prerequisites.ts).
 */

const SDK_VERSION = '0.25.0';
/** The tiny model on a loaded 2-core machine: each step is a work item through the whole stack. */
const SCENARIO_TIMEOUT_MS = 300_000;
/** The SDK carries float32; the engine computes in float32 with fused batches of different shapes. */
const FLOAT32_RELATIVE = 1e-4;

const torch = engineUnderTest();
const tier = inject('sdkTier');
const sdk = tier.sdks.find((candidate) => candidate.version === SDK_VERSION);
if (torch.command !== undefined && sdk === undefined) {
  console.warn(`test:sdk: the engine scenario runs on SDK ${SDK_VERSION}, which is not found; skipped`);
}

/** A stack of its own on the torch engine serving `model` (as `npm start -- --engine torch`), and `scenario` run against it. */
async function engineScenario(
  model: string | undefined,
  prefix: string,
  scenario: string,
): Promise<{ stack: LocalStack; backend: EngineBackend; baseModel: string; report: ScenarioReport }> {
  const started = await engineStack('torch', model, 'test:sdk');
  const stack = await startLocalStack({
    prefix,
    streamPollIntervalMs: 50,
    ...started.options,
    extraEnv: { ...started.options.extraEnv, POWERTOOLS_LOG_LEVEL: 'WARN' },
  });
  const { doc } = stack.clients;
  const table = stack.resources.tables.registry;
  const [owner, other] = await Promise.all([
    createApiKey(doc, table, `${prefix}-owner`),
    createApiKey(doc, table, `${prefix}-other`),
  ]);
  if (sdk === undefined) throw new Error('no SDK');
  const report = await runScenario(
    { ...tier, baseUrl: stack.apiUrl, apiKeys: { owner, other } },
    sdk,
    scenario,
    {
      timeoutMs: SCENARIO_TIMEOUT_MS,
      torch: true,
      env: { TINKER_BASE_MODEL: started.baseModel },
    },
  );
  return { stack, backend: started.backend, baseModel: started.baseModel, report };
}

describe.skipIf(torch.command === undefined || torch.baseModel === undefined || sdk === undefined)(
  `the torch engine through the whole stack (SDK ${SDK_VERSION})`,
  () => {
    let stack: LocalStack | undefined;
    let backend: EngineBackend | undefined;
    let report: ScenarioReport | undefined;
    let baseModel = '';

    beforeAll(async () => {
      ({ stack, backend, baseModel, report } = await engineScenario(torch.baseModel, 'sdk-engine', 'engine'));
    }, SCENARIO_TIMEOUT_MS + 120_000);

    afterAll(async () => {
      await stack?.stop();
      await backend?.stop();
    }, 60_000);

    const observed = <T>(check: string): T => {
      if (report === undefined) throw new Error('the engine scenario did not run');
      return report.observed<T>(check);
    };

    it('trains a Hugging Face model with its loss falling, named by its folder', () => {
      const { losses, model_name } = observed<{ losses: number[]; model_name: string }>(
        'training_loss_falls',
      );
      expect(model_name).toBe(baseModel);
      expect(losses).toHaveLength(8);
      expect(losses.at(-1)).toBeLessThan((losses[0] as number) * 0.9);
    });

    it('save_state and load_state restore the logprobs, and the optimizer’s next step', () => {
      const o = observed<{
        path: string;
        moved_by_training: number;
        reloaded: number;
        restored: number;
        next_step: number;
      }>('save_state_and_restore');
      expect(o.path).toMatch(/^tinker:\/\/.+\/weights\/engine-two-steps$/);
      expect(o.moved_by_training).toBeGreaterThan(1e-3);
      expect(o.reloaded).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
      expect(o.restored).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
      expect(o.next_step).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
    });

    it('samples reproducibly by seed with finite logprobs, from the trained and the base model', () => {
      const o = observed<{
        tokens: number[][];
        again: number[][];
        stop_reasons: string[];
        logprobs_finite: boolean;
        logprob_counts: number[];
        prompt_logprobs: number;
        base_lengths: number[];
      }>('sampling');
      expect(o.tokens).toHaveLength(3);
      expect(o.again).toEqual(o.tokens);
      for (const tokens of o.tokens) expect(tokens.length).toBeLessThanOrEqual(8);
      expect(o.logprob_counts).toEqual(o.tokens.map((tokens) => tokens.length));
      expect(o.logprobs_finite).toBe(true);
      expect(o.prompt_logprobs).toBe(4);
      expect(o.base_lengths).toEqual([4, 4]);
    });

    it('forward_backward_custom with a cross-entropy loss equals the built-in cross_entropy', (ctx) => {
      const o = observed<{
        skipped?: string;
        custom_loss_sum: number;
        builtin_loss_sum: number;
        next_step_difference: number;
        step_moved_logprobs: number;
      }>('forward_backward_custom_equals_cross_entropy');
      if (o.skipped !== undefined) {
        ctx.skip(o.skipped);
        return;
      }
      const tolerance = FLOAT32_RELATIVE * (1 + Math.abs(o.builtin_loss_sum));
      expect(Math.abs(o.custom_loss_sum - o.builtin_loss_sum)).toBeLessThan(tolerance);
      expect(o.step_moved_logprobs).toBeGreaterThan(1e-3);
      expect(o.next_step_difference).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
    });

    it('takes an RL step: importance_sampling on the sampler’s logprobs, ratio 1', () => {
      const o = observed<{
        rewards: number[];
        loss_sum: number;
        expected_loss_sum: number;
        sampler_vs_trainer_logprobs: number;
        metrics: Record<string, number>;
      }>('rl_step_with_sampler_logprobs');
      expect(o.rewards).toHaveLength(4);
      expect(o.sampler_vs_trainer_logprobs).toBeLessThan(1e-4);
      expect(Math.abs(o.loss_sum - o.expected_loss_sum)).toBeLessThan(
        1e-3 * (1 + Math.abs(o.expected_loss_sum)),
      );
      expect(o.metrics['loss:sum']).toBeCloseTo(o.loss_sum, 4);
    });
  },
);

/** Larger than one request body of the local S3 (fauxqs takes at most 11 MiB). */
const LOCAL_S3_BODY_LIMIT = 11 * 1024 * 1024;

describe.skipIf(torch.command === undefined || torch.baseModel === undefined || sdk === undefined)(
  `a model whose state exceeds one request body of the local S3 (SDK ${SDK_VERSION})`,
  () => {
    let stack: LocalStack | undefined;
    let backend: EngineBackend | undefined;
    let report: ScenarioReport | undefined;
    const objects: { key: string; size: number }[] = [];

    beforeAll(async () => {
      // 12.9M parameters; at rank 32 its state (weights, both Adam moments, gradient) is 20 MB.
      const model = await writeRandomModel(path.join(LOCAL_DIR, 'models', 'llama-13m'), {
        hidden: 512,
        layers: 4,
      });
      ({ stack, backend, report } = await engineScenario(model, 'sdk-engine-large', 'engine_large_state'));
      for (const prefix of ['state/', 'checkpoints/']) {
        const page = await stack.clients.s3.send(
          new ListObjectsV2Command({ Bucket: stack.resources.bucket, Prefix: prefix }),
        );
        for (const object of page.Contents ?? [])
          objects.push({ key: object.Key ?? '', size: object.Size ?? 0 });
      }
    }, SCENARIO_TIMEOUT_MS + 120_000);

    afterAll(async () => {
      await stack?.stop();
      await backend?.stop();
    }, 60_000);

    it('trains, saves its state in parts, and a client created from that state takes the same next step', () => {
      if (report === undefined) throw new Error('the large-state scenario did not run');
      const o = report.observed<{ path: string; losses: number[]; restored: number; next_step: number }>(
        'large_state_trains_saves_and_restores',
      );
      expect(o.path).toMatch(/^tinker:\/\/.+\/weights\/large-state$/);
      expect(o.losses.every(Number.isFinite)).toBe(true);
      expect(o.restored).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
      expect(o.next_step).toBeLessThanOrEqual(LOGPROB_TOLERANCE);
      // The training checkpoint and the snapshot a save or load forces (S3) are each past one request
      // body, written in parts; states are written only there (one per model), not at each step (S1).
      const large = (prefix: string) =>
        objects.filter((object) => object.key.startsWith(prefix) && object.size > LOCAL_S3_BODY_LIMIT);
      expect(large('checkpoints/').length, JSON.stringify(objects)).toBeGreaterThan(0);
      expect(large('state/').length, JSON.stringify(objects)).toBeGreaterThan(0);
      expect(objects.filter((object) => object.key.startsWith('state/')).length).toBeLessThanOrEqual(2);
    });
  },
);
