import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { registryKey } from '../../shared/domain/records.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';

/**
 * A tenant never sees or touches another tenant's sessions, models, futures, sampling sessions or
 * checkpoints: every such id answers exactly what an unknown id answers (404), and nothing is stored.
 */
let api: ApiHarness;
let owner: TinkerClient;
let rival: TinkerClient;

const owned = {
  session: '',
  model: '',
  future: '',
  samplingSession: '',
  samplerPath: '',
  weightsPath: '',
};
let rivalSession = '';
let rivalModel = '';

const datum = {
  model_input: { chunks: [{ type: 'encoded_text', tokens: [1, 2] }] },
  loss_fn_inputs: { target_tokens: { data: [2, 3], dtype: 'int64' as const, shape: [2] } },
};

beforeAll(async () => {
  api = await startApiHarness();
  ({ client: owner } = await api.tenant('owner'));
  ({ client: rival } = await api.tenant('rival'));
  owned.session = (await owner.createSession()).session_id;
  const model = await owner.createModel({
    session_id: owned.session,
    model_seq_id: 0,
    base_model: 'reference/byte-lm',
    lora_config: { rank: 4 },
  });
  owned.model = model.model_id;
  owned.future = (
    await owner.forwardBackward({
      model_id: owned.model,
      seq_id: 1,
      forward_backward_input: { data: [datum], loss_fn: 'cross_entropy' },
    })
  ).request_id;
  await owner.saveWeightsForSampler({ model_id: owned.model, seq_id: 2, path: 'shared-name' });
  await owner.saveWeights({ model_id: owned.model, seq_id: 3, path: 'shared-name' });
  owned.samplerPath = `tinker://${owned.model}/sampler_weights/shared-name`;
  owned.weightsPath = `tinker://${owned.model}/weights/shared-name`;
  await api.cloud.clients.doc.send(
    new UpdateCommand({
      TableName: api.cloud.names.tables.registry,
      Key: { pk: registryKey.checkpointName(owned.model, 'sampler', 'shared-name') },
      UpdateExpression: 'SET #status = :committed',
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: { ':committed': 'committed' },
    }),
  );
  owned.samplingSession = (
    await owner.createSamplingSession({
      session_id: owned.session,
      sampling_session_seq_id: 0,
      model_path: owned.samplerPath,
    })
  ).sampling_session_id;
  rivalSession = (await rival.createSession()).session_id;
  rivalModel = (
    await rival.createModel({
      session_id: rivalSession,
      model_seq_id: 0,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 4 },
    })
  ).model_id;
});

afterAll(async () => {
  await api?.stop();
});

interface Probe {
  readonly endpoint: string;
  /** The body naming the owner's id, and the same body with an id nobody has. */
  readonly body: (ids: typeof owned) => Record<string, unknown>;
  readonly field: string;
  /** GET routes: the path under /api/v1/ naming the id (there is no body). */
  readonly get?: (ids: typeof owned) => string;
  /** Routes with another method: the method and the path under /api/v1/ naming the id. */
  readonly route?: (ids: typeof owned) => { readonly method: string; readonly path: string };
}

/** The committed sampler checkpoint as a lifecycle route names it (C2-C5). */
const samplerRoute = (ids: typeof owned) =>
  `training_runs/${ids.model}/checkpoints/sampler_weights/shared-name`;
const lifecycle = (method: string, suffix: string): Probe => ({
  endpoint: `${method} training_runs/{run_id}/checkpoints/{kind}/{name}${suffix}`,
  body: () => (suffix === '/ttl' ? { ttl_seconds: 60 } : {}),
  route: (ids) => ({ method, path: `${samplerRoute(ids)}${suffix}` }),
  field: 'checkpoint_id',
});

const UNKNOWN = {
  session: 'sess-0000',
  model: 'model-0000',
  future: '0'.repeat(32),
  samplingSession: 'samp-0000',
  samplerPath: 'tinker://model-0000/sampler_weights/shared-name',
  weightsPath: 'tinker://model-0000/weights/shared-name',
};

