import { beforeAll, describe, expect, it } from 'vitest';
import { requestIdTime } from '../../shared/base/ids.js';
import { schedulerSettings } from '../../shared/services/scheduler/settings.js';
import { COALESCE_POLL_MS, runTick, type TickOptions } from '../../shared/services/scheduler/tick.js';
import { wakeModels } from '../../shared/services/scheduler/wake.js';
import type { TestCloud } from '../support/cloud.js';
import {
  drainWorkItems,
  readModelRow,
  readyModel,
  schedulerCloud,
  stepIds,
  submitStep,
} from '../support/scheduler-harness.js';

/**
 * S5 on the local cloud: a tick woken by a forward_backward that has just arrived holds its model
 * back, waits out the window and plans it again from a fresh read, so the optim_step the SDK sends
 * right after it joins the same work item. The tick's clock and its wait are injected: the clock
 * stands at the pass's submit until the tick waits, so the look finds the pass inside its window
 * however long the intake took on this machine, and what arrives "during the window" is submitted
 * by the wait itself.
 */
describe('S5: one SDK step, one work item', () => {
  let cloud: TestCloud;
  beforeAll(async () => {
    cloud = await schedulerCloud({ COALESCE_WINDOW_MS: '25' });
  });

  /** A tick woken by `modelId` whose clock starts 1 ms after `requestId`'s submit; `during` runs in each wait. */
  function tickAfter(modelId: string, requestId: string, during: () => Promise<void> = async () => {}) {
    let clock = requestIdTime(requestId) + 1;
    const waits: number[] = [];
    const options: TickOptions = {
      wake: wakeModels([modelId]),
      now: () => clock,
      sleep: async (ms) => {
        waits.push(ms);
        await during();
        clock += ms;
      },
    };
    return { options, waits };
  }

  it('a forward_backward and the optim_step that arrives within its window go in one work item', async () => {
    const m = await readyModel(cloud.clients);
    const fb = await submitStep(cloud.clients, m, 'forward_backward');
    let optim: string | undefined;
    const { options, waits } = tickAfter(m, fb.requestId, async () => {
      optim = (await submitStep(cloud.clients, m, 'optim_step')).requestId;
    });

    const outcome = await runTick(options);

    // Its first look (1 ms after the submit) leaves 24 ms of the window; the next look finds the barrier.
    const firstWait = Math.min(24, COALESCE_POLL_MS);
    expect(waits).toEqual([firstWait]);
    expect(outcome.status).toBe('ran');
    expect(outcome.counters).toMatchObject({
      models_held: 1,
      coalesce_waits: 1,
      coalesce_wait_ms: firstWait,
      work_items: 1,
      steps_dispatched: 2,
    });
    // Round 2 read only the held model's rows (R5: its own snapshot, incremental).
    expect(outcome.counters.models_woken).toBe(2);
    const items = await drainWorkItems(cloud.clients);
    expect(items.map(stepIds)).toEqual([{ [m]: [fb.requestId, optim] }]);
  });

  it('a lone forward_backward is dispatched by the tick that held it once its window is over', async () => {
    const m = await readyModel(cloud.clients);
    const fb = await submitStep(cloud.clients, m, 'forward_backward');
    const { options, waits } = tickAfter(m, fb.requestId);

    const outcome = await runTick(options);

    // No other record wakes the scheduler here: this tick alone dispatches it, once the window is over.
    expect(waits.reduce((sum, ms) => sum + ms, 0)).toBe(24);
    expect(outcome.counters).toMatchObject({
      models_held: waits.length,
      coalesce_waits: waits.length,
      work_items: 1,
      steps_dispatched: 1,
    });
    const items = await drainWorkItems(cloud.clients);
    expect(items.map(stepIds)).toEqual([{ [m]: [fb.requestId] }]);
    expect((await readModelRow(cloud.clients, m)).planned_through).toBe(2);
  });

  it("the barrier's own tick may send the step first: the held tick then finds the model in flight (R3)", async () => {
    const m = await readyModel(cloud.clients);
    const fb = await submitStep(cloud.clients, m, 'forward_backward');
    let optim: string | undefined;
    const { options } = tickAfter(m, fb.requestId, async () => {
      optim = (await submitStep(cloud.clients, m, 'optim_step')).requestId;
      // The optim_step's stream record wakes a tick of its own, which sees fb + optim: a barrier ends the run.
      const own = await runTick({ wake: wakeModels([m]) });
      expect(own.counters).toMatchObject({ models_held: 0, work_items: 1, steps_dispatched: 2 });
    });

    const held = await runTick(options);

    expect(held.counters).toMatchObject({ models_held: 1, coalesce_waits: 1, work_items: 0 });
    const items = await drainWorkItems(cloud.clients);
    expect(items.map(stepIds)).toEqual([{ [m]: [fb.requestId, optim] }]);
  });

  it('with the window off (0) the pass is dispatched alone at once, and the step costs two work items', async () => {
    const m = await readyModel(cloud.clients);
    const fb = await submitStep(cloud.clients, m, 'forward_backward');
    const { options, waits } = tickAfter(m, fb.requestId);

    const outcome = await runTick({ ...options, settings: { ...schedulerSettings(), coalesceMs: 0 } });

    expect(waits).toEqual([]);
    expect(outcome.counters).toMatchObject({ models_held: 0, coalesce_waits: 0, work_items: 1 });
    expect((await drainWorkItems(cloud.clients)).map(stepIds)).toEqual([{ [m]: [fb.requestId] }]);
  });
});
