import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RolloutCuts } from '../../local/demos/parts/rollout-cuts.js';
import { EngineBackend } from '../../shared/backend/engine/engine-backend.js';
import { EngineProcess } from '../../shared/backend/engine/engine-process.js';
import { TINY_MODEL_DIR } from '../../shared/backend/engine/installed-engines.js';
import { config } from '../../shared/base/config.js';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { requestCut } from '../../shared/services/ops/control-store.js';
import { expectClose } from '../support/close.js';
import { engineUnderTest } from '../support/engine/engine-under-test.js';
import { answersOverHttp, Pipeline, waitTerminal } from '../support/pipeline.js';
import { TenantDriver } from '../support/tenant-driver.js';
import { WorkerHarness } from '../support/worker-harness.js';
import { countFutures, generateWorkload } from '../support/workload.js';

/**
 * R1 end to end on the torch engine (G1-G4): a random workload (training, saves, loads, RL passes and
 * samples, with an operator's cut while samples generate) goes over HTTP, the streams, the scheduler
 * and SQS to two workers (the worker Lambda and a worker process) sharing one engine process, and
 * every answer equals running each request one by one in submit order on a fresh engine process,
 * within TOLERANCE: the pipeline fuses passes of several models into one batch, whose float32 sums
 * round differently from one model's alone. Sampled tokens, stop reasons and errors are exact.
 */

const SEED = Number(process.env.E2E_SEED ?? 20261202);
/** Relative (absolute below 1) difference allowed in any number of an answer. */
const TOLERANCE = 1e-3;

const torch = engineUnderTest();

describe.skipIf(torch.command === undefined)(
  'a random workload through the pipeline on the torch engine',
  () => {
    const cuts = new RolloutCuts();
    const sampling = { onEvent: cuts.onEvent, cutPollMs: 50, sampleSliceTokens: 2 };
    const engines: EngineBackend[] = [];
    const engine = () => {
      if (torch.command === undefined) throw new Error('no engine');
      const backend = new EngineBackend(new EngineProcess(torch.command, { requestTimeoutMs: 120_000 }));
      engines.push(backend);
      return backend;
    };
    let harness: WorkerHarness;
    let pipeline: Pipeline;

    beforeAll(async () => {
      harness = await WorkerHarness.start({ baseModel: torch.baseModel ?? TINY_MODEL_DIR });
      const backend = engine();
      await backend.start();
      pipeline = await Pipeline.start(harness, {
        lambdaWorker: true,
        lambdaWorkerOptions: sampling,
        backend,
      });
    }, 240_000);
    afterAll(async () => {
      await pipeline?.stop();
      await Promise.all(engines.map((backend) => backend.stop()));
    });

    it(`2 tenants, 3 models, ~60 requests (seed ${SEED}), RL passes, a cut: answers within ${TOLERANCE} of the sequential engine`, {
      timeout: 600_000,
    }, async () => {
      const clients = new Map<string, TinkerClient>();
      const second = pipeline.startProcessWorker(sampling);
      let settled = false;
      const cutting = (async () => {
        const cut = () =>
          requestCut(harness.cloud.clients.doc, config().table('registry'), config().pool, 'e2e-engine');
        while (cuts.cutRequests.length < 1 && !settled) await cuts.cutAtNextSlice(cut);
      })();
      const scripts = generateWorkload({ seed: SEED, modelsPerTenant: [2, 1], actionsPerTenant: [32, 26] });
      const drivers = await Promise.all(
        scripts.map(async (script) => {
          const client = await pipeline.client(script.tenant);
          clients.set(script.tenant, client);
          return new TenantDriver(script, client, harness);
        }),
      );
      await Promise.all(drivers.map((driver) => driver.run()));
      const ids = harness.submissions.map((submission) => submission.request_id);
      expect(ids.length).toBe(countFutures(scripts));
      await waitTerminal(harness, ids, 300_000);
      settled = true;
      cuts.cancel();
      await cutting;
      await second.stop();

      const answers = Object.fromEntries(await answersOverHttp(harness, clients));
      const expected = Object.fromEntries(await harness.oracle({ backend: engine() }));
      expect(Object.keys(answers)).toHaveLength(harness.submissions.length);
      expectClose(answers, expected, TOLERANCE);
      const kinds = new Set(harness.submissions.map((submission) => submission.kind));
      for (const kind of ['forward_backward', 'optim_step', 'save_weights_for_sampler', 'sample'] as const) {
        expect(kinds).toContain(kind);
      }
      const rlPasses = harness.submissions.filter(
        (s) => s.kind === 'forward_backward' && s.input.data.some((d) => 'advantages' in d.loss_fn_inputs),
      );
      expect(rlPasses.length).toBeGreaterThan(0);
    });
  },
);