const probes: Probe[] = [
  { endpoint: 'session_heartbeat', body: (ids) => ({ session_id: ids.session }), field: 'session_id' },
  {
    endpoint: 'create_model',
    body: (ids) => ({
      session_id: ids.session,
      model_seq_id: 5,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 4 },
    }),
    field: 'session_id',
  },
  {
    endpoint: 'forward_backward',
    body: (ids) => ({
      model_id: ids.model,
      seq_id: 10,
      forward_backward_input: { data: [datum], loss_fn: 'cross_entropy' },
    }),
    field: 'model_id',
  },
  {
    endpoint: 'forward',
    body: (ids) => ({
      model_id: ids.model,
      seq_id: 10,
      forward_input: { data: [datum], loss_fn: 'cross_entropy' },
    }),
    field: 'model_id',
  },
  {
    endpoint: 'optim_step',
    body: (ids) => ({ model_id: ids.model, seq_id: 10, adam_params: {} }),
    field: 'model_id',
  },
  {
    endpoint: 'save_weights',
    body: (ids) => ({ model_id: ids.model, seq_id: 10, path: 'x' }),
    field: 'model_id',
  },
  {
    endpoint: 'save_weights_for_sampler',
    body: (ids) => ({ model_id: ids.model, seq_id: 10, path: 'x' }),
    field: 'model_id',
  },
  {
    endpoint: 'save_weights_for_sampler',
    body: (ids) => ({ model_id: ids.model, seq_id: 10, sampling_session_seq_id: 4 }),
    field: 'model_id',
  },
  {
    endpoint: 'load_weights',
    body: (ids) => ({ model_id: ids.model, seq_id: 10, path: `tinker://${rivalModel}/weights/x` }),
    field: 'model_id',
  },
  {
    endpoint: 'load_weights',
    body: (ids) => ({ model_id: rivalModel, seq_id: 10, path: ids.weightsPath }),
    field: 'path',
  },
  { endpoint: 'unload_model', body: (ids) => ({ model_id: ids.model }), field: 'model_id' },
  {
    endpoint: 'create_sampling_session',
    body: (ids) => ({ session_id: ids.session, sampling_session_seq_id: 9, base_model: 'reference/byte-lm' }),
    field: 'session_id',
  },
  {
    endpoint: 'create_sampling_session',
    body: (ids) => ({ session_id: rivalSession, sampling_session_seq_id: 9, model_path: ids.samplerPath }),
    field: 'model_path',
  },
  {
    endpoint: 'asample',
    body: (ids) => ({
      sampling_session_id: ids.samplingSession,
      seq_id: 0,
      prompt: { chunks: [{ tokens: [1] }] },
      sampling_params: { max_tokens: 2 },
    }),
    field: 'sampling_session_id',
  },
  { endpoint: 'retrieve_future', body: (ids) => ({ request_id: ids.future }), field: 'request_id' },
  { endpoint: 'get_info', body: (ids) => ({ model_id: ids.model, type: 'get_info' }), field: 'model_id' },
  // The weights checkpoint is still pending (408 to its owner), the sampler one committed: neither shows.
  { endpoint: 'weights_info', body: (ids) => ({ tinker_path: ids.weightsPath }), field: 'tinker_path' },
  { endpoint: 'weights_info', body: (ids) => ({ tinker_path: ids.samplerPath }), field: 'tinker_path' },
  {
    endpoint: 'weights_info',
    body: (ids) => ({ tinker_path: ids.samplerPath.replace('/sampler_weights/', '/') }),
    field: 'tinker_path',
  },
  {
    endpoint: 'samplers/{sampler_id}',
    body: () => ({}),
    get: (ids) => `samplers/${ids.samplingSession}`,
    field: 'sampler_id',
  },
  // The listings (C1, C6): another tenant's run or session is an unknown one, in either scope (none
  // of the owner's checkpoints is published).
  ...['', '?access_scope=owned', '?access_scope=accessible'].flatMap((scope): Probe[] => [
    {
      endpoint: `training_runs/{run_id}${scope}`,
      body: () => ({}),
      get: (ids) => `training_runs/${ids.model}${scope}`,
      field: 'run_id',
    },
    {
      endpoint: `sessions/{session_id}${scope}`,
      body: () => ({}),
      get: (ids) => `sessions/${ids.session}${scope}`,
      field: 'session_id',
    },
  ]),
  {
    endpoint: 'training_runs/{run_id}/checkpoints',
    body: () => ({}),
    get: (ids) => `training_runs/${ids.model}/checkpoints`,
    field: 'run_id',
  },
  lifecycle('GET', '/archive'),
  lifecycle('DELETE', ''),
  lifecycle('POST', '/publish'),
  lifecycle('DELETE', '/publish'),
  lifecycle('PUT', '/ttl'),
];

