import { PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalRuntime } from '../../local/runtime/lambda-runtime.js';
import { TinkerClient } from '../../shared/client/tinker-client.js';
import { listSortKey, ownerKey } from '../../shared/domain/listing-keys.js';
import type { CheckpointView, TrainingRunView } from '../../shared/domain/listing-views.js';
import { registryKey } from '../../shared/domain/records.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { startCloudRuntime } from '../support/runtime.js';

/**
 * The listings (C1) and their isolation (C6) against the local cloud, with the api, scheduler and
 * worker running: checkpoints get their listing keys from the worker's real commit. Two tenants;
 * the lifecycle's fields (`expires_at`, `public`, the `public` markers) are written directly here,
 * as C3-C5 would write them.
 */
let cloud: TestCloud;
let runtime: LocalRuntime;
let alice: TinkerClient;
let bob: TinkerClient;

const BASE = 'reference/byte-lm';
const a = { session: '', first: '', second: '', sampler: '', unnamedSampler: '' };
const b = { session: '', model: '' };
/** Alice's named checkpoints of her first run, in save order: [kind segment, name]. */
const SAVES = [
  ['weights', 'w1'],
  ['sampler_weights', 's1'],
  ['weights', 'w2'],
  ['sampler_weights', 's2'],
  ['weights', 'w3'],
] as const;

type RunsPage = {
  training_runs: TrainingRunView[];
  cursor: { offset: number; limit: number; total_count: number };
};
type CheckpointsPage = { checkpoints: CheckpointView[]; cursor: RunsPage['cursor'] | null };

async function get<T>(client: TinkerClient, path: string): Promise<T> {
  const answer = await client.raw('GET', `/api/v1/${path}`);
  if (answer.status !== 200) throw new Error(`GET ${path}: ${answer.status} ${JSON.stringify(answer.body)}`);
  return answer.body as T;
}

async function tenant(name: string): Promise<TinkerClient> {
  const key = await createApiKey(cloud.clients.doc, cloud.names.tables.registry, name);
  return new TinkerClient({ baseUrl: runtime.apiUrl as string, apiKey: key });
}

async function newModel(client: TinkerClient, session: string, seqId: number, extra = {}): Promise<string> {
  const created = await client.createModel({
    session_id: session,
    model_seq_id: seqId,
    base_model: BASE,
    lora_config: { rank: 4 },
    ...extra,
  });
  await client.waitFor(created.request_id);
  return created.model_id;
}

async function setOnCheckpoint(modelId: string, kind: 'weights' | 'sampler', name: string, values: object) {
  const entries = Object.entries(values);
  await cloud.clients.doc.send(
    new UpdateCommand({
      TableName: cloud.names.tables.registry,
      Key: { pk: registryKey.checkpointName(modelId, kind, name) },
      UpdateExpression: `SET ${entries.map((_, i) => `#k${i} = :v${i}`).join(', ')}`,
      ExpressionAttributeNames: Object.fromEntries(entries.map(([key], i) => [`#k${i}`, key])),
      ExpressionAttributeValues: Object.fromEntries(entries.map(([, value], i) => [`:v${i}`, value])),
    }),
  );
}

beforeAll(async () => {
  cloud = await setupTestCloud();
  runtime = await startCloudRuntime(cloud, {
    functions: ['api', 'scheduler', 'worker'],
    env: { LONG_POLL_SECONDS: '1' },
  });
  alice = await tenant('alice');
  bob = await tenant('bob');
  a.session = (await alice.createSession()).session_id;
  a.first = await newModel(alice, a.session, 0, {
    user_metadata: { purpose: 'listing', step: 3, tags: ['x'] },
  });
  let seq = 1;
  for (const [kind, name] of SAVES) {
    seq += 1;
    const save =
      kind === 'weights'
        ? await alice.saveWeights({ model_id: a.first, seq_id: seq, path: name })
        : await alice.saveWeightsForSampler({ model_id: a.first, seq_id: seq, path: name });
    await alice.waitFor(save.request_id);
  }
  seq += 1;
  const unnamed = await alice.saveWeightsForSampler({
    model_id: a.first,
    seq_id: seq,
    sampling_session_seq_id: 0,
  });
  a.unnamedSampler = (
    await alice.waitFor<{ sampling_session_id: string }>(unnamed.request_id)
  ).sampling_session_id;
  a.sampler = (
    await alice.createSamplingSession({
      session_id: a.session,
      sampling_session_seq_id: 1,
      model_path: `tinker://${a.first}/sampler_weights/s1`,
    })
  ).sampling_session_id;
  a.second = await newModel(alice, a.session, 1);
  b.session = (await bob.createSession()).session_id;
  b.model = await newModel(bob, b.session, 0);
  const save = await bob.saveWeightsForSampler({ model_id: b.model, seq_id: 2, path: 'shared' });
  await bob.waitFor(save.request_id);
}, 120_000);

