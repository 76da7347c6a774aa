import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { type FutureRow, registryKey } from '../../shared/domain/records.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';

/**
 * What `api-isolation.test.ts` leaves out: a rival replaying the owner's exact requests (same ids,
 * same idempotency keys, same payloads) must get a 404, never the owner's future, on every endpoint
 * that has an idempotency key; futures of every request type are invisible to the rival; and nothing
 * in a body or a header can choose the tenant, which comes from the API key alone.
 */
let api: ApiHarness;
let owner: TinkerClient;
let rival: TinkerClient;

const datum = {
  model_input: { chunks: [{ type: 'encoded_text', tokens: [1, 2] }] },
  loss_fn_inputs: { target_tokens: { data: [2, 3], dtype: 'int64' as const, shape: [2] } },
};

const ids = { session: '', model: '', unloaded: '', samplingSession: '' };
/** The owner's accepted requests: endpoint, exact body, and the future it answered. */
const accepted: { endpoint: string; body: Record<string, unknown>; requestId: string; type: string }[] = [];

async function submit(
  endpoint: string,
  body: Record<string, unknown>,
  type = endpoint,
): Promise<{ request_id: string; model_id?: string }> {
  const answer = await owner.raw('POST', `/api/v1/${endpoint}`, body);
  if (answer.status !== 200) throw new Error(`${endpoint}: ${answer.status} ${JSON.stringify(answer.body)}`);
  const future = answer.body as { request_id: string; model_id?: string };
  accepted.push({ endpoint, body, requestId: future.request_id, type });
  return future;
}

beforeAll(async () => {
  api = await startApiHarness();
  ({ client: owner } = await api.tenant('owner'));
  ({ client: rival } = await api.tenant('rival'));
  ids.session = (await owner.createSession()).session_id;
  const createModel = {
    session_id: ids.session,
    model_seq_id: 0,
    base_model: 'reference/byte-lm',
    lora_config: { rank: 4 },
  };
  ids.model = (await submit('create_model', createModel)).model_id ?? '';
  await submit('forward_backward', {
    model_id: ids.model,
    seq_id: 1,
    forward_backward_input: { data: [datum], loss_fn: 'cross_entropy' },
  });
  await submit('forward', {
    model_id: ids.model,
    seq_id: 2,
    forward_input: { data: [datum], loss_fn: 'cross_entropy' },
  });
  await submit('optim_step', { model_id: ids.model, seq_id: 3, adam_params: {} });
  await submit('save_weights', { model_id: ids.model, seq_id: 4, path: 'mine' });
  await submit('save_weights_for_sampler', { model_id: ids.model, seq_id: 5, path: 'mine' });
  await submit('save_weights_for_sampler', { model_id: ids.model, seq_id: 6, sampling_session_seq_id: 1 });
  await submit('load_weights', {
    model_id: ids.model,
    seq_id: 7,
    path: `tinker://${ids.model}/weights/mine`,
  });
  const samplingSession = {
    session_id: ids.session,
    sampling_session_seq_id: 0,
    base_model: 'reference/byte-lm',
  };
  ids.samplingSession = (
    (await owner.raw('POST', '/api/v1/create_sampling_session', samplingSession)).body as {
      sampling_session_id: string;
    }
  ).sampling_session_id;
  await submit(
    'asample',
    {
      sampling_session_id: ids.samplingSession,
      seq_id: 0,
      prompt: { chunks: [{ tokens: [1] }] },
      sampling_params: { max_tokens: 2 },
    },
    'sample',
  );
  const second = await owner.createModel({ ...createModel, model_seq_id: 1 });
  ids.unloaded = second.model_id;
  await submit('unload_model', { model_id: ids.unloaded });
});

afterAll(async () => {
  await api?.stop();
});

describe('a rival replaying the owner’s exact requests', () => {
  it('gets a 404 on every endpoint with an idempotency key, never the owner’s future, and stores nothing', async () => {
    const replays = [
      ...accepted.map(({ endpoint, body }) => ({ endpoint, body })),
      {
        endpoint: 'create_sampling_session',
        body: { session_id: ids.session, sampling_session_seq_id: 0, base_model: 'reference/byte-lm' },
      },
    ];
    expect(new Set(replays.map((replay) => replay.endpoint)).size).toBe(10);
    const owned = new Set([...accepted.map((entry) => entry.requestId), ids.model, ids.samplingSession]);
    for (const { endpoint, body } of replays) {
      const before = await api.counts();
      const answer = await rival.raw('POST', `/api/v1/${endpoint}`, body);
      expect(answer.status, endpoint).toBe(404);
      const text = JSON.stringify(answer.body);
      for (const id of owned) {
        // Ids the rival named itself may be echoed back in the message; nothing else of the owner's.
        if (!JSON.stringify(body).includes(id)) expect(text, endpoint).not.toContain(id);
      }
      expect(await api.counts(), endpoint).toEqual(before);
    }
  });

  it('the same replays from the owner still answer the original futures', async () => {
    for (const { endpoint, body, requestId } of accepted) {
      const answer = await owner.raw('POST', `/api/v1/${endpoint}`, body);
      expect(answer.status, endpoint).toBe(200);
      expect((answer.body as { request_id: string }).request_id, endpoint).toBe(requestId);
    }
  });
});

