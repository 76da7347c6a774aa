import { marshall } from '@aws-sdk/util-dynamodb';
import type { AttributeValue, DynamoDBBatchResponse, DynamoDBRecord, DynamoDBStreamEvent } from 'aws-lambda';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LocalRuntime } from '../../local/runtime/lambda-runtime.js';
import { mintRequestId } from '../../shared/base/ids.js';
import type { WorkItem } from '../../shared/domain/planning/work-item.js';
import type { FutureRow } from '../../shared/domain/records.js';
import { type SchedulerAdapters, schedulerAdapters } from '../../shared/services/scheduler/adapters.js';
import { createSchedulerHandler } from '../../shared/services/scheduler/invocation.js';
import { schedulerSettings } from '../../shared/services/scheduler/settings.js';
import { runTick } from '../../shared/services/scheduler/tick.js';
import type { TestCloud } from '../support/cloud.js';
import { startCloudRuntime } from '../support/runtime.js';
import {
  commitWorkItem,
  drainWorkItems,
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
 * GSI lag (R5): DynamoDB Local serves the index from the base table with no lag, so the lag is
 * injected: a live-index reader that hides chosen rows, as an index that has not caught up would.
 */
function laggingIndex(hidden: Set<string>): SchedulerAdapters {
  const adapters = schedulerAdapters(schedulerSettings());
  const hide = (scan: Awaited<ReturnType<SchedulerAdapters['scanLive']>>) => ({
    ...scan,
    rows: scan.rows.filter((row) => !hidden.has(row.request_id)),
  });
  // Both index reads lag: the full look's and an incremental tick's (`live_by_model`).
  return {
    ...adapters,
    scanLive: async () => hide(await adapters.scanLive()),
    readLiveOf: async (ids) => hide(await adapters.readLiveOf(ids)),
  };
}

/** The record Lambda would deliver for a row as it now stands (the futures stream carries NEW_IMAGE). */
function streamRecord(row: FutureRow, sequenceNumber: string): DynamoDBRecord {
  return {
    eventName: 'INSERT',
    eventSource: 'aws:dynamodb',
    dynamodb: {
      Keys: { request_id: { S: row.request_id } },
      NewImage: marshall(row, { removeUndefinedValues: true }) as Record<string, AttributeValue>,
      SequenceNumber: sequenceNumber,
      StreamViewType: 'NEW_IMAGE',
    },
  };
}

describe('a tick during index lag (R5)', () => {
  let cloud: TestCloud;
  beforeEach(async () => {
    cloud = await schedulerCloud();
  });

  it('never dispatches past a seq the scan does not show, and picks it up once visible', async () => {
    const m = await readyModel(cloud.clients);
    const s2 = await submitStep(cloud.clients, m, 'forward_backward');
    const s3 = await submitStep(cloud.clients, m, 'forward_backward');
    const s4 = await submitStep(cloud.clients, m, 'optim_step');
    const hidden = new Set([s3.requestId]);

    await runTick({ adapters: laggingIndex(hidden) });
    const [first] = await drainWorkItems(cloud.clients);
    expect(stepIds(first!)).toEqual({ [m]: [s2.requestId] });
    await commitWorkItem(cloud.clients, first!);

    // Still lagging on s3: s4 is visible but must wait behind it.
    expect((await runTick({ adapters: laggingIndex(hidden) })).counters.work_items).toBe(0);
    hidden.clear();
    await runTick({ adapters: laggingIndex(hidden) });
    const [second] = await drainWorkItems(cloud.clients);
    expect(stepIds(second!)).toEqual({ [m]: [s3.requestId, s4.requestId] });
  });

  it('a hidden head stalls only its own model', async () => {
    const a = await readyModel(cloud.clients);
    const b = await readyModel(cloud.clients);
    const a2 = await submitStep(cloud.clients, a, 'forward_backward');
    await submitStep(cloud.clients, a, 'forward_backward');
    const b2 = await submitStep(cloud.clients, b, 'forward');
    await runTick({ adapters: laggingIndex(new Set([a2.requestId])) });
    const items = await drainWorkItems(cloud.clients);
    expect(items.map(stepIds)).toEqual([{ [b]: [b2.requestId] }]);
  });

  it('the handler reports a stream record whose row the scan did not show as a batch item failure', async () => {
    const m = await readyModel(cloud.clients);
    const visible = await submitStep(cloud.clients, m, 'forward_backward');
    const lagging = await submitStep(cloud.clients, m, 'forward_backward');
    const sample = await submitSampleRequest(cloud.clients, samplingSession());
    const hidden = new Set([lagging.requestId, sample.requestId]);
    const handler = createSchedulerHandler(() => ({ adapters: laggingIndex(hidden) }));
    const event = async (): Promise<DynamoDBStreamEvent> => ({
      Records: [
        streamRecord(await readFutureRow(cloud.clients, visible.requestId), '101'),
        streamRecord(await readFutureRow(cloud.clients, lagging.requestId), '102'),
        streamRecord(await readFutureRow(cloud.clients, sample.requestId), '103'),
      ],
    });

    const answer = await handler(await event());
    expect(answer.batchItemFailures).toEqual([{ itemIdentifier: '102' }, { itemIdentifier: '103' }]);
    const [item] = await drainWorkItems(cloud.clients);
    expect(stepIds(item!)).toEqual({ [m]: [visible.requestId] });

    // Visible now, but parked behind the model's work item in flight (R3): seen, so not retried;
    // the model's commit wakes the scheduler through the models stream.
    hidden.clear();
    const retried = await handler(await event());
    expect(retried.batchItemFailures).toEqual([]);
    const [samples] = await drainWorkItems(cloud.clients);
    expect(samples!.samples.map((s) => s.request_id)).toEqual([sample.requestId]);
  });

  describe('through the local runtime', () => {
    let runtime: LocalRuntime | undefined;
    afterEach(async () => {
      await runtime?.stop();
      runtime = undefined;
    });

    it('a lagging row is retried by the stream until a tick sees it, without waiting for the schedule', async () => {
      const m = await readyModel(cloud.clients);
      const hidden = new Set<string>();
      let hiddenScans = 0;
      const settings = schedulerSettings();
      const base = schedulerAdapters(settings);
      // The index catches up only after two scans have missed the row.
      const lag = (scan: Awaited<ReturnType<SchedulerAdapters['scanLive']>>) => {
        const rows = scan.rows.filter((row) => !hidden.has(row.request_id));
        if (rows.length < scan.rows.length && ++hiddenScans >= 2) hidden.clear();
        return { ...scan, rows };
      };
      const adapters: SchedulerAdapters = {
        ...base,
        scanLive: async () => lag(await base.scanLive()),
        readLiveOf: async (ids) => lag(await base.readLiveOf(ids)),
      };
      const real = createSchedulerHandler(() => ({ settings, adapters }));
      const answers: DynamoDBBatchResponse[] = [];
      const scheduler = async (event: DynamoDBStreamEvent) => {
        const answer = await real(event);
        answers.push(answer);
        return answer;
      };
      const executed: WorkItem[] = [];
      runtime = await startCloudRuntime(cloud, {
        functions: ['scheduler', 'worker'],
        handlers: { scheduler, worker: fakeWorker(cloud.clients, executed) },
      });

      // Hidden from the moment the row exists, as an index that has not caught up would.
      const step = mintRequestId();
      hidden.add(step);
      await submitStep(cloud.clients, m, 'forward_backward', 1, step);
      await waitFor(
        'the lagging row to complete',
        async () => (await readFutureRow(cloud.clients, step)).status === 'completed',
        20_000,
      );
      expect(hiddenScans).toBeGreaterThanOrEqual(2);
      expect(answers.some((answer) => answer.batchItemFailures.length > 0)).toBe(true);
      expect(
        executed.flatMap((item) => item.models.flatMap((model) => model.steps.map((s) => s.request_id))),
      ).toEqual([step]);
    });
  });
});
