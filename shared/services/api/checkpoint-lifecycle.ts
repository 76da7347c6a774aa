import { GetObjectCommand } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { ValidationError } from '../../base/errors.js';
import { storageKeys } from '../../base/storage-keys.js';
import { type CheckpointRouteKey, checkpointKeyFromRoute } from '../../domain/checkpoint-life.js';
import type { CheckpointNameRecord } from '../../domain/records.js';
import {
  deleteCheckpoint,
  recordArchive,
  setCheckpointPublic,
  setCheckpointTtl,
} from '../../repositories/checkpoints/lifecycle.js';
import { requireLiveCheckpoint } from '../../repositories/checkpoints/names.js';
import { checkpointArchive } from '../../wire/archive/archive.js';
import { getBytes, putBytes } from '../worker/blobs.js';
import { HttpAnswer } from './bodies.js';
import type { OperationContext } from './operation-context.js';
import { parseRequest } from './request-checks.js';
import * as schemas from './schemas.js';

/**
 * The owner's and readers' checkpoint routes (C2-C5) under
 * `training_runs/{run_id}/checkpoints/{kind}/{name}`: the archive's presigned URL, delete, publish
 * and unpublish, TTL. Each names its checkpoint by the route (`checkpointKeyFromRoute`); another
 * tenant's answers as an unknown one (C6), and so does an expired, deleted or unsaved one.
 */

function routeKey(params: Readonly<Record<string, string>>): CheckpointRouteKey {
  parseRequest(schemas.checkpointRouteParams, params);
  const key = checkpointKeyFromRoute(params);
  // The schema has just accepted the three parameters; this only narrows the type.
  if (key === undefined) throw new ValidationError('checkpoint_id: not a checkpoint id');
  return key;
}

function lifecycleStore(ctx: OperationContext) {
  return { doc: ctx.clients.doc, table: ctx.tables.registry };
}

/**
 * Seconds an archive URL lives (C4): `ARCHIVE_URL_SECONDS`, and never past the checkpoint's own
 * expiry. S3 checks a URL's expiry only when a download starts, so this is how long an issued URL
 * outlives an unpublish or a delete (whose objects the sweeper collects in its next round).
 */
export function archiveUrlLifetime(
  maxSeconds: number,
  record: Pick<CheckpointNameRecord, 'expires_at'>,
  now: number,
): number {
  if (record.expires_at === undefined) return maxSeconds;
  return Math.max(1, Math.min(maxSeconds, Math.floor((record.expires_at - now) / 1000)));
}

/**
 * C2: 302 to a presigned S3 GET of the checkpoint's tar, with `Expires` (the SDK's current
 * contract); the body also carries `{url, expires}`. The presigner signs locally and sends nothing.
 * A checkpoint saved before archives were built at save gets its archive built here, once: it is
 * small (about 20 KB at rank 64, under a millisecond), so it never needs streaming or a 503.
 */
export async function checkpointArchiveUrl(
  ctx: OperationContext,
  params: Readonly<Record<string, string>>,
): Promise<HttpAnswer> {
  const key = routeKey(params);
  const record = await requireLiveCheckpoint(ctx.clients.doc, ctx.tables.registry, key, ctx.tenant, {
    now: ctx.now,
    access: 'read',
  });
  const archiveKey = record.archive_key ?? (await buildMissingArchive(ctx, record));
  const seconds = archiveUrlLifetime(ctx.tunables.archiveUrlSeconds, record, ctx.now);
  const url = await getSignedUrl(
    ctx.clients.s3,
    new GetObjectCommand({ Bucket: ctx.bucket, Key: archiveKey }),
    {
      expiresIn: seconds,
    },
  );
  const expires = new Date(ctx.now + seconds * 1000);
  return new HttpAnswer(
    302,
    { url, expires: expires.toISOString() },
    {
      location: url,
      expires: expires.toUTCString(),
      'cache-control': 'no-store',
    },
  );
}

async function buildMissingArchive(ctx: OperationContext, record: CheckpointNameRecord): Promise<string> {
  const blob = await getBytes(
    ctx.clients.s3,
    ctx.bucket,
    record.blob_key ?? storageKeys.legacyCheckpoint(record.model_id, record.content_id),
  );
  // Built here from committed bytes, so every build writes the same tar: one key per content will do.
  const archiveKey = storageKeys.legacyArchive(record.model_id, record.content_id);
  const tar = checkpointArchive(blob, { createdAtMs: record.created_at ?? 0 });
  await putBytes(ctx.clients.s3, ctx.bucket, archiveKey, tar);
  // A lost race (deleted or expired meanwhile) leaves the object to that content's gc entry.
  await recordArchive(lifecycleStore(ctx), record, archiveKey, ctx.now);
  return archiveKey;
}

/** C3: the SDK ignores the body. */
export async function deleteCheckpointRoute(
  ctx: OperationContext,
  params: Readonly<Record<string, string>>,
): Promise<Record<string, never>> {
  await deleteCheckpoint(lifecycleStore(ctx), routeKey(params), ctx.tenant, ctx.now);
  return {};
}

/**
 * C4: POST publishes, DELETE unpublishes. Already so answers 200 like a change: the SDK's
 * `execute_with_retries` retries a 409 for about five minutes whatever `x-should-retry` says
 * (docs/design.md#c4), so a 409 would only make the user wait for the same outcome.
 */
export async function publishCheckpointRoute(
  ctx: OperationContext & { readonly method: string },
  params: Readonly<Record<string, string>>,
): Promise<{ readonly public: boolean }> {
  const published = ctx.method !== 'DELETE';
  await setCheckpointPublic(lifecycleStore(ctx), routeKey(params), ctx.tenant, ctx.now, published);
  return { public: published };
}

/** C5: `{"ttl_seconds": n}` expires n seconds from now; `null` never. */
export async function setCheckpointTtlRoute(
  ctx: OperationContext,
  body: unknown,
  params: Readonly<Record<string, string>>,
): Promise<{ readonly expires_at: string | null }> {
  const key = routeKey(params);
  const request = parseRequest(schemas.setTtlRequest, body);
  const expiresAt = await setCheckpointTtl(
    lifecycleStore(ctx),
    key,
    ctx.tenant,
    ctx.now,
    request.ttl_seconds,
  );
  return { expires_at: expiresAt === undefined ? null : new Date(expiresAt).toISOString() };
}
