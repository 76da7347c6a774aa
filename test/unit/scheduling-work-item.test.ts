import { describe, expect, it } from 'vitest';
import {
  assembleWorkItem,
  payloadsToRead,
  type SampleClaimed,
} from '../../shared/domain/planning/assemble.js';
import { claimFor, type ModelClaim } from '../../shared/domain/planning/claim.js';
import { plan } from '../../shared/domain/planning/planner.js';
import {
  manifestFor,
  manifestOf,
  partIdsOf,
  type WorkItem,
  workItemSchema,
  workManifestSchema,
} from '../../shared/domain/planning/work-item.js';
import { covers } from '../../shared/services/worker/opening-reads.js';
import { modelRow, rid, rowsOf, snapshotOf, UNCAPPED } from '../support/scheduling-fixtures.js';

const NOW = 10_000;

function fixture() {
  const live = rowsOf([
    { model: 'a', type: 'forward_backward' },
    { model: 'a', type: 'optim_step' },
    { model: 'b', type: 'forward' },
    { model: 'base:tiny', type: 'sample' },
    { model: 'a', type: 'sample', checkpoint: 'c-1' },
    { model: 'c', type: 'forward' },
  ]);
  const rows = [
    modelRow('a', { state_ref: 'state/a/0.bin' }),
    modelRow('b'),
    modelRow('c', { status: 'unloaded' }),
  ];
  const result = plan(snapshotOf(live, rows), UNCAPPED, NOW);
  const claims = new Map<string, ModelClaim>();
  for (const planned of result.models) {
    const row = rows.find((r) => r.model_id === planned.model_id)!;
    if (planned.model_id !== 'b') claims.set(planned.model_id, claimFor(row, planned, NOW, 60_000)); // b lost its claim
  }
  const sampleClaims = new Map<string, SampleClaimed>([
    [rid(4), { tenant: 't-base', claim_token: 'wi-1' }],
    [rid(5), { tenant: 't-a', claim_token: 'wi-1' }],
  ]);
  return { result, claims, sampleClaims };
}

describe('assembleWorkItem', () => {
  it('reads exactly the payloads of claimed, executable requests (R6)', () => {
    const { result, claims, sampleClaims } = fixture();
    expect(payloadsToRead(result, claims, sampleClaims)).toEqual([rid(1), rid(2), rid(4), rid(5)]);
  });

  it('builds a valid work item: claimed parts only, missing payloads become server fail steps and entries', () => {
    const { result, claims, sampleClaims } = fixture();
    const payloads = new Map<string, unknown>([
      [rid(1), { kind: 'fb' }],
      [rid(4), { kind: 'sample' }],
    ]);
    const workItem = assembleWorkItem({
      workItemId: 'wi-1',
      pool: 'default',
      now: NOW,
      plan: result,
      claims,
      sampleClaims,
      payloads,
    });
    const parsed = workItemSchema.parse(JSON.parse(JSON.stringify(workItem)));
    expect(parsed.models.map((m) => [m.model_id, m.epoch, m.inflight])).toEqual([
      ['a', 1, 'a@1'],
      ['c', 1, 'c@1'],
    ]);
    expect(parsed.models[0]).toMatchObject({ base_applied_through: 0, base_state_ref: 'state/a/0.bin' });
    expect(parsed.models[0]?.steps).toEqual([
      { request_id: rid(1), seq: 1, request_type: 'forward_backward', payload: { kind: 'fb' } },
      {
        request_id: rid(2),
        seq: 2,
        request_type: 'optim_step',
        fail: expect.objectContaining({ category: 'server' }),
      },
    ]);
    expect(parsed.models[1]?.steps[0]?.fail?.category).toBe('user');
    expect(parsed.samples).toEqual([
      {
        request_id: rid(4),
        tenant: 't-base',
        model_id: 'base:tiny',
        claim_token: 'wi-1',
        payload: { kind: 'sample' },
      },
      {
        request_id: rid(5),
        tenant: 't-a',
        model_id: expect.any(String),
        ...(parsed.samples[1]?.checkpoint_id === undefined ? {} : { checkpoint_id: expect.any(String) }),
        claim_token: 'wi-1',
        fail: { message: 'The request payload is missing', category: 'server' },
      },
    ]);
  });

  it('yields no work item when nothing was claimed', () => {
    const { result } = fixture();
    const assembled = assembleWorkItem({
      workItemId: 'wi-2',
      pool: 'default',
      now: NOW,
      plan: result,
      claims: new Map(),
      sampleClaims: new Map(),
      payloads: new Map(),
    });
    expect(assembled).toBeUndefined();
  });
});

