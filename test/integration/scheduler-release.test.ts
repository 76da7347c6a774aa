import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterEach, beforeEach, describe, expect, it, type MockInstance, vi } from 'vitest';
import { config } from '../../shared/base/config.js';
import { logger } from '../../shared/base/logger.js';
import { replanFor, sampleClaimTtl } from '../../shared/domain/planning/claim.js';
import type { WorkItem } from '../../shared/domain/planning/work-item.js';
import type { SampleClaimRecord } from '../../shared/domain/records.js';
import { type ModelRow, registryKey } from '../../shared/domain/records.js';
import { replanModel } from '../../shared/repositories/models.js';
import { type SchedulerAdapters, schedulerAdapters } from '../../shared/services/scheduler/adapters.js';
import { schedulerSettings } from '../../shared/services/scheduler/settings.js';
import { runTick } from '../../shared/services/scheduler/tick.js';
import type { TestCloud } from '../support/cloud.js';
import { serverError, timeoutError } from '../support/faults/errors.js';
import { CrashPoints } from '../support/faults.js';
import {
  commitWorkItem,
  drainManifests,
  drainWorkItems,
  readFutureRow,
  readModelRow,
  readyModel,
  samplingSession,
  schedulerCloud,
  stepIds,
  submitSampleRequest,
  submitStep,
} from '../support/scheduler-harness.js';

/**
 * A pass that fails after claiming and before its manifest is sent gives its claims back (E7): the
 * models and samples are dispatched by the very next tick, not after their lease, and no model is
 * charged an attempt for the infrastructure's failure. A crash (which runs no code) still leaves
 * them to the lease and the sweeper.
 */

interface Scene {
  readonly models: string[];
  /** Request ids of each model's steps, in seq order. */
  readonly steps: Record<string, string[]>;
  readonly sample: string;
  /** The model rows before the failed tick. */
  readonly before: Map<string, ModelRow>;
}

/** Two idle models with a forward_backward and an optim_step each, and one sample. */
async function scene(cloud: TestCloud): Promise<Scene> {
  const models = [await readyModel(cloud.clients), await readyModel(cloud.clients)];
  const steps: Record<string, string[]> = {};
  for (const m of models) {
    steps[m] = [
      (await submitStep(cloud.clients, m, 'forward_backward')).requestId,
      (await submitStep(cloud.clients, m, 'optim_step')).requestId,
    ];
  }
  const sample = (await submitSampleRequest(cloud.clients, samplingSession())).requestId;
  const before = new Map<string, ModelRow>();
  for (const m of models) before.set(m, await readModelRow(cloud.clients, m));
  return { models, steps, sample, before };
}

async function readSampleClaim(cloud: TestCloud, requestId: string): Promise<SampleClaimRecord | undefined> {
  const answer = await cloud.clients.doc.send(
    new GetCommand({
      TableName: config().table('registry'),
      Key: { pk: registryKey.sampleClaim(requestId) },
      ConsistentRead: true,
    }),
  );
  return answer.Item as SampleClaimRecord | undefined;
}

/** The scheduler's adapters with `wrap` applied to one member (the rest talk to the local cloud). */
function adaptersWith(wrap: (adapters: SchedulerAdapters) => Partial<SchedulerAdapters>): SchedulerAdapters {
  const adapters = schedulerAdapters(schedulerSettings());
  return { ...adapters, ...wrap(adapters) };
}

/** The warnings the scheduler logged about failed passes (one per failed pass). */
function failedPassWarnings(warn: MockInstance<typeof logger.warn>): Record<string, unknown>[] {
  return warn.mock.calls
    .filter((call) => call[0] === 'dispatch failed after claiming; claims given back')
    .map((call) => call[1] as Record<string, unknown>);
}

/** Every request id a set of work items carries. */
function requestIds(items: readonly WorkItem[]): string[] {
  return items.flatMap((item) => [
    ...item.models.flatMap((model) => model.steps.map((step) => step.request_id)),
    ...item.samples.map((sample) => sample.request_id),
  ]);
}