describe('futures of every request type', () => {
  it('are a 404 to the rival, as an unknown id is, and visible to the owner', async () => {
    const types = new Set(accepted.map((entry) => entry.type));
    expect(types).toEqual(
      new Set([
        'create_model',
        'forward_backward',
        'forward',
        'optim_step',
        'save_weights',
        'save_weights_for_sampler',
        'load_weights',
        'sample',
        'unload_model',
      ]),
    );
    for (const { requestId, type } of accepted) {
      const theirs = await rival.raw('POST', '/api/v1/retrieve_future', { request_id: requestId });
      expect(theirs, type).toEqual({
        status: 404,
        body: { error: `future ${requestId} not found`, field: 'request_id' },
      });
    }
    // The owner's polls are held open (nothing runs them here): all at once, not one after another.
    const mine = await Promise.all(
      accepted.map(({ requestId }) =>
        owner.raw('POST', '/api/v1/retrieve_future', { request_id: requestId }),
      ),
    );
    for (const [index, answer] of mine.entries()) {
      expect(answer.body, accepted[index]?.type).toMatchObject({ request_id: accepted[index]?.requestId });
    }
  });
});

describe('the tenant comes from the API key only', () => {
  it('a tenant named in the body or in headers is ignored', async () => {
    const tenantHeaders = { 'x-tenant': 'rival', 'x-tenant-id': 'rival', 'x-amz-tenant': 'rival' };
    const session = await owner.raw('POST', '/api/v1/create_session', { tenant: 'rival' }, tenantHeaders);
    expect(session.status).toBe(200);
    const sessionId = (session.body as { session_id: string }).session_id;
    const record = await api.cloud.clients.doc.send(
      new GetCommand({
        TableName: api.cloud.names.tables.registry,
        Key: { pk: registryKey.session(sessionId) },
      }),
    );
    expect(record.Item).toMatchObject({ tenant: 'owner' });
    expect(record.Item).not.toHaveProperty('tenant', 'rival');

    const step = await owner.raw(
      'POST',
      '/api/v1/optim_step',
      { model_id: ids.model, seq_id: 8, adam_params: {}, tenant: 'rival' },
      tenantHeaders,
    );
    expect(step.status).toBe(200);
    const requestId = (step.body as { request_id: string }).request_id;
    const row = await api.cloud.clients.doc.send(
      new GetCommand({ TableName: api.cloud.names.tables.futures, Key: { request_id: requestId } }),
    );
    expect((row.Item as FutureRow).tenant).toBe('owner');
    expect((await rival.raw('POST', '/api/v1/retrieve_future', { request_id: requestId })).status).toBe(404);

    // And the rival cannot borrow the owner's identity by naming it.
    const borrowed = await rival.raw(
      'POST',
      '/api/v1/optim_step',
      { model_id: ids.model, seq_id: 9, adam_params: {}, tenant: 'owner' },
      { 'x-tenant': 'owner' },
    );
    expect(borrowed.status).toBe(404);
  });

  it('checkpoint names are per model: the rival may use the owner’s names on its own model', async () => {
    const session = await rival.createSession();
    const model = await rival.createModel({
      session_id: session.session_id,
      model_seq_id: 0,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 2 },
    });
    const save = await rival.raw('POST', '/api/v1/save_weights', {
      model_id: model.model_id,
      seq_id: 1,
      path: 'mine',
    });
    expect(save.status).toBe(200);
    const load = await rival.raw('POST', '/api/v1/load_weights', {
      model_id: model.model_id,
      seq_id: 2,
      path: `tinker://${ids.model}/weights/mine`,
    });
    expect(load).toEqual({
      status: 404,
      body: { error: `checkpoint tinker://${ids.model}/weights/mine not found`, field: 'path' },
    });
  });
});
