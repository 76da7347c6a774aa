import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LocalRuntime } from '../../local/runtime/lambda-runtime.js';
import type { WorkItem } from '../../shared/domain/planning/work-item.js';
import { BARRIER_TYPES, PASS_TYPES } from '../../shared/domain/records.js';
import type { TestCloud } from '../support/cloud.js';
import { startCloudRuntime } from '../support/runtime.js';
import {
  createModel,
  fakeWorker,
  readFutureRow,
  readyModel,
  samplingSession,
  schedulerCloud,
  stepIds,
  submitSampleRequest,
  submitStep,
} from '../support/scheduler-harness.js';
import { waitFor } from '../support/wait.js';

/**
 * SkyRL's scenarios end to end: the real scheduler handler behind the topology's stream triggers,
 * the real sweeper on its schedule, and a fake worker that commits each work item it receives (so
 * the models stream wakes the scheduler for the next run, as in production).
 */
describe('scheduler through streams and ticks (local runtime)', () => {
  let cloud: TestCloud;
  let runtime: LocalRuntime | undefined;
  let executed: WorkItem[];

  beforeEach(async () => {
    cloud = await schedulerCloud();
    executed = [];
  });
  afterEach(async () => {
    await runtime?.stop();
    runtime = undefined;
  });

  const start = async () => {
    runtime = await startCloudRuntime(cloud, {
      functions: ['scheduler', 'worker', 'sweeper'],
      handlers: { worker: fakeWorker(cloud.clients, executed) },
    });
    return runtime;
  };

  const allCompleted = (ids: readonly string[]) =>
    waitFor(
      `${ids.length} futures to complete`,
      async () => {
        for (const id of ids)
          if ((await readFutureRow(cloud.clients, id)).status !== 'completed') return false;
        return true;
      },
      30_000,
      100,
    );

  /** Per model, the steps of every work item in the order they ran. */
  const runsByModel = () => {
    const runs = new Map<string, string[]>();
    for (const item of executed) {
      for (const model of item.models) {
        runs.set(model.model_id, [
          ...(runs.get(model.model_id) ?? []),
          ...model.steps.map((s) => s.request_id),
        ]);
      }
    }
    return runs;
  };

  /** R2 in every work item: within one model's run, no pass follows a barrier. */
  const expectTickRule = () => {
    for (const item of executed) {
      for (const model of item.models) {
        let barrier = false;
        for (const step of model.steps) {
          expect(barrier && PASS_TYPES.has(step.request_type)).toBe(false);
          if (BARRIER_TYPES.has(step.request_type)) barrier = true;
        }
      }
    }
  };

  it('queued SkyRL cases: the first tick holds fb1, optim2, optim5 and samples {1st, 3rd, base}; streams do the rest', async () => {
    const a = await readyModel(cloud.clients);
    const b = await readyModel(cloud.clients);
    const fb1 = await submitStep(cloud.clients, a, 'forward_backward');
    const optim2 = await submitStep(cloud.clients, a, 'optim_step');
    const fb3 = await submitStep(cloud.clients, a, 'forward_backward');
    const optim4 = await submitStep(cloud.clients, a, 'optim_step');
    const optim5 = await submitStep(cloud.clients, b, 'optim_step');
    const ckpt1 = samplingSession({ modelId: a, checkpointId: 'c-ckpt-1' });
    const ckpt2 = samplingSession({ modelId: a, checkpointId: 'c-ckpt-2' });
    const s1 = await submitSampleRequest(cloud.clients, ckpt1);
    const s2 = await submitSampleRequest(cloud.clients, ckpt2);
    const s3 = await submitSampleRequest(cloud.clients, ckpt1);
    const s4 = await submitSampleRequest(cloud.clients, samplingSession());

    // Streams start at LATEST, so nothing above was delivered: the sweeper's safety tick goes first.
    await (await start()).runSchedule('sweeper');
    const all = [fb1, optim2, fb3, optim4, optim5, s1, s2, s3, s4].map((r) => r.requestId);
    await allCompleted(all);

    const [first] = executed;
    expect(stepIds(first!)).toEqual({ [a]: [fb1.requestId, optim2.requestId], [b]: [optim5.requestId] });
    expect(first!.samples.map((s) => s.request_id)).toEqual([s1.requestId, s3.requestId, s4.requestId]);
    // The commit of a's first run woke the scheduler through the models stream.
    expect(runsByModel().get(a)).toEqual([fb1, optim2, fb3, optim4].map((r) => r.requestId));
    const sent = executed.flatMap((item) => [
      ...item.models.flatMap((model) => model.steps.map((s) => s.request_id)),
      ...item.samples.map((s) => s.request_id),
    ]);
    expect(sent.sort()).toEqual([...all].sort());
    expectTickRule();
  });

  it('requests submitted live are planned from stream records, in submit order, each once', async () => {
    await start();
    const { modelId: a, requestId: createA } = await createModel(cloud.clients);
    const { modelId: c, requestId: createC } = await createModel(cloud.clients);
    const types = [
      'forward_backward',
      'optim_step',
      'forward_backward',
      'forward',
      'optim_step',
      'forward_backward',
    ] as const;
    const submitted = new Map<string, string[]>([
      [a, [createA]],
      [c, [createC]],
    ]);
    const samples: string[] = [];
    for (const [index, type] of types.entries()) {
      for (const m of [a, c]) submitted.get(m)!.push((await submitStep(cloud.clients, m, type)).requestId);
      if (index % 2 === 0)
        samples.push((await submitSampleRequest(cloud.clients, samplingSession())).requestId);
    }
    await allCompleted([...[...submitted.values()].flat(), ...samples]);

    const runs = runsByModel();
    for (const [m, ids] of submitted) expect(runs.get(m)).toEqual(ids);
    expect(executed.flatMap((item) => item.samples.map((s) => s.request_id)).sort()).toEqual(
      [...samples].sort(),
    );
    expectTickRule();
    // Each work item continues exactly where the previous commit of its model left off (E4).
    const applied = new Map<string, number>();
    for (const item of executed) {
      for (const model of item.models) {
        expect(model.base_applied_through).toBe(applied.get(model.model_id) ?? 0);
        applied.set(model.model_id, model.steps.at(-1)!.seq);
      }
    }
  });
});