/** Runs the next tick at once (no clock moved): it dispatches everything, then it all commits once. */
async function expectDispatchedAgainAndCompletedOnce(cloud: TestCloud, s: Scene): Promise<void> {
  const outcome = await runTick();
  expect(outcome.counters).toMatchObject({
    models_claimed: 2,
    samples_claimed: 1,
    work_items: 1,
    steps_dispatched: 4,
    samples_dispatched: 1,
  });
  const items = await drainWorkItems(cloud.clients);
  expect(items).toHaveLength(1);
  expect(stepIds(items[0]!)).toEqual(s.steps);
  expect(items[0]!.samples.map((sample) => sample.request_id)).toEqual([s.sample]);
  for (const model of items[0]!.models) {
    // The epoch claimed by the failed pass stays; this claim is the next one.
    expect(model.epoch).toBe(s.before.get(model.model_id)!.epoch + 2);
  }
  expect(await commitWorkItem(cloud.clients, items[0]!)).toBe(true);

  expect((await runTick()).counters.work_items).toBe(0);
  expect(await drainManifests(cloud.clients)).toEqual([]);
  expect(requestIds(items).sort()).toEqual([...Object.values(s.steps).flat(), s.sample].sort());
  for (const id of [...Object.values(s.steps).flat(), s.sample]) {
    expect((await readFutureRow(cloud.clients, id)).status).toBe('completed');
  }
  for (const m of s.models) {
    expect(await readModelRow(cloud.clients, m)).toMatchObject({ applied_through: 3, planned_through: 3 });
  }
}