describe('workItemSchema', () => {
  const valid: WorkItem = {
    work_item_id: 'wi-1',
    pool: 'default',
    created_at: NOW,
    models: [
      {
        model_id: 'a',
        tenant: 't',
        epoch: 3,
        inflight: 'a@3',
        base_applied_through: 4,
        steps: [
          { request_id: rid(1), seq: 5, request_type: 'forward_backward', payload: { x: 1 } },
          {
            request_id: rid(2),
            seq: 6,
            request_type: 'optim_step',
            fail: { message: 'gone', category: 'server' },
          },
        ],
      },
    ],
    samples: [
      {
        request_id: rid(3),
        tenant: 't',
        model_id: 'a',
        checkpoint_id: 'c1',
        claim_token: 'wi-1',
        payload: {},
      },
    ],
  };

  function issues(mutate: (item: WorkItem) => void): string[] {
    const item = structuredClone(valid);
    mutate(item);
    const result = workItemSchema.safeParse(item);
    return result.success ? [] : result.error.issues.map((issue) => issue.message);
  }

  it('accepts a well-formed work item', () => {
    expect(workItemSchema.parse(valid)).toEqual(valid);
  });

  it('rejects a gapped or reordered run', () => {
    expect(
      issues((item) => {
        item.models[0]!.steps[1]!.seq = 7;
      }),
    ).toContain('steps must be contiguous seqs from base_applied_through + 1');
    expect(issues((item) => void item.models[0]!.steps.reverse())).not.toEqual([]);
    expect(
      issues((item) => {
        item.models[0]!.base_applied_through = 3;
      }),
    ).not.toEqual([]);
  });

  it('rejects an inflight token that is not <model_id>@<epoch>', () => {
    expect(
      issues((item) => {
        item.models[0]!.inflight = 'a@2';
      }),
    ).toContain('inflight must be <model_id>@<epoch>');
  });

  it('rejects an executable step without its payload, and a sample without its payload', () => {
    expect(issues((item) => void delete item.models[0]!.steps[0]!.payload)).toContain(
      'A step that is not a fail step needs its payload',
    );
    expect(issues((item) => void delete (item.samples[0] as { payload?: unknown }).payload)).toContain(
      'A sample that is not a fail entry needs its payload',
    );
  });

  it('rejects two checkpoints of one model, a model twice, a request twice, and an empty item', () => {
    const second = { ...valid.samples[0]!, request_id: rid(4), checkpoint_id: 'c2' };
    expect(issues((item) => void item.samples.push(second))).toContain(
      'A work item samples at most one checkpoint per model (R4)',
    );
    expect(issues((item) => void item.samples.push({ ...second, checkpoint_id: 'c1' }))).toEqual([]);
    expect(issues((item) => void item.models.push(structuredClone(item.models[0]!)))).toContain(
      'A model appears once per work item',
    );
    expect(issues((item) => void item.samples.push({ ...valid.samples[0]! }))).toContain(
      `Request ${rid(3)} appears twice`,
    );
    expect(
      issues((item) => {
        item.models = [];
        item.samples = [];
      }),
    ).toContain('A work item holds at least one step or sample');
  });
});

describe('work manifest', () => {
  it('names the S3 object and stays small', () => {
    const manifest = manifestFor('wi-123');
    expect(manifest).toEqual({ work_item_id: 'wi-123', key: 'work/wi-123.json' });
    expect(workManifestSchema.parse(JSON.parse(JSON.stringify(manifest)))).toEqual(manifest);
    expect(JSON.stringify(manifest).length).toBeLessThan(256);
    expect(workManifestSchema.safeParse({ work_item_id: 'wi-1' }).success).toBe(false);
  });

  it("the scheduler's manifest also names the parts' ids, so the worker reads their rows beside the item", () => {
    const item: WorkItem = {
      work_item_id: 'wi-9',
      pool: 'default',
      created_at: NOW,
      models: ['m-1', 'm-2'].map((id) => ({
        model_id: id,
        tenant: 't',
        epoch: 2,
        inflight: `${id}@2`,
        base_applied_through: 1,
        steps: [{ request_id: `r-${id}`, seq: 2, request_type: 'optim_step', payload: {} }],
      })),
      samples: [{ request_id: 's-1', tenant: 't', model_id: 'base:tiny', claim_token: 'wi-9', payload: {} }],
    };
    const manifest = manifestOf(item);
    expect(manifest).toEqual({
      ...manifestFor('wi-9'),
      model_ids: ['m-1', 'm-2'],
      sample_ids: ['s-1'],
    });
    expect(workManifestSchema.parse(JSON.parse(JSON.stringify(manifest)))).toEqual(manifest);
    const ids = { model_ids: manifest.model_ids ?? [], sample_ids: manifest.sample_ids ?? [] };
    expect(covers(ids, item)).toBe(true);
    expect(partIdsOf(item)).toEqual(ids);
    // Ids that miss a part are not used for it: the worker reads afresh from the item.
    expect(covers({ ...ids, model_ids: ['m-1'] }, item)).toBe(false);
    expect(covers({ ...ids, sample_ids: [] }, item)).toBe(false);
  });
});
