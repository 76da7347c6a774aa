import { GetObjectCommand, HeadObjectCommand } from '@aws-sdk/client-s3';
import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requestIdTime } from '../../shared/base/ids.js';
import { TinkerClient } from '../../shared/client/tinker-client.js';
import {
  type CheckpointNameRecord,
  type GcEntryRecord,
  type PublicMarkerRecord,
  registryKey,
} from '../../shared/domain/records.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import { collectCheckpoints } from '../../shared/services/sweeper/checkpoint-gc.js';
import { checkpointArchive } from '../../shared/wire/archive/archive.js';
import { Pipeline } from '../support/pipeline.js';
import { WorkerHarness } from '../support/worker-harness.js';

/**
 * C2-C6 through the whole local stack (HTTP API, scheduler, SQS, the worker Lambda, DynamoDB Local
 * and fauxqs): saves build their archive, the archive route redirects to a presigned URL that
 * fetches with no credentials, TTLs at save and by PUT, expiry read as absence at once, delete,
 * overwrite, publish across two tenants, and the sweeper's collection of what is due.
 */

let harness: WorkerHarness;
let pipeline: Pipeline;

interface Tenant {
  readonly key: string;
  readonly client: TinkerClient;
  readonly sessionId: string;
  readonly modelId: string;
  seq: number;
}

const tenants: Record<'owner' | 'other', Tenant> = {} as Record<'owner' | 'other', Tenant>;

async function newTenant(name: string): Promise<Tenant> {
  const { doc } = harness.cloud.clients;
  const key = await createApiKey(doc, harness.cloud.names.tables.registry, name);
  const client = new TinkerClient({ baseUrl: pipeline.apiUrl, apiKey: key });
  const sessionId = (await client.createSession()).session_id;
  const created = await client.createModel({
    session_id: sessionId,
    model_seq_id: 0,
    base_model: 'reference/byte-lm',
    lora_config: { rank: 4, seed: 3 },
  });
  await client.waitFor(created.request_id);
  return { key, client, sessionId, modelId: created.model_id, seq: 1 };
}

async function registry<T>(pk: string): Promise<T | undefined> {
  const answer = await harness.cloud.clients.doc.send(
    new GetCommand({ TableName: harness.cloud.names.tables.registry, Key: { pk }, ConsistentRead: true }),
  );
  return answer.Item as T | undefined;
}

const nameRecord = (modelId: string, kind: 'weights' | 'sampler', name: string) =>
  registry<CheckpointNameRecord>(registryKey.checkpointName(modelId, kind, name));

async function objectExists(key: string): Promise<boolean> {
  try {
    await harness.cloud.clients.s3.send(
      new HeadObjectCommand({ Bucket: harness.cloud.names.bucket, Key: key }),
    );
    return true;
  } catch {
    return false;
  }
}

async function objectBytes(key: string): Promise<Uint8Array> {
  const answer = await harness.cloud.clients.s3.send(
    new GetObjectCommand({ Bucket: harness.cloud.names.bucket, Key: key }),
  );
  return (await answer.Body?.transformToByteArray()) ?? new Uint8Array();
}

async function saveWeights(
  tenant: Tenant,
  name: string,
  extra: { ttl_seconds?: number; overwrite?: boolean } = {},
): Promise<string> {
  const { request_id } = await tenant.client.saveWeights({
    model_id: tenant.modelId,
    seq_id: ++tenant.seq,
    path: name,
    ...extra,
  });
  await tenant.client.waitFor(request_id);
  return request_id;
}

async function saveSampler(tenant: Tenant, name: string, ttlSeconds?: number): Promise<string> {
  const { request_id } = await tenant.client.saveWeightsForSampler({
    model_id: tenant.modelId,
    seq_id: ++tenant.seq,
    path: name,
    ...(ttlSeconds === undefined ? {} : { ttl_seconds: ttlSeconds }),
  });
  await tenant.client.waitFor(request_id);
  return request_id;
}