describe('a pass that fails after claiming gives its claims back (E7)', () => {
  let cloud: TestCloud;
  let warn: MockInstance<typeof logger.warn>;
  beforeEach(async () => {
    cloud = await schedulerCloud();
    warn = vi.spyOn(logger, 'warn').mockImplementation(() => undefined);
  });
  afterEach(() => {
    warn.mockRestore();
  });

  it.each([
    ['the manifest send fails', 'sendManifest', () => serverError('sqs', 'SendMessage')],
    ['the work item PUT fails', 'writeWorkItem', () => serverError('s3', 'PutObject')],
    ['a payload read fails for good', 'readPayloads', () => serverError('s3', 'GetObject')],
  ] as const)(
    '%s: claims released, no attempt charged, the next tick dispatches at once',
    async (_, member, fault) => {
      const s = await scene(cloud);
      const error = fault();
      let failures = 0;
      const adapters = adaptersWith(() => ({
        [member]: async () => {
          failures++;
          throw error;
        },
      }));

      await expect(runTick({ adapters })).rejects.toBe(error);
      // Tried once by the tick; the steps' payloads and the samples' are two reads, side by side.
      expect(failures).toBe(member === 'readPayloads' ? 2 : 1);
      for (const m of s.models) {
        const before = s.before.get(m)!;
        const row = await readModelRow(cloud.clients, m);
        expect(row.inflight).toBeUndefined();
        expect(row.lease_until).toBeUndefined();
        expect(row.planned_through).toBe(before.planned_through);
        expect(row.applied_through).toBe(before.applied_through);
        expect(row.attempts).toBe(before.attempts);
        expect(row.epoch).toBe(before.epoch + 1);
      }
      expect(await readSampleClaim(cloud, s.sample)).toBeUndefined();
      expect(await drainManifests(cloud.clients)).toEqual([]);
      expect(failedPassWarnings(warn)).toEqual([
        expect.objectContaining({
          error,
          models_held: 2,
          samples_held: 1,
          claims_released: 3,
          releases_refused: 0,
          release_errors: 0,
        }),
      ]);

      await expectDispatchedAgainAndCompletedOnce(cloud, s);
    },
  );

  it('a release whose condition fails changes nothing and the pass still throws its own error', async () => {
    const s = await scene(cloud);
    const [replanned, released] = s.models as [string, string];
    const error = serverError('sqs', 'SendMessage');
    const settings = schedulerSettings();
    let replannedRow: ModelRow | undefined;
    let otherClaim: SampleClaimRecord | undefined;
    const adapters = adaptersWith(() => ({
      sendManifest: async () => {
        // Meanwhile the pass stalled past its lease: the sweeper re-planned one model, and another
        // work item claimed the sample.
        const row = await readModelRow(cloud.clients, replanned);
        const later = row.lease_until! + 1;
        expect(
          await replanModel(
            cloud.clients.doc,
            settings.tables.models,
            replanFor(row, later, 3)!,
            'lease-ended',
          ),
        ).toBe(true);
        replannedRow = await readModelRow(cloud.clients, replanned);
        otherClaim = {
          pk: registryKey.sampleClaim(s.sample),
          request_id: s.sample,
          claim_token: 'wi-other',
          work_item_id: 'wi-other',
          lease_until: later + 60_000,
          ttl: sampleClaimTtl(later + 60_000),
        };
        await cloud.clients.doc.send(
          new PutCommand({ TableName: settings.tables.registry, Item: otherClaim }),
        );
        throw error;
      },
    }));

    await expect(runTick({ adapters })).rejects.toBe(error);
    expect(await readModelRow(cloud.clients, replanned)).toEqual(replannedRow);
    expect(replannedRow).toMatchObject({ epoch: s.before.get(replanned)!.epoch + 2, attempts: 1 });
    expect(await readSampleClaim(cloud, s.sample)).toEqual(otherClaim);
    // The model nobody touched is given back as usual.
    const row = await readModelRow(cloud.clients, released);
    expect(row.inflight).toBeUndefined();
    expect(row.planned_through).toBe(s.before.get(released)!.planned_through);
    expect(failedPassWarnings(warn)).toEqual([
      expect.objectContaining({ error, claims_released: 1, releases_refused: 2, release_errors: 0 }),
    ]);
  });

  it("a release that errors leaves that claim to its lease and does not mask the pass's error", async () => {
    const s = await scene(cloud);
    const [kept, released] = s.models as [string, string];
    const error = serverError('s3', 'PutObject');
    const adapters = adaptersWith((real) => ({
      writeWorkItem: async () => {
        throw error;
      },
      releaseModel: async (release) => {
        if (release.model_id === kept) throw serverError('dynamodb', 'UpdateItem');
        return real.releaseModel(release);
      },
    }));

    await expect(runTick({ adapters })).rejects.toBe(error);
    const row = await readModelRow(cloud.clients, kept);
    expect(row.inflight).toBe(`${kept}@${s.before.get(kept)!.epoch + 1}`);
    expect(row.planned_through).toBe(3);
    expect((await readModelRow(cloud.clients, released)).inflight).toBeUndefined();
    expect(await readSampleClaim(cloud, s.sample)).toBeUndefined();
    expect(failedPassWarnings(warn)).toEqual([
      expect.objectContaining({
        error,
        claims_released: 2,
        release_errors: 1,
        left_to_lease: kept,
        release_error_names: 'InternalServerError',
      }),
    ]);
  });

  it('a claim write that fails: the claims already won, and one that landed despite a timeout, are given back', async () => {
    const s = await scene(cloud);
    const [landed, won] = s.models as [string, string];
    const error = timeoutError('UpdateItem');
    const adapters = adaptersWith((real) => ({
      claimModel: async (claim) => {
        const answer = await real.claimModel(claim);
        // The write landed, but the answer was lost on the way back.
        if (claim.model_id === landed) throw error;
        return answer;
      },
    }));

    await expect(runTick({ adapters })).rejects.toBe(error);
    for (const m of [landed, won]) {
      const row = await readModelRow(cloud.clients, m);
      expect(row.inflight).toBeUndefined();
      expect(row.planned_through).toBe(s.before.get(m)!.planned_through);
    }
    // The sample was claimed beside the models; the pass gave its claim back too.
    expect(await readSampleClaim(cloud, s.sample)).toBeUndefined();
    expect(failedPassWarnings(warn)).toEqual([
      expect.objectContaining({ error, models_held: 2, samples_held: 1, claims_released: 3 }),
    ]);
    await expectDispatchedAgainAndCompletedOnce(cloud, s);
  });

  it('a simulated crash gives nothing back: a real one runs no code', async () => {
    const s = await scene(cloud);
    const points = new CrashPoints().arm('scheduler:after-write-work-item', { times: 1 });
    const uninstall = points.install();
    try {
      await expect(runTick()).rejects.toMatchObject({ name: 'SimulatedCrash' });
    } finally {
      uninstall();
    }
    for (const m of s.models) {
      expect((await readModelRow(cloud.clients, m)).inflight).toBe(`${m}@${s.before.get(m)!.epoch + 1}`);
    }
    expect(await readSampleClaim(cloud, s.sample)).toMatchObject({ request_id: s.sample });
    expect(failedPassWarnings(warn)).toEqual([]);
    expect((await runTick()).counters.work_items).toBe(0);
  });
});
