import { createHash, randomBytes } from 'node:crypto';

/**
 * Identifiers minted by the API. Request ids are time-ordered so the futures table and the `live`
 * index sort by submit time as strings: 12 hex digits of milliseconds since the epoch (48 bits,
 * good until the year 10889) followed by 20 hex digits (80 bits) of randomness, so two ids minted in
 * the same millisecond on different containers still never collide.
 */
const TIMESTAMP_HEX_DIGITS = 12;
const RANDOM_BYTES = 10;

export const REQUEST_ID_PATTERN = /^[0-9a-f]{32}$/;

export function mintRequestId(
  nowMs: number = Date.now(),
  random: Buffer = randomBytes(RANDOM_BYTES),
): string {
  if (!Number.isInteger(nowMs) || nowMs < 0 || nowMs >= 2 ** 48) {
    throw new RangeError(`timestamp ${nowMs} does not fit in 48 bits`);
  }
  if (random.length !== RANDOM_BYTES) throw new RangeError(`expected ${RANDOM_BYTES} random bytes`);
  return nowMs.toString(16).padStart(TIMESTAMP_HEX_DIGITS, '0') + random.toString('hex');
}

/**
 * A worker run's id: minted each time a worker starts a work item (a delivery, a redelivery, a
 * duplicate), and part of every key that run writes (E3), so two runs of one work item never write
 * the same object. 48 random bits: runs of one work item never collide in practice, and the keys'
 * other parts (model and epoch, request id) already tell different work items apart.
 */
export function mintRunId(random: Buffer = randomBytes(6)): string {
  return random.toString('hex');
}

/** Milliseconds since the epoch at which a request id was minted. */
export function requestIdTime(requestId: string): number {
  return Number.parseInt(requestId.slice(0, TIMESTAMP_HEX_DIGITS), 16);
}

export function isRequestId(value: string): boolean {
  return REQUEST_ID_PATTERN.test(value);
}

/**
 * Ids of sessions, models and sampling sessions: a short kind prefix and a request-id-like body.
 * They appear in `tinker://` paths, S3 keys and `#`-separated registry keys, so they use only
 * lowercase letters, digits and `-`.
 */
export type IdKind = 'session' | 'model' | 'sampling';
const ID_PREFIX: Record<IdKind, string> = { session: 'sess', model: 'model', sampling: 'samp' };

export function mintId(kind: IdKind, nowMs: number = Date.now()): string {
  return `${ID_PREFIX[kind]}-${mintRequestId(nowMs)}`;
}

/**
 * An id derived from other ids, for server-chosen values that must come out the same when a client
 * retries (so a retried request stores the same payload, see `shared/repositories/payloads.ts`).
 */
export function deriveId(kind: IdKind, ...parts: readonly (string | number)[]): string {
  return `${ID_PREFIX[kind]}-${sha256Hex(parts.join('\u0000')).slice(0, 32)}`;
}

/** A non-negative 31-bit integer derived from its parts (a sampling seed the client did not give, P6). */
export function deriveSeed(...parts: readonly (string | number)[]): number {
  return Number.parseInt(sha256Hex(['seed', ...parts].join('\u0000')).slice(0, 8), 16) & 0x7fffffff;
}

export function sha256Hex(data: string | Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}

/**
 * The `live` index shard of a model: a stable hash of the model id modulo the shard count, so one
 * model's rows always share a partition (the scheduler reads a model's run from one shard) while
 * many models spread index writes over `shards` partitions.
 */
export function liveShard(modelId: string, shards: number): number {
  if (!Number.isInteger(shards) || shards <= 0)
    throw new RangeError(`shard count must be positive, got ${shards}`);
  return createHash('sha256').update(modelId).digest().readUInt32BE(0) % shards;
}

/** The `live` attribute (GSI partition key) of a pending row. */
export function liveKey(pool: string, shard: number): string {
  return `${liveKeyPrefix(pool)}${shard}`;
}

/** What every `live` value of a pool begins with (`live_by_model` reads a pool's rows by it). */
export function liveKeyPrefix(pool: string): string {
  return `${pool}#`;
}
