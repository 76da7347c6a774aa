import { describe, expect, it } from 'vitest';
import { commitActionsOf, TRANSACT_WRITE_MAX_ACTIONS } from '../../shared/domain/planning/limits.js';
import { TRAINING_REQUEST_TYPES, type TrainingRequestType } from '../../shared/domain/records.js';
import {
  commitToken,
  type ModelCommit,
  modelCommitTransaction,
  SAMPLE_GROUP_INLINE_BYTES,
  type StepCommit,
  sampleCommitGroups,
  sampleCommitTransaction,
  sampleGroupCommitTransaction,
} from '../../shared/services/worker/commit-items.js';

// Passed in, as the worker's runtime does: the transactions read no configuration.
const tables = { futures: 'p-futures', models: 'p-models', registry: 'p-registry' };

const base: ModelCommit = {
  model_id: 'model-a',
  inflight: 'model-a@7',
  run: 'run-1',
  base_applied_through: 4,
  applied_through: 6,
  unloaded: false,
  now: 1234,
  steps: [
    { request_id: 'r5', outcome: { status: 'completed', result: { metrics: { 'loss:mean': 1 } } } },
    { request_id: 'r6', outcome: { status: 'failed', error: { message: 'bad', category: 'user' } } },
  ],
};

/** A save's commit with everything it may carry: an archive, a size and a TTL (C5). */
const fullestCommit = {
  action: 'commit',
  model_id: 'model-a',
  content_id: 'c-r1',
  blob_key: 'k',
  archive_key: 'a',
  size_bytes: 10,
  ttl_seconds: 60,
  listing: { tenant: 't', model_id: 'model-a', kind: 'weights', name: 'w1' },
} as const;

/** The most a step of each type can add to its model's commit. */
function fullestStep(type: TrainingRequestType, index: number): StepCommit {
  const step: StepCommit = {
    request_id: `r${index}`,
    outcome: { status: 'completed', result_key: `results/r${index}.json` },
  };
  if (type === 'save_weights') return { ...step, checkpoint: { ...fullestCommit, pk: 'ckpt#a' } };
  if (type === 'save_weights_for_sampler') {
    return {
      ...step,
      // Unnamed (it has a sampling session): no listing, and none of the fields above.
      checkpoint: { action: 'commit', pk: 'ckpt#b', model_id: 'model-a', content_id: 'c-r2', blob_key: 'k' },
      sampling_session: {
        pk: 'ss#s',
        sampling_session_id: 's',
        tenant: 't',
        session_id: 'x',
        model_id: 'model-a',
        base_model: 'b',
        created_at: 1,
      },
    };
  }
  return step;
}