function withIds(text: string, from: typeof owned, to: typeof owned): string {
  let result = text;
  for (const key of Object.keys(from) as (keyof typeof owned)[])
    result = result.split(from[key]).join(to[key]);
  return result;
}

describe('tenant isolation on every endpoint', () => {
  it.each(probes)(
    '$endpoint naming another tenant’s $field answers what an unknown id answers',
    async (probe) => {
      const before = await api.counts();
      const ask = (ids: typeof owned) => {
        if (probe.route !== undefined) {
          const { method, path } = probe.route(ids);
          return rival.raw(method, `/api/v1/${path}`, method === 'PUT' ? probe.body(ids) : undefined);
        }
        return probe.get === undefined
          ? rival.raw('POST', `/api/v1/${probe.endpoint}`, probe.body(ids))
          : rival.raw('GET', `/api/v1/${probe.get(ids)}`);
      };
      const theirs = await ask(owned);
      const unknown = await ask(UNKNOWN);
      expect(theirs.status).toBe(404);
      expect(theirs.body).toMatchObject({ field: probe.field });
      expect(unknown.status).toBe(404);
      // Indistinguishable: the same message with the ids swapped.
      expect(withIds(JSON.stringify(theirs.body), owned, UNKNOWN)).toBe(JSON.stringify(unknown.body));
      expect(await api.counts()).toEqual(before);
    },
  );

  it("another tenant's listings show none of the owner's runs, checkpoints or sessions", async () => {
    for (const scope of ['owned', 'accessible']) {
      const runs = await rival.raw('GET', `/api/v1/training_runs?access_scope=${scope}`);
      expect(runs.status).toBe(200);
      expect(runs.body).toMatchObject({ cursor: { total_count: 1 } });
      expect(JSON.stringify(runs.body)).not.toContain(owned.model);
      const sessions = await rival.raw('GET', `/api/v1/sessions?access_scope=${scope}`);
      expect(sessions.body).toEqual({ sessions: [rivalSession] });
    }
    const checkpoints = await rival.raw('GET', '/api/v1/checkpoints');
    expect(checkpoints.body).toEqual({ checkpoints: [], cursor: { offset: 0, limit: 100, total_count: 0 } });
    const mine = await owner.raw('GET', '/api/v1/training_runs');
    expect(
      (mine.body as { training_runs: { training_run_id: string }[] }).training_runs.map(
        (r) => r.training_run_id,
      ),
    ).toEqual([owned.model]);
  });

  it('the owner still sees and uses everything', async () => {
    expect(await owner.heartbeat(owned.session)).toEqual({ type: 'session_heartbeat' });
    const poll = await owner.raw('POST', '/api/v1/retrieve_future', { request_id: owned.future });
    expect(poll.body).toMatchObject({ type: 'try_again', request_id: owned.future });
    const sample = await owner.asample({
      sampling_session_id: owned.samplingSession,
      seq_id: 0,
      prompt: { chunks: [{ tokens: [1] }] },
      sampling_params: { max_tokens: 2 },
    });
    expect(typeof sample.request_id).toBe('string');
    const next = await owner.optimStep({ model_id: owned.model, seq_id: 4, adam_params: {} });
    expect(next.model_id).toBe(owned.model);
    expect((await owner.getInfo(owned.model)).model_id).toBe(owned.model);
    expect((await owner.weightsInfo(owned.samplerPath)).lora_rank).toBe(4);
    const pending = await owner.raw('POST', '/api/v1/weights_info', { tinker_path: owned.weightsPath });
    expect(pending.status).toBe(408);
    expect(await owner.getSampler(owned.samplingSession)).toEqual({
      sampler_id: owned.samplingSession,
      base_model: 'reference/byte-lm',
      model_path: owned.samplerPath,
    });
  });
});
