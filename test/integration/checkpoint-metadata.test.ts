import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalRuntime } from '../../local/runtime/lambda-runtime.js';
import { TinkerClient } from '../../shared/client/tinker-client.js';
import type { CheckpointView, TrainingRunView } from '../../shared/domain/listing-views.js';
import { registryKey } from '../../shared/domain/records.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { startCloudRuntime } from '../support/runtime.js';

/**
 * Checkpoint `user_metadata` (SDK releases after 0.25.0, W7) over HTTP against the local runtime,
 * with the worker's real commit: a save's metadata is answered by both checkpoint listings and the
 * run's `last_checkpoint`; an overwrite replaces it as a whole or, without any, clears it; a bad
 * value is a 400 naming the field, with nothing stored.
 */
let cloud: TestCloud;
let runtime: LocalRuntime;
let client: TinkerClient;
let modelId = '';
let seq = 0;

const BASE = 'reference/byte-lm';

type CheckpointsPage = { checkpoints: CheckpointView[] };

async function get<T>(path: string): Promise<T> {
  const answer = await client.raw('GET', `/api/v1/${path}`);
  if (answer.status !== 200) throw new Error(`GET ${path}: ${answer.status} ${JSON.stringify(answer.body)}`);
  return answer.body as T;
}

/** The checkpoint as each listing answers it: the run's, the tenant's, and the run's last ones. */
async function listed(checkpointId: string): Promise<CheckpointView[]> {
  const run = await get<CheckpointsPage>(`training_runs/${modelId}/checkpoints`);
  const tenant = await get<CheckpointsPage>('checkpoints');
  const view = await get<TrainingRunView>(`training_runs/${modelId}`);
  const latest = [view.last_checkpoint, view.last_sampler_checkpoint];
  const found = [...run.checkpoints, ...tenant.checkpoints, ...latest].filter(
    (checkpoint): checkpoint is CheckpointView => checkpoint?.checkpoint_id === checkpointId,
  );
  expect(found).toHaveLength(3);
  return found;
}

async function save(body: Record<string, unknown>, route = 'save_weights'): Promise<void> {
  seq += 1;
  const answer = (await client.raw('POST', `/api/v1/${route}`, {
    model_id: modelId,
    seq_id: seq,
    ...body,
  })) as {
    status: number;
    body: { request_id: string };
  };
  expect(answer.status).toBe(200);
  await client.waitFor(answer.body.request_id);
}

async function nameRecord(
  kind: 'weights' | 'sampler',
  name: string,
): Promise<Record<string, unknown> | undefined> {
  const answer = await cloud.clients.doc.send(
    new GetCommand({
      TableName: cloud.names.tables.registry,
      Key: { pk: registryKey.checkpointName(modelId, kind, name) },
      ConsistentRead: true,
    }),
  );
  return answer.Item;
}

beforeAll(async () => {
  cloud = await setupTestCloud();
  runtime = await startCloudRuntime(cloud, {
    functions: ['api', 'scheduler', 'worker'],
    env: { LONG_POLL_SECONDS: '1' },
  });
  const key = await createApiKey(cloud.clients.doc, cloud.names.tables.registry, 'meta');
  client = new TinkerClient({ baseUrl: runtime.apiUrl as string, apiKey: key });
  const { session_id } = await client.createSession({ sdk_version: '0.32.0' });
  const created = await client.createModel({
    session_id,
    model_seq_id: 0,
    base_model: BASE,
    lora_config: { rank: 4 },
  });
  await client.waitFor(created.request_id);
  modelId = created.model_id;
}, 120_000);

afterAll(async () => {
  await runtime?.stop();
});

describe('checkpoint user_metadata', () => {
  it('is listed with the save that gave it, replaced whole by an overwrite, and gone after one without it', async () => {
    await save({ path: 'w1', user_metadata: { stage: 'sft', step: '100' } });
    for (const view of await listed('weights/w1')) {
      expect(view.user_metadata).toEqual({ stage: 'sft', step: '100' });
    }

    await save({ path: 'w1', overwrite: true, user_metadata: { stage: 'rl' } });
    for (const view of await listed('weights/w1')) {
      expect(view.user_metadata).toEqual({ stage: 'rl' });
    }

    await save({ path: 'w1', overwrite: true });
    for (const view of await listed('weights/w1')) {
      expect(view).not.toHaveProperty('user_metadata');
    }
    expect(await nameRecord('weights', 'w1')).not.toHaveProperty('user_metadata');
  }, 60_000);

  it('is kept on a named sampler save; a save without it answers no field', async () => {
    await save({ path: 's1', user_metadata: { for: 'eval' } }, 'save_weights_for_sampler');
    for (const view of await listed('sampler_weights/s1')) {
      expect(view.user_metadata).toEqual({ for: 'eval' });
    }
    await save({ path: 's2' }, 'save_weights_for_sampler');
    for (const view of await listed('sampler_weights/s2')) {
      expect(view).not.toHaveProperty('user_metadata');
    }
  }, 60_000);

  it('refuses a bad value with a 400 naming the field, storing nothing', async () => {
    const before = await get<CheckpointsPage>('checkpoints');
    const refusals: [string, Record<string, unknown>, number, string][] = [
      ['save_weights', { path: 'bad', user_metadata: { step: 3 } }, 400, 'user_metadata.step'],
      ['save_weights', { path: 'bad', user_metadata: ['a'] }, 400, 'user_metadata'],
      ['save_weights', { path: 'bad', user_metadata: { '': 'x' } }, 400, 'user_metadata.'],
      ['save_weights', { path: 'bad', user_metadata: { big: 'x'.repeat(20_000) } }, 413, 'user_metadata'],
      ['save_weights_for_sampler', { path: 'bad', user_metadata: { a: null } }, 400, 'user_metadata.a'],
      [
        'save_weights_for_sampler',
        { sampling_session_seq_id: 5, user_metadata: { a: 'b' } },
        400,
        'user_metadata',
      ],
    ];
    for (const [route, body, status, field] of refusals) {
      const answer = await client.raw('POST', `/api/v1/${route}`, {
        model_id: modelId,
        seq_id: seq + 1,
        ...body,
      });
      expect(answer, `${route} ${JSON.stringify(body).slice(0, 80)}`).toMatchObject({
        status,
        body: { field },
      });
    }
    expect(await nameRecord('weights', 'bad')).toBeUndefined();
    expect(await nameRecord('sampler', 'bad')).toBeUndefined();
    expect(await get<CheckpointsPage>('checkpoints')).toEqual(before);
    // The refused seq_id was not taken: the same step with good metadata is accepted.
    await save({ path: 'bad', user_metadata: { fixed: 'yes' } });
    expect(await nameRecord('weights', 'bad')).toMatchObject({ user_metadata: { fixed: 'yes' } });
  }, 60_000);
});