describe('the model commit transaction (E4)', () => {
  it('updates the model row on its in-flight token and base, removes the lease, resets attempts, records the run', () => {
    const { items, targets } = modelCommitTransaction(
      { ...base, state_ref: 'state/model-a/7/run-1.bin' },
      tables,
    );
    expect(targets[0]).toEqual({ kind: 'model' });
    expect(items[0]).toEqual({
      Update: {
        TableName: 'p-models',
        Key: { model_id: 'model-a' },
        UpdateExpression:
          'SET applied_through = :applied, last_completed_at = :now, attempts = :zero, last_run = :run, state_ref = :state, snapshot_through = :applied REMOVE inflight, lease_until, replay, holder, holder_until',
        ConditionExpression: 'inflight = :token AND applied_through = :base',
        ExpressionAttributeValues: {
          ':run': 'run-1',
          ':applied': 6,
          ':now': 1234,
          ':zero': 0,
          ':token': 'model-a@7',
          ':base': 4,
          ':state': 'state/model-a/7/run-1.bin',
        },
      },
    });
  });

  it('a holder appends its state-changing steps to the replay log and renews its hold, writing no state (S1)', () => {
    const entries = [{ seq: 5, request_id: 'r5', request_type: 'forward_backward' as const }];
    const [row] = modelCommitTransaction(
      { ...base, replay_append: entries, holder: { holder: { worker: 'w-1', lane: 2 }, until: 9999 } },
      tables,
    ).items;
    expect(row?.Update?.UpdateExpression).toBe(
      'SET applied_through = :applied, last_completed_at = :now, attempts = :zero, last_run = :run, replay = list_append(if_not_exists(replay, :no_entries), :entries), holder = :holder, holder_until = :holder_until REMOVE inflight, lease_until',
    );
    expect(row?.Update?.ExpressionAttributeValues).toMatchObject({
      ':entries': entries,
      ':no_entries': [],
      ':holder': { worker: 'w-1', lane: 2 },
      ':holder_until': 9999,
    });
    expect(row?.Update?.ConditionExpression).toBe('inflight = :token AND applied_through = :base');
  });

  it('keeps state_ref when the work item changed no state, and marks an unloaded model', () => {
    const [row] = modelCommitTransaction({ ...base, unloaded: true }, tables).items;
    expect(row?.Update?.UpdateExpression).not.toMatch(/state_ref/);
    expect(row?.Update?.UpdateExpression).toMatch(/#status = :unloaded/);
    expect(row?.Update?.ExpressionAttributeValues?.[':unloaded']).toBe('unloaded');
  });

  it('ends each future only if it is still pending, records the run, and takes it out of the live index', () => {
    const { items, targets } = modelCommitTransaction(base, tables);
    expect(targets.slice(1)).toEqual([
      { kind: 'future', request_id: 'r5' },
      { kind: 'future', request_id: 'r6' },
    ]);
    const [completed, failed] = [items[1]?.Update, items[2]?.Update];
    expect(completed).toMatchObject({
      TableName: 'p-futures',
      Key: { request_id: 'r5' },
      UpdateExpression: 'SET #status = :status, #field = :value, updated_at = :now, #run = :run REMOVE live',
      ConditionExpression: '#status = :pending',
      ExpressionAttributeNames: { '#status': 'status', '#field': 'result', '#run': 'run' },
      ExpressionAttributeValues: {
        ':status': 'completed',
        ':value': { metrics: { 'loss:mean': 1 } },
        ':pending': 'pending',
        ':run': 'run-1',
      },
    });
    expect(failed?.ExpressionAttributeNames?.['#field']).toBe('error');
    expect(failed?.ExpressionAttributeValues?.[':status']).toBe('failed');
  });

  it('fills a checkpoint name only for the request that reserved it; a failed save deletes its pending reservation', () => {
    const { items } = modelCommitTransaction(
      {
        ...base,
        steps: [
          { ...fullestStep('save_weights', 5) },
          {
            request_id: 'r6',
            outcome: { status: 'failed', error: { message: 'x', category: 'user' } },
            checkpoint: { action: 'release', pk: 'ckpt#c' },
          },
        ],
      },
      tables,
    );
    // Committed at the commit's time, into the tenant's and the run's listings (C1).
    expect(items[2]?.Update).toMatchObject({
      TableName: 'p-registry',
      Key: { pk: 'ckpt#a' },
      UpdateExpression:
        'SET #status = :committed, blob_key = :blob, created_at = :now, archive_key = :archive, size_bytes = :size, expires_at = :expires, owner_key = :owner, parent_key = :parent, list_sort = :sort',
      ConditionExpression: 'request_id = :mine',
      ExpressionAttributeValues: {
        ':committed': 'committed',
        ':blob': 'k',
        ':mine': 'r5',
        ':now': 1234,
        ':archive': 'a',
        ':size': 10,
        // The TTL runs from the commit's time (C5).
        ':expires': 1234 + 60_000,
        ':owner': 'ckpt#t',
        ':parent': 'run#model-a',
        ':sort': '0000000001234#model-a#weights#w1',
      },
    });
    // An unnamed sampler save (no listing) is committed with its time but stays out of the listings.
    const unnamed = modelCommitTransaction(
      { ...base, steps: [fullestStep('save_weights_for_sampler', 7)] },
      tables,
    );
    expect(unnamed.items[2]?.Update?.UpdateExpression).toBe(
      'SET #status = :committed, blob_key = :blob, created_at = :now',
    );
    expect(items[4]?.Delete).toMatchObject({
      Key: { pk: 'ckpt#c' },
      ConditionExpression: 'request_id = :mine AND #status = :pending',
      ExpressionAttributeValues: { ':mine': 'r6', ':pending': 'pending' },
    });
  });

  it("never adds more actions per step than the planner's commitActionsOf budgets", () => {
    for (const type of TRAINING_REQUEST_TYPES) {
      const { items } = modelCommitTransaction({ ...base, steps: [fullestStep(type, 1)] }, tables);
      expect(items.length - 1, type).toBeLessThanOrEqual(commitActionsOf(type));
    }
    // A run the planner may dispatch (90 steps, budgeted to 100 actions) fits one transaction.
    const steps: StepCommit[] = [];
    let budget = TRANSACT_WRITE_MAX_ACTIONS - 1;
    for (let i = 0; budget > 0; i++) {
      const type = TRAINING_REQUEST_TYPES[i % TRAINING_REQUEST_TYPES.length] as TrainingRequestType;
      if (commitActionsOf(type) > budget) break;
      budget -= commitActionsOf(type);
      steps.push(fullestStep(type, i));
    }
    expect(modelCommitTransaction({ ...base, steps }, tables).items.length).toBeLessThanOrEqual(
      TRANSACT_WRITE_MAX_ACTIONS,
    );
  });
});

describe('the sample commit transaction (R4)', () => {
  it('ends the future and deletes the claim only while it is this work item’s', () => {
    const { items } = sampleCommitTransaction(
      's1',
      'wi-9',
      'run-1',
      { status: 'completed', result_key: 'results/s1/run-1.json' },
      5,
      tables,
    );
    expect(items[0]?.Update?.ConditionExpression).toBe('#status = :pending');
    expect(items[0]?.Update?.ExpressionAttributeNames?.['#field']).toBe('result_key');
    expect(items[0]?.Update?.ExpressionAttributeValues?.[':run']).toBe('run-1');
    expect(items[1]).toEqual({
      Delete: {
        TableName: 'p-registry',
        Key: { pk: 'claim#s1' },
        // A claim that cancel_future marked (W9) takes only the cancelled commit.
        ConditionExpression: 'claim_token = :token AND attribute_not_exists(cancel_requested)',
        ExpressionAttributeValues: { ':token': 'wi-9' },
      },
    });
    const cancelled = sampleCommitTransaction(
      's1',
      'wi-9',
      'run-1',
      { status: 'failed', error: { message: 'cancelled', category: 'user' } },
      5,
      tables,
      undefined,
      true,
    );
    expect(cancelled.items[1]?.Delete?.ConditionExpression).toBe('claim_token = :token');
  });

  it('writes its session log entry at the position it took, only where nothing is (W9)', () => {
    const { items, targets } = sampleCommitTransaction(
      's1',
      'wi-9',
      'run-9',
      { status: 'failed', error: { message: 'x', category: 'user' } },
      5,
      tables,
      { logKey: 'samp-1#0', position: 12, requestId: 's1', state: 'failed', tenant: 'acme', now: 5 },
    );
    expect(targets.at(-1)).toEqual({ kind: 'log', request_id: 's1' });
    expect(items[2]?.Put).toMatchObject({
      TableName: 'p-registry',
      Item: {
        pk: 'sfl#samp-1#0#000000000000012',
        parent_key: 'sfl#samp-1#0',
        list_sort: '000000000000012#s1',
        status: 'failed',
        tenant: 'acme',
      },
      ConditionExpression: 'attribute_not_exists(pk)',
    });
  });
});

describe('commitToken (E5)', () => {
  it('is deterministic, at most 36 characters, and differs per work item, run and variant', () => {
    expect(commitToken('model-a@7', 'run-1', 0)).toBe(commitToken('model-a@7', 'run-1', 0));
    expect(commitToken('model-a@7', 'run-1', 0)).toHaveLength(36);
    expect(commitToken('model-a@7', 'run-1', 0)).not.toBe(commitToken('model-a@8', 'run-1', 0));
    expect(commitToken('model-a@7', 'run-1', 0)).not.toBe(commitToken('model-a@7', 'run-2', 0));
    expect(commitToken('model-a@7', 'run-1', 0)).not.toBe(commitToken('model-a@7', 'run-1', 1));
  });
});

describe('sample commits grouped into transactions', () => {
  const completed = (bytes: number) => ({
    outcome: { status: 'completed' as const, result: 'x'.repeat(bytes) },
  });
  const sizes = (groups: readonly unknown[][]) => groups.map((group) => group.length);

  it('a group of samples with logs holds 33 (99 actions), without logs 50', () => {
    const samples = Array.from({ length: 70 }, () => completed(10));
    expect(sizes(sampleCommitGroups(samples, () => true))).toEqual([33, 33, 4]);
    expect(sizes(sampleCommitGroups(samples, () => false))).toEqual([50, 20]);
  });

  it('inline results share the byte budget; a sample over it alone goes alone', () => {
    const half = SAMPLE_GROUP_INLINE_BYTES / 2;
    const samples = [completed(half), completed(half), completed(1), completed(3 * half), completed(1)];
    expect(sizes(sampleCommitGroups(samples, () => true))).toEqual([2, 1, 1, 1]);
    // Results in S3 and failures carry next to no bytes.
    const small = [
      { outcome: { status: 'completed' as const, result_key: 'results/a.json' } },
      { outcome: { status: 'failed' as const, error: { message: 'bad', category: 'user' as const } } },
    ];
    expect(sizes(sampleCommitGroups(small, () => true))).toEqual([2]);
  });

  it("a group's transaction is its samples' own transactions, one after another", () => {
    const one = (id: string) =>
      ({
        requestId: id,
        claimToken: 'w1',
        run: 'run-1',
        outcome: { status: 'completed', result: '{}' },
        now: 5,
        logEntry: { logKey: 'ss#0', position: 3, requestId: id, state: 'finished', tenant: 't', now: 5 },
      }) as const;
    const group = sampleGroupCommitTransaction([one('a'), one('b')], tables);
    const alone = (id: string) =>
      sampleCommitTransaction(
        id,
        'w1',
        'run-1',
        { status: 'completed', result: '{}' },
        5,
        tables,
        one(id).logEntry,
      );
    expect(group.items).toEqual([...alone('a').items, ...alone('b').items]);
    expect(group.targets).toEqual([...alone('a').targets, ...alone('b').targets]);
  });
});