afterAll(async () => {
  await runtime?.stop();
});

describe('GET checkpoints and training_runs/{id}/checkpoints (C1)', () => {
  it("lists the tenant's named checkpoints newest first, with the SDK's ids, paths and aware times", async () => {
    const all = await get<CheckpointsPage>(alice, 'checkpoints');
    expect(all.cursor).toEqual({ offset: 0, limit: 100, total_count: SAVES.length });
    // Newest first; the unnamed sampler save is reached through its sampling session, not listed.
    expect(all.checkpoints.map((c) => c.checkpoint_id)).toEqual(
      [...SAVES].reverse().map(([kind, name]) => `${kind}/${name}`),
    );
    for (const checkpoint of all.checkpoints) {
      expect(checkpoint.tinker_path).toBe(`tinker://${a.first}/${checkpoint.checkpoint_id}`);
      expect(checkpoint.checkpoint_type).toBe(
        checkpoint.checkpoint_id.startsWith('weights/') ? 'training' : 'sampler',
      );
      expect(checkpoint.time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      expect(checkpoint).toMatchObject({ public: false, expires_at: null });
      // The bytes of the stored checkpoint, recorded by its commit (C2).
      expect(Number.isInteger(checkpoint.size_bytes) && (checkpoint.size_bytes ?? 0) > 0).toBe(true);
    }
    const times = all.checkpoints.map((c) => Date.parse(c.time));
    expect([...times].sort((x, y) => y - x)).toEqual(times);
    const ofRun = await get<CheckpointsPage>(alice, `training_runs/${a.first}/checkpoints`);
    expect(ofRun).toEqual({ checkpoints: all.checkpoints, cursor: null });
    expect(await get<CheckpointsPage>(alice, `training_runs/${a.second}/checkpoints`)).toEqual({
      checkpoints: [],
      cursor: null,
    });
  });

  it('pages as the CLI does: every checkpoint once, in order, until a short page', async () => {
    const whole = (await get<CheckpointsPage>(alice, 'checkpoints')).checkpoints;
    for (const limit of [1, 2, 3]) {
      const seen: CheckpointView[] = [];
      for (let offset = 0; ; offset += limit) {
        const page = await get<CheckpointsPage>(alice, `checkpoints?limit=${limit}&offset=${offset}`);
        expect(page.cursor).toEqual({ offset, limit, total_count: SAVES.length });
        seen.push(...page.checkpoints);
        if (page.checkpoints.length < limit) break;
      }
      expect(seen).toEqual(whole);
    }
  });

  it("shows each tenant only its own checkpoints; another tenant's run answers 404 as an unknown one", async () => {
    const bobs = await get<CheckpointsPage>(bob, 'checkpoints');
    expect(bobs.checkpoints.map((c) => c.tinker_path)).toEqual([
      `tinker://${b.model}/sampler_weights/shared`,
    ]);
    const theirs = await bob.raw('GET', `/api/v1/training_runs/${a.first}/checkpoints`);
    const unknown = await bob.raw('GET', '/api/v1/training_runs/model-nobody/checkpoints');
    expect(theirs.status).toBe(404);
    expect(JSON.stringify(theirs.body).replace(a.first, 'model-nobody')).toBe(JSON.stringify(unknown.body));
  });
});

describe('GET training_runs and training_runs/{id} (C1)', () => {
  it("lists the tenant's runs newest first with what a TrainingRun needs", async () => {
    const page = await get<RunsPage>(alice, 'training_runs');
    expect(page.cursor).toEqual({ offset: 0, limit: 20, total_count: 2 });
    expect(page.training_runs.map((run) => run.training_run_id)).toEqual([a.second, a.first]);
    const first = page.training_runs[1] as TrainingRunView;
    expect(first).toMatchObject({
      training_run_id: a.first,
      base_model: BASE,
      model_owner: 'alice',
      is_lora: true,
      corrupted: false,
      lora_rank: 4,
      // Values as strings, as the SDK's TrainingRun requires.
      user_metadata: { purpose: 'listing', step: '3', tags: '["x"]' },
    });
    expect(first.last_checkpoint?.checkpoint_id).toBe('weights/w3');
    expect(first.last_sampler_checkpoint?.checkpoint_id).toBe('sampler_weights/s2');
    // The last submit was the unnamed sampler save, after every listed checkpoint.
    expect(Date.parse(first.last_request_time)).toBeGreaterThanOrEqual(
      Date.parse(first.last_checkpoint?.time ?? ''),
    );
    expect(page.training_runs[0]).toMatchObject({
      last_checkpoint: null,
      last_sampler_checkpoint: null,
      user_metadata: null,
    });
    expect(await get<TrainingRunView>(alice, `training_runs/${a.first}`)).toEqual(first);
    const paged = await get<RunsPage>(alice, 'training_runs?limit=1&offset=1');
    expect(paged).toEqual({ training_runs: [first], cursor: { offset: 1, limit: 1, total_count: 2 } });
    expect(await get<RunsPage>(alice, 'training_runs?offset=2')).toMatchObject({ training_runs: [] });
  });

  it("answers another tenant's run exactly as an unknown one, in both scopes, while nothing is published", async () => {
    for (const scope of ['', '?access_scope=owned', '?access_scope=accessible']) {
      const theirs = await bob.raw('GET', `/api/v1/training_runs/${a.first}${scope}`);
      const unknown = await bob.raw('GET', `/api/v1/training_runs/model-nobody${scope}`);
      expect(theirs.status, scope).toBe(404);
      expect(JSON.stringify(theirs.body).replace(a.first, 'model-nobody')).toBe(JSON.stringify(unknown.body));
    }
    const bobs = await get<RunsPage>(bob, 'training_runs?access_scope=accessible');
    expect(bobs.training_runs.map((run) => run.training_run_id)).toEqual([b.model]);
  });
});

describe('GET sessions and sessions/{id} (C1)', () => {
  it("lists the tenant's sessions newest first and a session's runs and samplers", async () => {
    const later = (await alice.createSession()).session_id;
    expect(await get(alice, 'sessions')).toEqual({ sessions: [later, a.session] });
    expect(await get(alice, 'sessions?limit=1&offset=1&access_scope=accessible')).toEqual({
      sessions: [a.session],
    });
    expect(await get(alice, `sessions/${a.session}`)).toEqual({
      training_run_ids: [a.first, a.second],
      sampler_ids: [a.unnamedSampler, a.sampler],
    });
    expect(await get(alice, `sessions/${later}?access_scope=owned`)).toEqual({
      training_run_ids: [],
      sampler_ids: [],
    });
    expect(await get(bob, 'sessions')).toEqual({ sessions: [b.session] });
    const theirs = await bob.raw('GET', `/api/v1/sessions/${a.session}`);
    const unknown = await bob.raw('GET', '/api/v1/sessions/sess-nobody');
    expect(theirs.status).toBe(404);
    expect(JSON.stringify(theirs.body).replace(a.session, 'sess-nobody')).toBe(JSON.stringify(unknown.body));
  });
});

describe('the lifecycle fields (C4, C5) as the listings read them', () => {
  it('never lists an expired checkpoint, and shows expires_at of a live one', async () => {
    const soon = Date.now() + 3_600_000;
    await setOnCheckpoint(a.first, 'weights', 'w3', { expires_at: Date.now() - 1 });
    await setOnCheckpoint(a.first, 'sampler', 's2', { expires_at: soon });
    const all = await get<CheckpointsPage>(alice, 'checkpoints');
    expect(all.cursor?.total_count).toBe(SAVES.length - 1);
    expect(all.checkpoints.map((c) => c.checkpoint_id)).not.toContain('weights/w3');
    expect(all.checkpoints.find((c) => c.checkpoint_id === 'sampler_weights/s2')?.expires_at).toBe(
      new Date(soon).toISOString(),
    );
    const ofRun = await get<CheckpointsPage>(alice, `training_runs/${a.first}/checkpoints`);
    expect(ofRun.checkpoints.map((c) => c.checkpoint_id)).toEqual(
      all.checkpoints.map((c) => c.checkpoint_id),
    );
    const run = await get<TrainingRunView>(alice, `training_runs/${a.first}`);
    expect(run.last_checkpoint?.checkpoint_id).toBe('weights/w2');
  });

  /** A `public` marker of Bob's sampler checkpoint `shared`, as C4's publish writes one. */
  async function markBobsCheckpointPublic(): Promise<void> {
    const marker = {
      pk: 'test-public-marker',
      owner_key: ownerKey.published,
      list_sort: listSortKey(Date.now(), b.model, 'sampler', 'shared'),
      model_id: b.model,
    };
    await cloud.clients.doc.send(new PutCommand({ TableName: cloud.names.tables.registry, Item: marker }));
  }

  it('lets access_scope=accessible read a run with a published checkpoint, showing only what is published', async () => {
    await setOnCheckpoint(b.model, 'sampler', 'shared', { public: true });
    await markBobsCheckpointPublic();
    const accessible = await get<RunsPage>(alice, 'training_runs?access_scope=accessible');
    expect(accessible.cursor.total_count).toBe(3);
    expect(accessible.training_runs.map((run) => run.training_run_id)).toEqual([a.second, a.first, b.model]);
    const bobsRun = await get<TrainingRunView>(alice, `training_runs/${b.model}?access_scope=accessible`);
    expect(bobsRun).toMatchObject({ model_owner: 'bob', last_checkpoint: null });
    expect(bobsRun.last_sampler_checkpoint).toMatchObject({
      checkpoint_id: 'sampler_weights/shared',
      public: true,
    });
    expect(accessible.training_runs[2]).toEqual(bobsRun);
    // Owned scope and the run's own listing stay the owner's.
    expect((await alice.raw('GET', `/api/v1/training_runs/${b.model}`)).status).toBe(404);
    expect((await alice.raw('GET', `/api/v1/training_runs/${b.model}/checkpoints`)).status).toBe(404);
    expect((await get<RunsPage>(alice, 'training_runs')).cursor.total_count).toBe(2);
    // Bob's own accessible listing does not count his run twice.
    expect((await get<RunsPage>(bob, 'training_runs?access_scope=accessible')).cursor.total_count).toBe(1);
  });

  it.each([
    ['expired', { expires_at: Date.now() - 1 }],
    ['unpublished', { public: false }],
  ] as const)(
    'drops the run from every listing once its only published checkpoint is %s, marker or not',
    async (_state, change) => {
      const accessible = () => get<RunsPage>(alice, 'training_runs?access_scope=accessible');
      await setOnCheckpoint(b.model, 'sampler', 'shared', {
        public: true,
        expires_at: Date.now() + 3_600_000,
      });
      await markBobsCheckpointPublic();
      expect((await accessible()).training_runs.map((run) => run.training_run_id)).toContain(b.model);
      // The marker stays, as it does until the sweeper's round.
      await setOnCheckpoint(b.model, 'sampler', 'shared', change);
      const after = await accessible();
      expect(after.cursor.total_count).toBe(2);
      expect(after.training_runs.map((run) => run.training_run_id)).toEqual([a.second, a.first]);
      expect(JSON.stringify(after)).not.toContain('bob');
      expect(
        (await alice.raw('GET', `/api/v1/training_runs/${b.model}?access_scope=accessible`)).status,
      ).toBe(404);
      await setOnCheckpoint(b.model, 'sampler', 'shared', {
        public: true,
        expires_at: Date.now() + 3_600_000,
      });
    },
  );
});
