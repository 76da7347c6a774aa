import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { config, resetConfig } from '../../shared/base/config.js';
import { startDrain, stopDrain } from '../../shared/services/ops/control-store.js';
import { runTick } from '../../shared/services/scheduler/tick.js';
import type { TestCloud } from '../support/cloud.js';
import {
  drainWorkItems,
  readyModel,
  schedulerCloud,
  stepIds,
  submitStep,
} from '../support/scheduler-harness.js';

/** The operator's drain switch and the oldest-pending metric, seen through real ticks. */
describe('scheduler drain and metrics', () => {
  let cloud: TestCloud;
  beforeEach(async () => {
    cloud = await schedulerCloud({ EMIT_METRICS: 'true' });
  });
  afterEach(() => {
    vi.restoreAllMocks();
    resetConfig();
  });

  it('dispatches nothing while the pool drains, and everything once the drain is lifted', async () => {
    const m = await readyModel(cloud.clients);
    const fb = await submitStep(cloud.clients, m, 'forward_backward');
    await startDrain(cloud.clients.doc, config().table('registry'), config().pool, 'test', {
      reason: 'maintenance',
    });

    const drained = await runTick();
    expect(drained.counters).toMatchObject({ work_items: 0, steps_dispatched: 0, payload_gets: 0 });
    expect(await drainWorkItems(cloud.clients)).toEqual([]);

    expect(await stopDrain(cloud.clients.doc, config().table('registry'), config().pool)).toBe(true);
    const resumed = await runTick();
    expect(resumed.counters).toMatchObject({ work_items: 1, steps_dispatched: 1 });
    const [item] = await drainWorkItems(cloud.clients);
    expect(stepIds(item!)).toEqual({ [m]: [fb.requestId] });
  });

  it('emits OldestPendingAgeSeconds for the pool on every tick', async () => {
    const lines: string[] = [];
    vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      lines.push(String(chunk));
      return true;
    });
    await runTick();
    vi.restoreAllMocks();
    const metrics = lines
      .filter((line) => line.includes('OldestPendingAgeSeconds'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(metrics.length).toBeGreaterThan(0);
    expect(metrics[0]).toMatchObject({ Pool: config().pool, OldestPendingAgeSeconds: 0 });
  });
});
