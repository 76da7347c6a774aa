import { readFile } from 'node:fs/promises';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { StepUserError } from '../../shared/base/errors.js';
import { storageKeys } from '../../shared/base/storage-keys.js';
import { type CheckpointNameRecord, registryKey } from '../../shared/domain/records.js';
import {
  loadCheckpointBlob,
  requireLiveSamplerCheckpoint,
} from '../../shared/services/worker/checkpoint-source.js';
import { SamplerCache } from '../../shared/services/worker/sampler-cache.js';
import { discardBlob } from '../../shared/services/worker/state-blobs.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';

/**
 * The worker's side of C3-C5 against DynamoDB Local and fauxqs: a load or a sample queued while its
 * checkpoint was live, run after it expired, was deleted, replaced or unpublished, fails as the
 * user's error (a `StepUserError`: the step fails alone, no retry, no server error), and reads
 * nothing; a published checkpoint loads for another tenant.
 */
let cloud: TestCloud;
const NOW = 1_800_000_000_000;

function record(name: string, extra: Partial<CheckpointNameRecord> = {}): CheckpointNameRecord {
  const contentId = `c-${name}`;
  return {
    pk: registryKey.checkpointName('model-w', 'weights', name),
    tenant: 'owner',
    model_id: 'model-w',
    kind: 'weights',
    name,
    path: `tinker://model-w/weights/${name}`,
    request_id: name,
    status: 'committed',
    content_id: contentId,
    blob_key: storageKeys.checkpoint('model-w', contentId, 'run-1'),
    ...extra,
  };
}

async function store(item: CheckpointNameRecord, blob = true): Promise<void> {
  await cloud.clients.doc.send(new PutCommand({ TableName: cloud.names.tables.registry, Item: item }));
  if (blob) {
    await cloud.clients.s3.send(
      new PutObjectCommand({ Bucket: cloud.names.bucket, Key: item.blob_key, Body: Buffer.from(item.name) }),
    );
  }
}

const ref = (item: CheckpointNameRecord) => ({
  pk: item.pk,
  model_id: item.model_id,
  kind: item.kind,
  name: item.name,
  path: item.path,
  content_id: item.content_id,
});

/** The checkpoint's bytes, through a spool file when `asFile` (./state-blobs.ts), which is then removed. */
const load = async (item: CheckpointNameRecord, tenant = 'owner', now = NOW, asFile = false) => {
  const blob = await loadCheckpointBlob(ref(item), new Map(), {
    asFile,
    clients: cloud.clients,
    tables: cloud.names.tables,
    bucket: cloud.names.bucket,
    tenant,
    now,
  });
  if ('bytes' in blob) return blob.bytes;
  const bytes = await readFile(blob.path);
  await discardBlob(blob);
  return bytes;
};

beforeAll(async () => {
  cloud = await setupTestCloud();
});

describe('a queued load_weights (C3-C5)', () => {
  it('reads a live checkpoint, and fails as the user’s error once it has expired', async () => {
    const item = record('ttl', { expires_at: NOW + 1_000 });
    await store(item);
    expect(Buffer.from(await load(item)).toString()).toBe('ttl');
    expect(Buffer.from(await load(item, 'owner', NOW, true)).toString()).toBe('ttl');
    await expect(load(item, 'owner', NOW + 1_000)).rejects.toThrow(StepUserError);
    await expect(load(item, 'owner', NOW + 1_000)).rejects.toThrow(/has expired/);
  });

  it('fails as the user’s error when the name was deleted, or now holds other content', async () => {
    const deleted = record('deleted');
    await expect(load(deleted)).rejects.toThrow(StepUserError);
    const replaced = record('replaced');
    await store({ ...replaced, content_id: 'c-newer' });
    await expect(load(replaced)).rejects.toThrow(/deleted or replaced/);
  });

  it('fails as the user’s error when the record is there but its blob was collected', async () => {
    const item = record('collected');
    await store(item, false);
    for (const asFile of [false, true]) {
      const failure = await load(item, 'owner', NOW, asFile).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(StepUserError);
      expect(String(failure)).toMatch(/was deleted/);
    }
  });

  it('loads a published checkpoint for another tenant, and not once it is private again', async () => {
    const item = record('shared', { public: true });
    await store(item);
    expect(Buffer.from(await load(item, 'reader')).toString()).toBe('shared');
    await store({ ...item, public: undefined } as CheckpointNameRecord, false);
    await expect(load(item, 'reader')).rejects.toThrow(StepUserError);
  });
});

describe('a queued sample on a sampler checkpoint (C3-C5)', () => {
  const sampler = (name: string, extra: Partial<CheckpointNameRecord> = {}): CheckpointNameRecord => ({
    ...record(name, extra),
    pk: registryKey.checkpointName('model-w', 'sampler', name),
    kind: 'sampler',
    path: `tinker://model-w/sampler_weights/${name}`,
  });
  const samplerCache = (clients = cloud.clients) =>
    new SamplerCache(new ReferenceBackend(), clients, cloud.names.bucket, cloud.names.tables.registry);
  // A fresh cache per check, as each work item has its own: a later check reads the record again.
  const check = (item: CheckpointNameRecord, tenant = 'owner', now = NOW, samplers = samplerCache()) =>
    requireLiveSamplerCheckpoint(
      { model_id: item.model_id, content_id: item.content_id, path: item.path },
      { readName: (pk) => samplers.checkpointName(pk), tenant, now },
    );

  it('passes while live and readable, and fails as the user’s error once expired, deleted or private', async () => {
    const item = sampler('s-ttl', { expires_at: NOW + 10 });
    await store(item, false);
    // The key its name record names, never one derived from the content (E3).
    await expect(check(item)).resolves.toBe(item.blob_key);
    await expect(check(item, 'owner', NOW + 10)).rejects.toThrow(StepUserError);
    await expect(check(sampler('s-never'))).rejects.toThrow(/no longer exists/);
    await expect(check(item, 'stranger')).rejects.toThrow(StepUserError);
  });

  it('reads the name record once for all the samples of one work item, each still checked for its tenant', async () => {
    const item = sampler('s-shared', { public: true });
    await store(item, false);
    const clients = localAwsClients(cloud.endpoints);
    let gets = 0;
    clients.dynamo.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'GetItemCommand') gets++;
        return next(args);
      },
      { step: 'initialize', name: 'countGets' },
    );
    try {
      const samplers = samplerCache(clients);
      await Promise.all(['owner', 'reader', 'owner'].map((tenant) => check(item, tenant, NOW, samplers)));
      expect(gets).toBe(1);
      // Unpublished: the next work item reads it afresh, and the other tenant's sample fails there.
      await store({ ...item, public: undefined } as CheckpointNameRecord, false);
      await expect(check(item, 'reader', NOW, samplerCache(clients))).rejects.toThrow(StepUserError);
      expect(gets).toBe(2);
    } finally {
      clients.dynamo.destroy();
    }
  });

  it('turns a collected sampler blob into the user’s error, not a retry', async () => {
    const samplers = samplerCache();
    const failure = await samplers
      .get('reference/byte-lm', {
        model_id: 'model-w',
        content_id: 'c-gone',
        blob_key: storageKeys.checkpoint('model-w', 'c-gone', 'run-1'),
      })
      .catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(StepUserError);
  });
});