/** A lifecycle route of `tenant`, redirects not followed (the SDK's `follow_redirects=False`). */
async function route(
  tenant: Tenant,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; headers: Headers; body: unknown }> {
  const response = await fetch(`${pipeline.apiUrl}/api/v1/training_runs/${path}`, {
    method,
    redirect: 'manual',
    headers: { 'x-api-key': tenant.key, accept: 'application/json', 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  return {
    status: response.status,
    headers: response.headers,
    body: text === '' ? undefined : JSON.parse(text),
  };
}

const ckpt = (tenant: Tenant, kind: 'weights' | 'sampler_weights', name: string) =>
  `${tenant.modelId}/checkpoints/${kind}/${name}`;

async function sample(tenant: Tenant, samplingSessionId: string) {
  return tenant.client.raw('POST', '/api/v1/asample', {
    sampling_session_id: samplingSessionId,
    seq_id: ++tenant.seq,
    num_samples: 1,
    prompt: { chunks: [{ type: 'encoded_text', tokens: [72, 105] }] },
    sampling_params: { max_tokens: 4, seed: 1 },
  });
}

async function samplingSession(tenant: Tenant, modelPath: string): Promise<string> {
  const answer = (await tenant.client.createSamplingSession({
    session_id: tenant.sessionId,
    sampling_session_seq_id: ++tenant.seq,
    model_path: modelPath,
  })) as { sampling_session_id: string };
  return answer.sampling_session_id;
}

const collect = (now = Date.now()) =>
  collectCheckpoints(
    {
      s3: harness.cloud.clients.s3,
      doc: harness.cloud.clients.doc,
      bucket: harness.cloud.names.bucket,
      registryTable: harness.cloud.names.tables.registry,
    },
    now,
  );

beforeAll(async () => {
  harness = await WorkerHarness.start();
  pipeline = await Pipeline.start(harness, { lambdaWorker: true });
  tenants.owner = await newTenant('lab-owner');
  tenants.other = await newTenant('lab-other');
}, 120_000);

afterAll(async () => {
  await pipeline?.stop();
});

describe('the archive (C2)', () => {
  it('is built at save and reached by a 302 to a presigned URL that needs no credentials', async () => {
    const { owner } = tenants;
    const requestId = await saveWeights(owner, 'arch');
    const record = await nameRecord(owner.modelId, 'weights', 'arch');
    // Under the saving run's key (E3), beside the blob's.
    expect(record?.archive_key).toMatch(
      new RegExp(`^archives/${owner.modelId}/c-${requestId}/[0-9a-f]{12}\\.tar$`),
    );
    const blob = await objectBytes(record?.blob_key ?? '');
    expect(record?.size_bytes).toBe(blob.length);

    const before = Date.now();
    const answer = await route(owner, 'GET', `${ckpt(owner, 'weights', 'arch')}/archive`);
    expect(answer.status).toBe(302);
    const location = answer.headers.get('location') ?? '';
    expect(location).toContain(`/archives/${owner.modelId}/`);
    expect(location).toContain('X-Amz-Expires=60');
    // Expires: an HTTP-date ARCHIVE_URL_SECONDS (60) ahead, whole seconds (C4: how long it outlives a revocation).
    const expires = Date.parse(answer.headers.get('expires') ?? '');
    expect(expires).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 + 59_000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 60_000);
    expect(answer.body).toMatchObject({ url: location });

    // What `tinker checkpoint download` does: a plain GET of the URL, no Tinker headers.
    const download = await fetch(location);
    expect(download.status).toBe(200);
    const tar = new Uint8Array(await download.arrayBuffer());
    expect(
      Buffer.from(tar).equals(
        Buffer.from(checkpointArchive(blob, { createdAtMs: requestIdTime(requestId) })),
      ),
    ).toBe(true);
  });

  it('also serves a sampler checkpoint, and builds once the archive of one saved without it', async () => {
    const { owner } = tenants;
    await saveSampler(owner, 'arch-s');
    const sampler = await route(owner, 'GET', `${ckpt(owner, 'sampler_weights', 'arch-s')}/archive`);
    expect(sampler.status).toBe(302);

    // A checkpoint saved before archives were built at save: no archive_key.
    await saveWeights(owner, 'legacy');
    const pk = registryKey.checkpointName(owner.modelId, 'weights', 'legacy');
    const record = (await nameRecord(owner.modelId, 'weights', 'legacy')) as CheckpointNameRecord;
    const { archive_key: _dropped, ...legacy } = record;
    await harness.cloud.clients.doc.send(
      new PutCommand({ TableName: harness.cloud.names.tables.registry, Item: { ...legacy, pk } }),
    );
    const answer = await route(owner, 'GET', `${ckpt(owner, 'weights', 'legacy')}/archive`);
    expect(answer.status).toBe(302);
    const rebuilt = await nameRecord(owner.modelId, 'weights', 'legacy');
    // Built by the route from the committed blob: one key per content, as before runs.
    expect(rebuilt?.archive_key).toBe(`archives/${owner.modelId}/${record.content_id}.tar`);
    const bytes = new Uint8Array(await (await fetch(answer.headers.get('location') ?? '')).arrayBuffer());
    const blob = await objectBytes(record.blob_key ?? '');
    expect(
      Buffer.from(bytes).equals(
        Buffer.from(checkpointArchive(blob, { createdAtMs: record.created_at ?? 0 })),
      ),
    ).toBe(true);
  });

  it("answers another tenant's checkpoint exactly as an unknown one (C6)", async () => {
    const { owner, other } = tenants;
    const foreign = await route(other, 'GET', `${ckpt(owner, 'weights', 'arch')}/archive`);
    const unknown = await route(owner, 'GET', `${ckpt(owner, 'weights', 'no-such')}/archive`);
    expect(foreign.status).toBe(404);
    expect(unknown.status).toBe(404);
    expect(foreign.body).toEqual({
      error: `checkpoint tinker://${owner.modelId}/weights/arch not found`,
      field: 'checkpoint_id',
    });
    expect(unknown.body).toEqual({
      error: `checkpoint tinker://${owner.modelId}/weights/no-such not found`,
      field: 'checkpoint_id',
    });
  });
});

describe('TTL (C5)', () => {
  it('sets expires_at from the commit at save, and from now by PUT; null clears it', async () => {
    const { owner } = tenants;
    await saveWeights(owner, 'ttl-save', { ttl_seconds: 3600 });
    const saved = (await nameRecord(owner.modelId, 'weights', 'ttl-save')) as CheckpointNameRecord;
    expect(saved.expires_at).toBe((saved.created_at ?? 0) + 3_600_000);
    // The intake wrote its gc entry, due at the earliest expiry (submit + ttl), naming no objects
    // (their keys are the committing run's, E3: collection takes them from the name record); a
    // sweep then moves it to the expiry the commit fixed, and collects nothing.
    const entry = (await registry<GcEntryRecord>(registryKey.gcEntry(saved.content_id))) as GcEntryRecord;
    expect(entry).toMatchObject({ owner_key: 'gc', name_pk: saved.pk });
    expect(entry.due).toBeLessThan(saved.expires_at ?? 0);
    expect(entry.due).toBeGreaterThan((saved.expires_at ?? 0) - 60_000);
    expect(entry.blob_keys).toEqual([]);
    const early = await collect(entry.due);
    expect(early).toMatchObject({ entries_moved: 1, checkpoints_collected: 0 });
    expect((await registry<GcEntryRecord>(registryKey.gcEntry(saved.content_id)))?.due).toBe(
      saved.expires_at,
    );
    expect(await objectExists(saved.blob_key ?? '')).toBe(true);

    const before = Date.now();
    const put = await route(owner, 'PUT', `${ckpt(owner, 'weights', 'ttl-save')}/ttl`, { ttl_seconds: 60 });
    expect(put.status).toBe(200);
    const moved = (await nameRecord(owner.modelId, 'weights', 'ttl-save')) as CheckpointNameRecord;
    expect(moved.expires_at).toBeGreaterThanOrEqual(before + 60_000);
    expect(moved.expires_at).toBeLessThanOrEqual(Date.now() + 60_000);
    expect((await registry<GcEntryRecord>(registryKey.gcEntry(saved.content_id)))?.due).toBe(
      moved.expires_at,
    );

    expect(
      (await route(owner, 'PUT', `${ckpt(owner, 'weights', 'ttl-save')}/ttl`, { ttl_seconds: null })).status,
    ).toBe(200);
    const cleared = await nameRecord(owner.modelId, 'weights', 'ttl-save');
    expect(cleared?.expires_at).toBeUndefined();
    expect(await registry(registryKey.gcEntry(saved.content_id))).toBeUndefined();
  });

  it('refuses a TTL <= 0, a fraction or a string with 400 and changes nothing', async () => {
    const { owner } = tenants;
    const path = `${ckpt(owner, 'weights', 'ttl-save')}/ttl`;
    const before = await nameRecord(owner.modelId, 'weights', 'ttl-save');
    for (const ttl of [0, -5, 1.5, '60', true]) {
      const answer = await route(owner, 'PUT', path, { ttl_seconds: ttl });
      expect(answer.status, String(ttl)).toBe(400);
      expect(answer.body).toMatchObject({ field: 'ttl_seconds' });
    }
    expect((await route(owner, 'PUT', path, {})).status).toBe(400);
    expect(await nameRecord(owner.modelId, 'weights', 'ttl-save')).toEqual(before);
    // At save too: nothing is reserved, nothing queued.
    const refused = await owner.client.raw('POST', '/api/v1/save_weights', {
      model_id: owner.modelId,
      seq_id: owner.seq + 1,
      path: 'ttl-zero',
      ttl_seconds: 0,
    });
    expect(refused.status).toBe(400);
    expect(await nameRecord(owner.modelId, 'weights', 'ttl-zero')).toBeUndefined();
  });

  it('makes an expired checkpoint absent at once: weights_info, load, sampling, archive, TTL', async () => {
    const { owner } = tenants;
    await saveWeights(owner, 'short', { ttl_seconds: 2 });
    await saveSampler(owner, 'short-s', 2);
    const session = await samplingSession(owner, `tinker://${owner.modelId}/sampler_weights/short-s`);
    expect((await sample(owner, session)).status).toBe(200);
    const record = (await nameRecord(owner.modelId, 'sampler', 'short-s')) as CheckpointNameRecord;
    await new Promise((resolve) =>
      setTimeout(resolve, Math.max(0, (record.expires_at ?? 0) - Date.now() + 50)),
    );

    const weightsPath = `tinker://${owner.modelId}/weights/short`;
    expect(
      (await owner.client.raw('POST', '/api/v1/weights_info', { tinker_path: weightsPath })).status,
    ).toBe(404);
    const load = await owner.client.raw('POST', '/api/v1/load_weights', {
      model_id: owner.modelId,
      seq_id: owner.seq + 1,
      path: weightsPath,
      optimizer: false,
    });
    expect(load.status).toBe(404);
    expect((await sample(owner, session)).status).toBe(404);
    expect((await route(owner, 'GET', `${ckpt(owner, 'weights', 'short')}/archive`)).status).toBe(404);
    expect(
      (await route(owner, 'PUT', `${ckpt(owner, 'weights', 'short')}/ttl`, { ttl_seconds: 60 })).status,
    ).toBe(404);

    // The sweeper collects both: blobs and archives first, then the records.
    const counters = await collect();
    expect(counters.checkpoints_collected).toBeGreaterThanOrEqual(2);
    for (const [kind, name] of [
      ['weights', 'short'],
      ['sampler', 'short-s'],
    ] as const) {
      expect(await nameRecord(owner.modelId, kind, name)).toBeUndefined();
    }
    expect(await objectExists(record.blob_key ?? '')).toBe(false);
    expect(await objectExists(record.archive_key ?? '')).toBe(false);
    expect(await registry(registryKey.gcEntry(record.content_id))).toBeUndefined();
    // A name freed by expiry can be saved again without overwrite.
    await saveWeights(owner, 'short');
    expect((await nameRecord(owner.modelId, 'weights', 'short'))?.expires_at).toBeUndefined();
  }, 60_000);
});

describe('delete and overwrite (C3)', () => {
  it('removes the name at once; the sweeper deletes its blob and archive', async () => {
    const { owner, other } = tenants;
    await saveWeights(owner, 'doomed');
    const record = (await nameRecord(owner.modelId, 'weights', 'doomed')) as CheckpointNameRecord;
    // Not the other tenant's to delete: answered as unknown, nothing changed.
    expect((await route(other, 'DELETE', ckpt(owner, 'weights', 'doomed'))).status).toBe(404);
    expect(await nameRecord(owner.modelId, 'weights', 'doomed')).toEqual(record);

    expect((await route(owner, 'DELETE', ckpt(owner, 'weights', 'doomed'))).status).toBe(200);
    expect(await nameRecord(owner.modelId, 'weights', 'doomed')).toBeUndefined();
    const path = `tinker://${owner.modelId}/weights/doomed`;
    expect((await owner.client.raw('POST', '/api/v1/weights_info', { tinker_path: path })).status).toBe(404);
    expect((await route(owner, 'DELETE', ckpt(owner, 'weights', 'doomed'))).status).toBe(404);
    expect(await registry<GcEntryRecord>(registryKey.gcEntry(record.content_id))).toMatchObject({
      blob_keys: [record.blob_key, record.archive_key],
    });
    expect(await objectExists(record.blob_key ?? '')).toBe(true);
    await collect();
    expect(await objectExists(record.blob_key ?? '')).toBe(false);
    expect(await objectExists(record.archive_key ?? '')).toBe(false);
    expect(await registry(registryKey.gcEntry(record.content_id))).toBeUndefined();
  });

  it('fails a sample of a session whose checkpoint was deleted with a 404, not a hang', async () => {
    const { owner } = tenants;
    await saveSampler(owner, 'gone-s');
    const session = await samplingSession(owner, `tinker://${owner.modelId}/sampler_weights/gone-s`);
    expect((await route(owner, 'DELETE', ckpt(owner, 'sampler_weights', 'gone-s'))).status).toBe(200);
    const answer = await sample(owner, session);
    expect(answer.status).toBe(404);
  });

  it('keeps a clash a 400 without overwrite, and replaces the name with it', async () => {
    const { owner } = tenants;
    await saveWeights(owner, 'again');
    const first = (await nameRecord(owner.modelId, 'weights', 'again')) as CheckpointNameRecord;
    const clash = await owner.client.raw('POST', '/api/v1/save_weights', {
      model_id: owner.modelId,
      seq_id: owner.seq + 1,
      path: 'again',
    });
    expect(clash.status).toBe(400);
    expect(clash.body).toMatchObject({ field: 'path' });

    await saveWeights(owner, 'again', { overwrite: true });
    const second = (await nameRecord(owner.modelId, 'weights', 'again')) as CheckpointNameRecord;
    expect(second.status).toBe('committed');
    expect(second.content_id).not.toBe(first.content_id);
    await collect();
    expect(await objectExists(first.blob_key ?? '')).toBe(false);
    expect(await objectExists(first.archive_key ?? '')).toBe(false);
    expect(await objectExists(second.blob_key ?? '')).toBe(true);
    // The collected gc entry of the old content did not take the new record with it.
    expect(await nameRecord(owner.modelId, 'weights', 'again')).toEqual(second);
  });
});

describe('publish (C4)', () => {
  it('lets any tenant load, sample, inspect and download a published checkpoint until it is unpublished', async () => {
    const { owner, other } = tenants;
    await saveWeights(owner, 'shared');
    await saveSampler(owner, 'shared-s');
    const weightsPath = `tinker://${owner.modelId}/weights/shared`;
    const samplerPath = `tinker://${owner.modelId}/sampler_weights/shared-s`;
    expect(
      (await other.client.raw('POST', '/api/v1/weights_info', { tinker_path: weightsPath })).status,
    ).toBe(404);
    // Only the owner publishes.
    expect((await route(other, 'POST', `${ckpt(owner, 'weights', 'shared')}/publish`)).status).toBe(404);

    for (const [kind, name] of [
      ['weights', 'shared'],
      ['sampler_weights', 'shared-s'],
    ] as const) {
      expect((await route(owner, 'POST', `${ckpt(owner, kind, name)}/publish`)).status).toBe(200);
      // Already public: the same success, so the SDK does not retry for minutes.
      expect((await route(owner, 'POST', `${ckpt(owner, kind, name)}/publish`)).status).toBe(200);
    }
    const record = (await nameRecord(owner.modelId, 'weights', 'shared')) as CheckpointNameRecord;
    expect(record.public).toBe(true);
    expect(
      await registry<PublicMarkerRecord>(registryKey.publicMarker(owner.modelId, 'weights', 'shared')),
    ).toMatchObject({
      owner_key: 'public',
      tenant: record.tenant,
      content_id: record.content_id,
    });

    const info = await other.client.raw('POST', '/api/v1/weights_info', { tinker_path: weightsPath });
    expect(info).toMatchObject({ status: 200, body: { base_model: 'reference/byte-lm', lora_rank: 4 } });
    expect((await route(other, 'GET', `${ckpt(owner, 'weights', 'shared')}/archive`)).status).toBe(302);
    const load = await other.client.loadWeights({
      model_id: other.modelId,
      seq_id: ++other.seq,
      path: weightsPath,
      optimizer: false,
    });
    await other.client.waitFor(load.request_id);
    const session = await samplingSession(other, samplerPath);
    const sampled = await sample(other, session);
    expect(sampled.status).toBe(200);
    await other.client.waitFor((sampled.body as { request_id: string }).request_id);
    // Still the owner's alone to delete or change.
    expect((await route(other, 'DELETE', ckpt(owner, 'weights', 'shared'))).status).toBe(404);
    expect(
      (await route(other, 'PUT', `${ckpt(owner, 'weights', 'shared')}/ttl`, { ttl_seconds: 5 })).status,
    ).toBe(404);

    expect((await route(owner, 'DELETE', `${ckpt(owner, 'weights', 'shared')}/publish`)).status).toBe(200);
    expect((await route(owner, 'DELETE', `${ckpt(owner, 'weights', 'shared')}/publish`)).status).toBe(200);
    expect(
      (await route(owner, 'DELETE', `${ckpt(owner, 'sampler_weights', 'shared-s')}/publish`)).status,
    ).toBe(200);
    expect((await nameRecord(owner.modelId, 'weights', 'shared'))?.public).toBeUndefined();
    expect(await registry(registryKey.publicMarker(owner.modelId, 'weights', 'shared'))).toBeUndefined();
    expect(
      (await other.client.raw('POST', '/api/v1/weights_info', { tinker_path: weightsPath })).status,
    ).toBe(404);
    expect((await route(other, 'GET', `${ckpt(owner, 'weights', 'shared')}/archive`)).status).toBe(404);
    expect((await sample(other, session)).status).toBe(404);
    const refused = await other.client.raw('POST', '/api/v1/load_weights', {
      model_id: other.modelId,
      seq_id: other.seq + 1,
      path: weightsPath,
      optimizer: false,
    });
    expect(refused.status).toBe(404);
    // The owner keeps full use of it.
    expect(
      (await owner.client.raw('POST', '/api/v1/weights_info', { tinker_path: weightsPath })).status,
    ).toBe(200);
  }, 60_000);
});
