import { randomBytes } from 'node:crypto';
import { BatchWriteItemCommand, CreateTableCommand, QueryCommand } from '@aws-sdk/client-dynamodb';
import {
  DeleteObjectsCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { PurgeQueueCommand } from '@aws-sdk/client-sqs';
import { BatchWriteCommand } from '@aws-sdk/lib-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { localAwsClients } from '../local/cloud/aws-clients.js';
import type { CloudEndpoints } from '../local/cloud/cloud.js';
import { envFor, provisionResources } from '../local/cloud/resources.js';
import { type AwsClients, resetAwsClients } from '../shared/aws/clients.js';
import { Limiter } from '../shared/aws/limiter.js';
import { resetConfig } from '../shared/base/config.js';
import { liveShard, mintRequestId, sha256Hex } from '../shared/base/ids.js';
import { logger } from '../shared/base/logger.js';
import { PAYLOAD_CONTENT_TYPES } from '../shared/base/payload-bytes.js';
import { storageKeys } from '../shared/base/storage-keys.js';
import { type WorkItem, workItemSchema } from '../shared/domain/planning/work-item.js';
import type { LiveRow, ModelRow } from '../shared/domain/records.js';
import { pendingFutureRow } from '../shared/repositories/futures.js';
import { scanLiveIndex } from '../shared/repositories/live-index.js';
import { readModels } from '../shared/repositories/models.js';
import {
  type PayloadReads,
  payloadMetadata,
  putPayload,
  readPayloads,
  type SerializedPayload,
  serializeBinaryPayload,
  serializePayload,
} from '../shared/repositories/payloads.js';
import type { PassPayload } from '../shared/services/api/payloads.js';
import { parseRequest } from '../shared/services/api/request-checks.js';
import { forwardBackwardRequest } from '../shared/services/api/schemas.js';
import { type SchedulerAdapters, schedulerAdapters } from '../shared/services/scheduler/adapters.js';
import { MULTIPART_PART_BYTES, putInParts } from '../shared/services/scheduler/dispatch.js';
import { type SchedulerSettings, schedulerSettings } from '../shared/services/scheduler/settings.js';
import {
  dispatchSnapshot,
  readSnapshot,
  runTick,
  type TickContext,
  tickContext,
} from '../shared/services/scheduler/tick.js';
import { WAKE_ALL, wakeModels } from '../shared/services/scheduler/wake.js';
import { decodeForwardBackwardRequest, encodeStoredPass } from '../shared/wire/forward-backward-request.js';
import { type BenchResult, type CaseResult, type Counts, machine, runCase } from './harness.js';
import { attachMeter, createMeter, type Meter } from './metering.js';
import { startCloudChild, stopCloudChild } from './support/cloud-child.js';
import { initSdkWire, SDK_4X512, sdkBodies } from './support/sdk-wire.js';
import { dispatchOrder, fairnessScene } from './support/tenant-fairness.js';

/**
 * `npm run bench -- scheduler [--quick]`: one scheduler tick over N pending forward_backward requests
 * with ~76 KiB payloads, in three layouts measured in the same run:
 *  - ours: the narrow `live` index (ids and keys only), payloads in S3, read only when dispatched (R6);
 *  - baseline (`inline`): the layout the first seed replaced, each row holding its payload JSON, a
 *    tick that scans whole rows and decodes every payload before it filters;
 *  - baseline_eager_s3: our layout, but a tick that GETs and decodes every pending payload first.
 * All three plan with the same planner and dispatch with the same claim/work-item code.
 *
 * The `sdk-*` cases tick over N forward_backward requests of 4 x 512 tokens as the SDK 0.25 sends
 * them (bench/support/sdk-wire.ts), stored the way intake stores them (`putSdkPayloads`):
 *  - ours: the zstd bodies, stored as received, copied undecoded into the work item (W4);
 *  - baseline (`json_before`): the same requests as the JSON payloads intake stored before W4, and
 *    the tick of that time, which parsed each payload and wrote the work item as JSON
 *    (`jsonBeforeAdapters` says exactly what it does);
 *  - baseline_canonical_pb: the canonical protobuf passes a JSON or uncompressed protobuf submit
 *    stores now, and the current tick.
 * Per tick: CPU, S3 GETs, S3 bytes read, work item bytes written (PUT bodies) and their sum.
 * The cloud (DynamoDB Local, fauxqs) runs in a child process (bench/support/cloud-child.ts) so
 * cpu_ms counts the scheduler's own work only.
 */

const PAYLOAD_TARGET_BYTES = 76 * 1024;
const ROWS_PER_MODEL = 64;
const TOKENS_PER_DATUM = 1000;
const SEED_CONCURRENCY = 16;
const GSI_NOTE =
  'DynamoDB Local serves a GSI query from the base items (no index lag, no separate index storage), ' +
  'so a narrow index over large rows would not be cheaper there; our futures rows stay small anyway ' +
  '(payloads live in S3), which is what makes the index read small on AWS and here.';

/**
 * The inline table is keyed like our index (a partition, then request_id) but holds whole rows. Its
 * tick Queries each partition: DynamoDB Local answers a Scan by loading the whole table into its
 * heap, which fails (OutOfMemoryError) for 10,000 rows of ~76 KiB, while a Query loads one partition.
 */
const INLINE_PARTITIONS = 16;

function inlinePartition(part: number): string {
  return `inline#${part}`;
}

/** Datums per payload so that it serializes to about 76 KiB (SkyRL's measured row size). */
const DATUMS = (() => {
  for (let count = 1; ; count++) {
    if (Buffer.byteLength(JSON.stringify(passPayload(1, 0, count).payload)) >= PAYLOAD_TARGET_BYTES)
      return count;
  }
})();

/** A forward_backward payload, distinct per request. */
function passPayload(seqId: number, salt: number, datums: number): { payload: PassPayload; tokens: number } {
  const data: PassPayload['input']['data'] = [];
  for (let datum = 0; datum < datums; datum++) {
    const ids = Array.from(
      { length: TOKENS_PER_DATUM },
      (_, i) => (salt * 7919 + datum * 104729 + i * 31) % 32000,
    );
    data.push({
      model_input: { chunks: [{ type: 'encoded_text', tokens: ids }] },
      loss_fn_inputs: {
        target_tokens: { data: ids.map((id) => (id + 1) % 32000), dtype: 'int64', shape: [ids.length] },
        weights: { data: ids.map((_, i) => (i % 4 === 0 ? 0 : 1)), dtype: 'float32', shape: [ids.length] },
      },
    });
  }
  const payload: PassPayload = {
    request_type: 'forward_backward',
    seq_id: seqId,
    input: { data, loss_fn: 'cross_entropy' },
  };
  return { payload, tokens: datums * TOKENS_PER_DATUM };
}

/** Plain JSON (the scheduler checks a body against the digest stored with it, whatever its key order). */
function serialized(payload: PassPayload): SerializedPayload {
  const body = JSON.stringify(payload);
  const digest = sha256Hex(body);
  return { body, bytes: Buffer.byteLength(body), digest, storedDigest: digest, format: 'json' };
}

interface Scene {
  readonly n: number;
  readonly models: ModelRow[];
  readonly payloadBytes: number;
  readonly settings: SchedulerSettings;
  readonly inlineTable: string;
  readonly clients: AwsClients;
  /** SDK scenes: one payload's size in each layout (the last seeded; they vary by a few bytes). */
  readonly sdkBytes?: Record<SdkLayout, number>;
}

interface Metered {
  readonly clients: AwsClients;
  readonly dynamo: Meter;
  readonly s3: Meter;
}

function meteredClients(endpoints: CloudEndpoints): Metered {
  const clients = localAwsClients(endpoints);
  const dynamo = createMeter();
  const s3 = createMeter();
  attachMeter(clients.dynamo, dynamo, { dynamo: true });
  attachMeter(clients.s3, s3);
  return { clients, dynamo, s3 };
}

function modelRows(count: number, parked: boolean, now: number): ModelRow[] {
  return Array.from({ length: count }, (_, index) => {
    const modelId = `model-bench${String(index).padStart(5, '0')}-${randomBytes(4).toString('hex')}`;
    const base = {
      model_id: modelId,
      tenant: 'tenant-bench',
      session_id: 'sess-bench',
      base_model: 'reference/byte-lm',
      lora_config: { rank: 4 },
      status: 'active' as const,
      attempts: 0,
      created_at: now,
    };
    // Parked: create_model (seq 1) is in flight, so every later row waits behind it (R3).
    return parked
      ? {
          ...base,
          epoch: 1,
          planned_through: 1,
          applied_through: 0,
          inflight: `${modelId}@1`,
          lease_until: now + 86_400_000,
        }
      : { ...base, epoch: 1, planned_through: 1, applied_through: 1, state_ref: `state/${modelId}/1.bin` };
  });
}

async function batchPut(
  doc: AwsClients['doc'],
  table: string,
  items: readonly Record<string, unknown>[],
): Promise<void> {
  for (let start = 0; start < items.length; start += 25) {
    let requests = items.slice(start, start + 25).map((Item) => ({ PutRequest: { Item } }));
    while (requests.length > 0) {
      const answer = await doc.send(new BatchWriteCommand({ RequestItems: { [table]: requests } }));
      requests = (answer.UnprocessedItems?.[table] ?? []) as typeof requests;
    }
  }
}

/** Provisions a fresh set of the topology's resources plus the inline table, and writes N rows. */
/**
 * The SDK 0.25 payload layouts, per request: the real payload key holds what intake stores for the
 * SDK 0.25 request (its zstd body as received); `CANONICAL_PREFIX` what it stores for a JSON or an
 * uncompressed protobuf submit (the canonical protobuf pass); `JSON_PREFIX` what intake stored for
 * the same request before payloads were binary (canonical JSON of the PassPayload, format json).
 */
const CANONICAL_PREFIX = 'bench-canonical/';
const JSON_PREFIX = 'bench-json/';

function altKey(prefix: string, requestId: string): string {
  return `${prefix}${storageKeys.payload(requestId)}`;
}

async function putAt(s3: S3Client, bucket: string, key: string, stored: SerializedPayload): Promise<void> {
  await s3.send(
    new PutObjectCommand({
      Bucket: bucket,
      Key: key,
      Body: stored.body,
      ContentType: PAYLOAD_CONTENT_TYPES[stored.format],
      Metadata: payloadMetadata(stored),
    }),
  );
}

/** Stores the three layouts of one SDK 4 x 512 request; returns the row's fingerprint and sizes. */
async function putSdkPayloads(
  s3: S3Client,
  bucket: string,
  requestId: string,
  modelId: string,
  seqId: number,
  salt: number,
): Promise<{ digest: string; tokens: number; bytes: Record<SdkLayout, number> }> {
  const bodies = sdkBodies(modelId, seqId, salt);
  // As submitPass does: decode, then the canonical form with the ids left out.
  const decoded = decodeForwardBackwardRequest(bodies.protobuf);
  const canonical = encodeStoredPass({ ...decoded, model_id: '', seq_id: 0, forward_only: false });
  const zstd = serializeBinaryPayload(canonical, { bytes: bodies.zstd, compression: 'zstd' });
  const binary = serializeBinaryPayload(canonical);
  // As the JSON intake did before W4: the validated 0.24.1 body's input in a PassPayload, canonical JSON.
  const request = parseRequest(forwardBackwardRequest, JSON.parse(bodies.json));
  const json = serializePayload({
    request_type: 'forward_backward',
    seq_id: request.seq_id,
    input: request.forward_backward_input,
  } satisfies PassPayload);
  await Promise.all([
    putPayload(s3, bucket, requestId, zstd),
    putAt(s3, bucket, altKey(CANONICAL_PREFIX, requestId), binary),
    putAt(s3, bucket, altKey(JSON_PREFIX, requestId), json),
  ]);
  return {
    digest: zstd.digest,
    tokens: bodies.tokens,
    bytes: { zstd: zstd.bytes, canonical_pb: binary.bytes, json: json.bytes },
  };
}

type SdkLayout = 'zstd' | 'canonical_pb' | 'json';

/** A fresh set of the topology's resources, with this process's configuration pointed at them. */
async function provisionScene(
  endpoints: CloudEndpoints,
): Promise<{ prefix: string; seeding: AwsClients; settings: SchedulerSettings }> {
  const prefix = `b${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  const seeding = localAwsClients(endpoints);
  const { topology } = await import('../shared/base/topology.js');
  const names = await provisionResources(topology, prefix, seeding);
  Object.assign(process.env, envFor(topology, names, endpoints));
  resetConfig();
  resetAwsClients();
  // No coalescing window (S5): these cases time what one tick reads and dispatches, and a pass seeded
  // just before its tick would otherwise wait out the window first.
  return { prefix, seeding, settings: { ...schedulerSettings(), coalesceMs: 0 } };
}

async function buildScene(
  endpoints: CloudEndpoints,
  n: number,
  parked: boolean,
  sdk = false,
): Promise<Scene> {
  const { prefix, seeding, settings } = await provisionScene(endpoints);
  const inlineTable = `${prefix}-inline`;
  await seeding.dynamo.send(
    new CreateTableCommand({
      TableName: inlineTable,
      BillingMode: 'PAY_PER_REQUEST',
      KeySchema: [
        { AttributeName: 'part', KeyType: 'HASH' },
        { AttributeName: 'request_id', KeyType: 'RANGE' },
      ],
      AttributeDefinitions: [
        { AttributeName: 'part', AttributeType: 'S' },
        { AttributeName: 'request_id', AttributeType: 'S' },
      ],
    }),
  );

  const now = Date.now();
  const models = modelRows(Math.max(1, Math.round(n / ROWS_PER_MODEL)), parked, now);
  await batchPut(seeding.doc, settings.tables.models, models as unknown as Record<string, unknown>[]);
  const limiter = new Limiter(SEED_CONCURRENCY);
  let payloadBytes = 0;
  let sdkBytes: Record<SdkLayout, number> | undefined;
  const chunks: Promise<void>[] = [];
  for (let chunk = 0; chunk < n; chunk += 25) {
    chunks.push(
      limiter.run(async () => {
        const futures: Record<string, unknown>[] = [];
        const inline: Record<string, unknown>[] = [];
        for (let index = chunk; index < Math.min(n, chunk + 25); index++) {
          const model = models[index % models.length]!;
          const seq = 2 + Math.floor(index / models.length);
          const requestId = mintRequestId(now + index);
          if (sdk) {
            const put = await putSdkPayloads(
              seeding.s3,
              settings.bucket,
              requestId,
              model.model_id,
              seq - 1,
              index,
            );
            sdkBytes = put.bytes;
            futures.push(
              pendingFutureRow({
                requestId,
                tenant: model.tenant,
                modelId: model.model_id,
                seq,
                requestType: 'forward_backward',
                tokens: put.tokens,
                payloadKey: storageKeys.payload(requestId),
                payloadDigest: put.digest,
                now,
              }) as unknown as Record<string, unknown>,
            );
            continue;
          }
          const { payload, tokens } = passPayload(seq - 1, index, DATUMS);
          const stored = serialized(payload);
          payloadBytes = stored.bytes;
          await putPayload(seeding.s3, settings.bucket, requestId, stored);
          const row = pendingFutureRow({
            requestId,
            tenant: model.tenant,
            modelId: model.model_id,
            seq,
            requestType: 'forward_backward',
            tokens,
            payloadKey: storageKeys.payload(requestId),
            payloadDigest: stored.digest,
            now,
          });
          futures.push(row as unknown as Record<string, unknown>);
          inline.push({
            part: inlinePartition(liveShard(model.model_id, INLINE_PARTITIONS)),
            request_id: requestId,
            tenant: row.tenant,
            model_id: row.model_id,
            seq,
            request_type: row.request_type,
            status: row.status,
            tokens,
            payload: stored.body,
          });
        }
        await batchPut(seeding.doc, settings.tables.futures, futures);
        if (sdk) return;
        // The low-level client: the inline payload is one large string attribute, as it was stored.
        let requests = inline.map((item) => ({ PutRequest: { Item: marshall(item) } }));
        while (requests.length > 0) {
          const answer = await seeding.dynamo.send(
            new BatchWriteItemCommand({ RequestItems: { [inlineTable]: requests } }),
          );
          requests = (answer.UnprocessedItems?.[inlineTable] ?? []) as typeof requests;
        }
      }),
    );
  }
  await Promise.all(chunks);
  return {
    n,
    models,
    payloadBytes: sdkBytes?.zstd ?? payloadBytes,
    ...(sdkBytes === undefined ? {} : { sdkBytes }),
    settings,
    inlineTable,
    clients: seeding,
  };
}

/** Returns models to their seeded state, empties the queue and the work items (between repeats). */
async function resetScene(scene: Pick<Scene, 'clients' | 'settings' | 'models'>): Promise<void> {
  await batchPut(
    scene.clients.doc,
    scene.settings.tables.models,
    scene.models as unknown as Record<string, unknown>[],
  );
  await scene.clients.sqs
    .send(new PurgeQueueCommand({ QueueUrl: scene.settings.workQueueUrl }))
    .catch(() => undefined);
  for (;;) {
    const listed = await scene.clients.s3.send(
      new ListObjectsV2Command({ Bucket: scene.settings.bucket, Prefix: 'work/' }),
    );
    const keys = (listed.Contents ?? []).flatMap((object) => (object.Key ? [{ Key: object.Key }] : []));
    if (keys.length === 0) return;
    await scene.clients.s3.send(
      new DeleteObjectsCommand({ Bucket: scene.settings.bucket, Delete: { Objects: keys } }),
    );
  }
}

/** Adapters whose payload reads come from payloads the baseline already decoded (no S3 GET). */
function preloaded(adapters: SchedulerAdapters, payloads: ReadonlyMap<string, unknown>): SchedulerAdapters {
  return {
    ...adapters,
    readPayloads: async (ids) => {
      const found = new Map<string, unknown>();
      for (const id of ids) if (payloads.has(id)) found.set(id, payloads.get(id));
      return { payloads: found, gets: 0, bytes: 0, unreadable: ids.filter((id) => !payloads.has(id)) };
    },
  };
}

/** Measures one side: CPU of this process, capacity, bytes and S3 calls, plus what it dispatched. */
function measured(
  label: string,
  meter: Metered,
  tick: () => Promise<{ dispatched: number; workItems: number }>,
) {
  return async (): Promise<Counts> => {
    meter.dynamo.reset();
    meter.s3.reset();
    const started = performance.now();
    const cpu = process.cpuUsage();
    const { dispatched, workItems } = await tick();
    const used = process.cpuUsage(cpu);
    console.error(`  ${label}: ${(performance.now() - started).toFixed(1)} ms, dispatched ${dispatched}`);
    return {
      cpu_ms: (used.user + used.system) / 1000,
      rcu: meter.dynamo.rcu,
      bytes: meter.dynamo.bytesIn + meter.s3.bytesIn,
      s3_gets: meter.s3.callsByOperation.GetObjectCommand ?? 0,
      s3_bytes: meter.s3.bytesIn,
      // Bodies PUT to S3 (the tick's only S3 writes are its work items), and read plus written.
      work_item_bytes: meter.s3.bytesOut,
      bytes_moved: meter.s3.bytesIn + meter.s3.bytesOut,
      dispatched,
      work_items: workItems,
    };
  };
}

/** Ours: the scheduler's own tick (lock, narrow index, models, plan, claims, R6 payload reads). */
function oursTick(scene: Scene, meter: Metered) {
  return measured('ours', meter, async () => {
    const adapters = schedulerAdapters(scene.settings, meter.clients);
    const outcome = await runTick({ settings: scene.settings, adapters });
    return { dispatched: outcome.counters.steps_dispatched, workItems: outcome.counters.work_items };
  });
}

async function planAndDispatch(
  scene: Scene,
  meter: Metered,
  live: LiveRow[],
  payloads: ReadonlyMap<string, unknown>,
): Promise<{ dispatched: number; workItems: number }> {
  const modelIds = new Set(live.map((row) => row.model_id));
  const models = await readModels(meter.clients.doc, scene.settings.tables.models, modelIds);
  const ctx: TickContext = {
    settings: scene.settings,
    adapters: preloaded(schedulerAdapters(scene.settings, meter.clients), payloads),
    now: Date.now,
    maxPlans: 16,
    coalesceMs: scene.settings.coalesceMs,
  };
  const counters = await dispatchSnapshot(ctx, { live, models, sampleClaims: new Set() });
  return { dispatched: counters.steps_dispatched, workItems: counters.work_items };
}

/** Baseline `inline`: scan whole rows, decode every payload, then filter with the same planner. */
function inlineTick(scene: Scene, meter: Metered) {
  return measured('inline', meter, async () => {
    const live: LiveRow[] = [];
    const payloads = new Map<string, unknown>();
    // One partition after another: DynamoDB Local runs every request on one SQLite queue anyway.
    for (let part = 0; part < INLINE_PARTITIONS; part++) {
      let start: Record<string, never> | undefined;
      do {
        const page = await meter.clients.dynamo.send(
          new QueryCommand({
            TableName: scene.inlineTable,
            KeyConditionExpression: '#part = :part',
            ExpressionAttributeNames: { '#part': 'part' },
            ExpressionAttributeValues: { ':part': { S: inlinePartition(part) } },
            ExclusiveStartKey: start,
          }),
        );
        for (const raw of page.Items ?? []) {
          const item = unmarshall(raw);
          payloads.set(item.request_id, JSON.parse(item.payload as string) as unknown);
          live.push({
            request_id: item.request_id,
            model_id: item.model_id,
            seq: item.seq,
            request_type: item.request_type,
            status: item.status,
            tokens: item.tokens,
          });
        }
        start = page.LastEvaluatedKey as Record<string, never> | undefined;
      } while (start !== undefined);
    }
    return planAndDispatch(scene, meter, live, payloads);
  });
}

/** Baseline `eager-s3`: our index, but every pending payload is fetched and decoded before filtering. */
function eagerS3Tick(scene: Scene, meter: Metered) {
  return measured('eager_s3', meter, async () => {
    const { rows } = await scanLiveIndex(
      meter.clients.doc,
      scene.settings.tables.futures,
      scene.settings.pool,
      scene.settings.liveShards,
    );
    const pending = rows.filter((row) => row.status === 'pending').map((row) => row.request_id);
    const payloads = new Map<string, unknown>();
    const limiter = new Limiter(32);
    await Promise.all(
      pending.map((id) =>
        limiter.run(async () => {
          const answer = await meter.clients.s3.send(
            new GetObjectCommand({ Bucket: scene.settings.bucket, Key: storageKeys.payload(id) }),
          );
          payloads.set(id, JSON.parse((await answer.Body?.transformToString('utf8')) ?? 'null') as unknown);
        }),
      ),
    );
    return planAndDispatch(scene, meter, rows, payloads);
  });
}

/**
 * The SDK cases' baseline `json_before`: the scheduler as it was before payloads moved as bytes
 * (ee53ef5^), over the payloads intake stored then (canonical JSON, under `JSON_PREFIX`). The tick
 * itself is `runTick` unchanged; two adapters are swapped for the code of that time, verbatim in
 * what it did: `readPayloads` GETs each dispatched payload (32 at a time) as a UTF-8 string, checks
 * its sha256 against the stored metadata and `JSON.parse`s it; `writeWorkItem` checks the item
 * against the schema and PUTs `JSON.stringify(workItem)` (payloads inline as JSON), in parts above
 * 8 MiB. Same claims, same GET count, same work items; only the payload bytes and their handling
 * differ. (No retries on transient errors: none occur here, and the current code retries too.)
 */
function jsonBeforeAdapters(scene: Scene, meter: Metered): SchedulerAdapters {
  const { bucket } = scene.settings;
  const s3 = meter.clients.s3;
  return {
    ...schedulerAdapters(scene.settings, meter.clients),
    readPayloads: async (ids): Promise<PayloadReads> => {
      const limiter = new Limiter(32);
      const payloads = new Map<string, unknown>();
      const unreadable: string[] = [];
      let bytes = 0;
      await Promise.all(
        ids.map((id) =>
          limiter.run(async () => {
            const answer = await s3.send(
              new GetObjectCommand({ Bucket: bucket, Key: altKey(JSON_PREFIX, id) }),
            );
            const body = await answer.Body?.transformToString('utf8');
            if (body === undefined) {
              unreadable.push(id);
              return;
            }
            bytes += Buffer.byteLength(body);
            const digest = answer.Metadata?.sha256;
            if (digest !== undefined && sha256Hex(body) !== digest) {
              unreadable.push(id);
              return;
            }
            payloads.set(id, JSON.parse(body) as unknown);
          }),
        ),
      );
      return { payloads, gets: ids.length, bytes, unreadable };
    },
    writeWorkItem: async (workItem: WorkItem): Promise<number> => {
      workItemSchema.parse(workItem);
      const body = Buffer.from(JSON.stringify(workItem), 'utf8');
      const key = storageKeys.workItem(workItem.work_item_id);
      if (body.length <= MULTIPART_PART_BYTES) {
        await s3.send(
          new PutObjectCommand({ Bucket: bucket, Key: key, Body: body, ContentType: 'application/json' }),
        );
      } else {
        await putInParts(s3, bucket, key, body);
      }
      return body.length;
    },
  };
}

/** Baseline `json_before` (see `jsonBeforeAdapters`): the pre-W4 tick over pre-W4 JSON payloads. */
function jsonBeforeTick(scene: Scene, meter: Metered) {
  return measured('json_before', meter, async () => {
    const outcome = await runTick({ settings: scene.settings, adapters: jsonBeforeAdapters(scene, meter) });
    return { dispatched: outcome.counters.steps_dispatched, workItems: outcome.counters.work_items };
  });
}

/**
 * Baseline `canonical_pb`: the current tick, over the canonical protobuf passes intake stores for a
 * JSON (SDK 0.24.1) or an uncompressed protobuf submit of the same request. Its `readPayloads` is
 * the scheduler's own, given an S3 client that reads `CANONICAL_PREFIX` + the payload key.
 */
function canonicalTick(scene: Scene, meter: Metered) {
  const s3 = meter.clients.s3;
  const redirected = {
    send: (command: unknown) => {
      if (command instanceof GetObjectCommand && command.input.Key?.startsWith('payloads/')) {
        return s3.send(
          new GetObjectCommand({ ...command.input, Key: `${CANONICAL_PREFIX}${command.input.Key}` }),
        );
      }
      return s3.send(command as GetObjectCommand);
    },
  } as unknown as S3Client;
  return tickReadingPayloadsWith('canonical_pb', scene, meter, redirected);
}

/** The current tick, its payloads read by the scheduler's own `readPayloads` through `payloadS3`. */
function tickReadingPayloadsWith(side: string, scene: Scene, meter: Metered, payloadS3: S3Client) {
  return measured(side, meter, async () => {
    const adapters: SchedulerAdapters = {
      ...schedulerAdapters(scene.settings, meter.clients),
      readPayloads: (ids) => readPayloads(payloadS3, scene.settings.bucket, ids),
    };
    const outcome = await runTick({ settings: scene.settings, adapters });
    return { dispatched: outcome.counters.steps_dispatched, workItems: outcome.counters.work_items };
  });
}

/**
 * Side `request_floor`: the current tick making exactly ours' AWS requests (the index query, model
 * reads, claims, the 512 payload GETs with their bodies read to the end, the work item PUT and the
 * SQS send) with no payload handling at all: each GET's body is dropped after it arrived, so the tick
 * digests, copies and writes nothing of it. The SDK's per-request work is the same on every side; the
 * difference between a side and this floor is what that side spends on the payloads themselves.
 */
function requestFloorTick(scene: Scene, meter: Metered) {
  const s3 = meter.clients.s3;
  const dropping = {
    send: async (command: unknown) => {
      if (!(command instanceof GetObjectCommand)) return s3.send(command as GetObjectCommand);
      const answer = await s3.send(command);
      await answer.Body?.transformToByteArray();
      const empty = new Uint8Array(0);
      return { Metadata: {}, Body: { transformToByteArray: async () => empty } };
    },
  } as unknown as S3Client;
  return tickReadingPayloadsWith('request_floor', scene, meter, dropping);
}

function ratio(baseline: number, ours: number): number {
  return Math.round((baseline / Math.max(ours, 1e-3)) * 10) / 10;
}

/** Ratios beside the harness's ratio_wall, and the targets of the issue checked at N = 512. */
function annotate(result: CaseResult, checkTargets: boolean): CaseResult {
  const ours = result.ours as Counts;
  const inline = result.baseline as Counts;
  const eager = result.baseline_eager_s3 as Counts;
  const ratios = {
    ratio_wall_eager_s3: ratio(eager.wall_ms!, ours.wall_ms!),
    ratio_cpu: ratio(inline.cpu_ms!, ours.cpu_ms!),
    ratio_cpu_eager_s3: ratio(eager.cpu_ms!, ours.cpu_ms!),
    ratio_rcu: ratio(inline.rcu!, ours.rcu!),
  };
  if (!checkTargets) return { ...result, ...ratios };
  const parked = ours.dispatched === 0;
  const targets = parked
    ? {
        zero_s3_gets: ours.s3_gets === 0,
        rcu_at_most_1_100_of_inline: ours.rcu! * 100 <= inline.rcu!,
        wall_50x_below_inline: inline.wall_ms! >= 50 * ours.wall_ms!,
        cpu_50x_below_inline: inline.cpu_ms! >= 50 * ours.cpu_ms!,
        wall_20x_below_eager_s3: eager.wall_ms! >= 20 * ours.wall_ms!,
        cpu_20x_below_eager_s3: eager.cpu_ms! >= 20 * ours.cpu_ms!,
      }
    : { s3_gets_equal_dispatched: ours.s3_gets === ours.dispatched && ours.dispatched! > 0 };
  return { ...result, ...ratios, targets };
}

async function benchCase(
  endpoints: CloudEndpoints,
  name: string,
  n: number,
  parked: boolean,
  repeats: number,
  extra: Record<string, string | number> = {},
): Promise<CaseResult> {
  const seedStarted = Date.now();
  const scene = await buildScene(endpoints, n, parked);
  const meter = meteredClients(endpoints);
  console.error(`${name}: seeded ${n} rows in ${((Date.now() - seedStarted) / 1000).toFixed(1)} s`);
  const ours = oursTick(scene, meter);
  const baselines = { inline: inlineTick(scene, meter), eager_s3: eagerS3Tick(scene, meter) };
  // One untimed run of each side first: connections, JIT and DynamoDB Local's own warm-up.
  for (const side of [ours, ...Object.values(baselines)]) {
    if (!parked) await resetScene(scene);
    await side();
  }
  console.error(`${name}: warmed up`);
  const result = await runCase({
    name,
    params: {
      n,
      models: scene.models.length,
      rows_per_model: ROWS_PER_MODEL,
      payload_bytes: scene.payloadBytes,
      parked_by: parked ? 'each model has a work item in flight (R3)' : 'none: every row is dispatchable',
      note: GSI_NOTE,
      warm_up: 'one untimed run of each side before the timed repeats',
      inline_layout: `whole rows with the payload JSON inline, keyed (partition, request_id), ${INLINE_PARTITIONS} partitions queried in turn`,
      ...extra,
    },
    ours,
    baselines,
    repeats,
    ...(parked ? {} : { prepare: () => resetScene(scene) }),
  });
  return annotate(result, n === 512);
}

/** The SDK cases' ratios (each baseline over ours) and the issue's targets, checked at N = 512. */
/** A side's CPU beyond the request floor's (never below zero: a median can land under it). */
function aboveFloor(side: Counts, floor: Counts): number {
  return Math.max(0, Math.round((side.cpu_ms! - floor.cpu_ms!) * 10) / 10);
}

function annotateSdk(result: CaseResult): CaseResult {
  const ours = result.ours as Counts;
  const before = result.baseline as Counts;
  const canonical = result.baseline_canonical_pb as Counts;
  const floor = result.baseline_request_floor as Counts;
  const ratios = {
    ratio_cpu: ratio(before.cpu_ms!, ours.cpu_ms!),
    ratio_bytes_moved: ratio(before.bytes_moved!, ours.bytes_moved!),
    ratio_payload_bytes_read: ratio(before.s3_bytes!, ours.s3_bytes!),
    ratio_cpu_canonical_pb: ratio(canonical.cpu_ms!, ours.cpu_ms!),
    ratio_bytes_moved_canonical_pb: ratio(canonical.bytes_moved!, ours.bytes_moved!),
    // CPU each side spends on the payloads beyond the requests every side makes alike.
    payload_cpu_ms: {
      ours: aboveFloor(ours, floor),
      json_before: aboveFloor(before, floor),
      canonical_pb: aboveFloor(canonical, floor),
    },
    ratio_payload_cpu: ratio(aboveFloor(before, floor), aboveFloor(ours, floor)),
  };
  const parked = ours.dispatched === 0;
  const targets = parked
    ? {
        zero_s3_gets: ours.s3_gets === 0 && before.s3_gets === 0 && canonical.s3_gets === 0,
        zero_work_item_bytes: ours.work_item_bytes === 0,
      }
    : {
        s3_gets_equal_dispatched: ours.s3_gets === ours.dispatched && ours.dispatched! > 0,
        cpu_5x_below_json_before: before.cpu_ms! >= 5 * ours.cpu_ms!,
        payload_cpu_5x_below_json_before: aboveFloor(before, floor) >= 5 * aboveFloor(ours, floor),
        floor_gets_equal_dispatched: floor.s3_gets === ours.dispatched,
        bytes_moved_2_5x_below_json_before: before.bytes_moved! >= 2.5 * ours.bytes_moved!,
      };
  return { ...result, ...ratios, targets };
}

/**
 * An SDK case: N forward_backward requests of 4 x 512 tokens, as the SDK 0.25 sends them, in the
 * three payload layouts of `putSdkPayloads`; ours, `json_before` and `canonical_pb` tick over them.
 */
async function sdkCase(
  endpoints: CloudEndpoints,
  name: string,
  n: number,
  parked: boolean,
  repeats: number,
): Promise<CaseResult> {
  const seedStarted = Date.now();
  const scene = await buildScene(endpoints, n, parked, true);
  const meter = meteredClients(endpoints);
  console.error(`${name}: seeded ${n} rows in ${((Date.now() - seedStarted) / 1000).toFixed(1)} s`);
  const ours = oursTick(scene, meter);
  const baselines = {
    json_before: jsonBeforeTick(scene, meter),
    canonical_pb: canonicalTick(scene, meter),
    request_floor: requestFloorTick(scene, meter),
  };
  for (const side of [ours, ...Object.values(baselines)]) {
    if (!parked) await resetScene(scene);
    await side();
  }
  console.error(`${name}: warmed up`);
  const result = await runCase({
    name,
    params: {
      n,
      models: scene.models.length,
      rows_per_model: ROWS_PER_MODEL,
      datums: SDK_4X512.datums,
      tokens_per_datum: SDK_4X512.tokensPerDatum,
      payload_bytes_zstd: scene.sdkBytes!.zstd,
      payload_bytes_canonical_pb: scene.sdkBytes!.canonical_pb,
      payload_bytes_json: scene.sdkBytes!.json,
      parked_by: parked ? 'each model has a work item in flight (R3)' : 'none: every row is dispatchable',
      ours: 'SDK 0.25 zstd bodies stored as received; the current tick copies them into a TSW1 work item',
      baseline: 'before W4: canonical JSON payloads; the tick parses each and PUTs the work item as JSON',
      baseline_canonical_pb:
        'canonical protobuf payloads (a JSON or uncompressed protobuf submit); the current tick',
      warm_up: 'one untimed run of each side before the timed repeats',
    },
    ours,
    baselines,
    repeats,
    ...(parked ? {} : { prepare: () => resetScene(scene) }),
  });
  return annotateSdk(result);
}

/**
 * `woken-1-of-1000-*`: the incremental tick (R5). 1,000 models: 999 parked (each with a work item in
 * flight, R3) holding N pending rows between them, and one model whose commit just landed (idle,
 * `WOKEN_PENDING` forward_backward rows of its own, all dispatchable). The tick its commit triggers:
 * ours reads that model's entries of `live_by_model` (`wake` = the model, as the models stream's
 * record names it); the baseline `full_look` is the same `runTick` without a wake, the tick every
 * trigger ran before (the whole `live` index, then the rows of every model it names). Both dispatch
 * the same work item. `woken-1-of-1000-look-*` times the snapshot read alone (`readSnapshot`, what
 * differs between the sides; the dispatch after it is the same work on both). Parked rows have no payload object: neither side reads a parked payload (R6),
 * and 50,000 PUTs would dominate the seeding.
 */
const WOKEN_MODELS = 1_000;
/** The woken model's own dispatchable rows: about one work item's worth (e2e closed loop: 3.9). */
const WOKEN_PENDING = 4;
/** Futures rows written at once while seeding (25 per BatchWriteItem). */
const WOKEN_SEED_CONCURRENCY = 8;

interface WokenScene {
  readonly clients: AwsClients;
  readonly settings: SchedulerSettings;
  readonly woken: ModelRow;
  /** Only the woken model's row changes in a tick (its claim): the reset puts it back. */
  readonly models: ModelRow[];
  readonly parkedModels: number;
}

async function buildWokenScene(endpoints: CloudEndpoints, parkedRows: number): Promise<WokenScene> {
  const { seeding, settings } = await provisionScene(endpoints);
  const now = Date.now();
  const parked = modelRows(WOKEN_MODELS - 1, true, now);
  const woken = modelRows(1, false, now)[0]!;
  await batchPut(seeding.doc, settings.tables.models, [...parked, woken] as unknown as Record<
    string,
    unknown
  >[]);
  const rows: Record<string, unknown>[] = [];
  for (let index = 0; index < WOKEN_PENDING; index++) {
    const requestId = mintRequestId(now + index);
    const { payload, tokens } = passPayload(index + 1, index, 1);
    const stored = serialized(payload);
    await putPayload(seeding.s3, settings.bucket, requestId, stored);
    rows.push(
      pendingFutureRow({
        requestId,
        tenant: woken.tenant,
        modelId: woken.model_id,
        seq: index + 2,
        requestType: 'forward_backward',
        tokens,
        payloadKey: storageKeys.payload(requestId),
        payloadDigest: stored.digest,
        now,
      }) as unknown as Record<string, unknown>,
    );
  }
  for (let index = 0; index < parkedRows; index++) {
    const model = parked[index % parked.length]!;
    const requestId = mintRequestId(now + WOKEN_PENDING + index);
    rows.push(
      pendingFutureRow({
        requestId,
        tenant: model.tenant,
        modelId: model.model_id,
        seq: 2 + Math.floor(index / parked.length),
        requestType: 'forward_backward',
        tokens: TOKENS_PER_DATUM,
        payloadKey: storageKeys.payload(requestId),
        payloadDigest: 'never-read',
        now,
      }) as unknown as Record<string, unknown>,
    );
  }
  const limiter = new Limiter(WOKEN_SEED_CONCURRENCY);
  const chunks: Promise<void>[] = [];
  for (let start = 0; start < rows.length; start += 25 * 8) {
    const slice = rows.slice(start, start + 25 * 8);
    chunks.push(limiter.run(() => batchPut(seeding.doc, settings.tables.futures, slice)));
  }
  await Promise.all(chunks);
  return { clients: seeding, settings, woken, models: [woken], parkedModels: parked.length };
}

/** One side of the woken case: its own tick, with its DynamoDB and S3 calls and capacity counted. */
function wokenSide(label: string, scene: WokenScene, meter: Metered, incremental: boolean) {
  return async (): Promise<Counts> => {
    meter.dynamo.reset();
    meter.s3.reset();
    const started = performance.now();
    const cpu = process.cpuUsage();
    const adapters = schedulerAdapters(scene.settings, meter.clients);
    const outcome = await runTick({
      settings: scene.settings,
      adapters,
      ...(incremental ? { wake: wakeModels([scene.woken.model_id]) } : {}),
    });
    const used = process.cpuUsage(cpu);
    console.error(
      `  ${label}: ${(performance.now() - started).toFixed(1)} ms, rows read ${outcome.counters.rows_scanned}`,
    );
    return {
      cpu_ms: (used.user + used.system) / 1000,
      rcu: meter.dynamo.rcu,
      wcu: meter.dynamo.wcu,
      dynamodb_calls: meter.dynamo.calls,
      s3_calls: meter.s3.calls,
      // The manifest's send: the one SQS call of a dispatching tick, on both sides.
      sqs_calls: outcome.counters.work_items,
      index_pages: outcome.counters.index_pages,
      rows_read: outcome.counters.rows_scanned,
      models_read: outcome.counters.models_read,
      dispatched: outcome.counters.steps_dispatched,
      work_items: outcome.counters.work_items,
    };
  };
}

/** The snapshot read alone (R5): the index entries, the model rows, the sample claims; no dispatch. */
function wokenLook(label: string, scene: WokenScene, meter: Metered, incremental: boolean) {
  return async (): Promise<Counts> => {
    meter.dynamo.reset();
    const cpu = process.cpuUsage();
    const ctx = tickContext({
      settings: scene.settings,
      adapters: schedulerAdapters(scene.settings, meter.clients),
    });
    const { counters } = await readSnapshot(ctx, incremental ? wakeModels([scene.woken.model_id]) : WAKE_ALL);
    const used = process.cpuUsage(cpu);
    console.error(`  ${label} look: rows read ${counters.rows_scanned}`);
    return {
      cpu_ms: (used.user + used.system) / 1000,
      rcu: meter.dynamo.rcu,
      dynamodb_calls: meter.dynamo.calls,
      index_pages: counters.index_pages,
      rows_read: counters.rows_scanned,
      models_read: counters.models_read,
    };
  };
}

async function wokenCase(
  endpoints: CloudEndpoints,
  parkedRows: number,
  repeats: number,
): Promise<CaseResult[]> {
  const name = `woken-1-of-1000-p${parkedRows}`;
  const seedStarted = Date.now();
  const scene = await buildWokenScene(endpoints, parkedRows);
  const seedSeconds = Math.round((Date.now() - seedStarted) / 100) / 10;
  console.error(`${name}: seeded ${parkedRows + WOKEN_PENDING} rows in ${seedSeconds} s`);
  const meter = meteredClients(endpoints);
  const ours = wokenSide('ours', scene, meter, true);
  const fullLook = wokenSide('full_look', scene, meter, false);
  for (const side of [ours, fullLook]) {
    await resetScene(scene);
    await side();
  }
  const result = await runCase({
    name,
    params: {
      models: WOKEN_MODELS,
      parked_models: scene.parkedModels,
      parked_rows: parkedRows,
      woken_model_pending: WOKEN_PENDING,
      seed_seconds: seedSeconds,
      trigger: "one model's commit (the models stream's record names it)",
      ours: 'incremental tick: that model through live_by_model, its model row',
      baseline: 'full_look: the same runTick without a wake (every shard of live, every model named)',
      warm_up: 'one untimed run of each side before the timed repeats',
    },
    ours,
    baselines: { full_look: fullLook },
    repeats,
    prepare: () => resetScene(scene),
  });
  const look = await runCase({
    name: `woken-1-of-1000-look-p${parkedRows}`,
    params: {
      parked_rows: parkedRows,
      measured: 'readSnapshot only (index read, model rows, sample claims): what the two sides differ in',
    },
    ours: wokenLook('ours', scene, meter, true),
    baselines: { full_look: wokenLook('full_look', scene, meter, false) },
    repeats,
  });
  const mine = result.ours as Counts;
  const full = result.baseline as Counts;
  const mineLook = look.ours as Counts;
  const fullRead = look.baseline as Counts;
  const lookCase: CaseResult = {
    ...look,
    ratio_rcu: ratio(fullRead.rcu!, mineLook.rcu!),
    targets: {
      rcu_50x_below_full_look: fullRead.rcu! >= 50 * mineLook.rcu!,
      wall_50x_below_full_look: fullRead.wall_ms! >= 50 * mineLook.wall_ms!,
    },
  };
  const tickCase: CaseResult = {
    ...result,
    ratio_rcu: ratio(full.rcu!, mine.rcu!),
    ratio_dynamodb_calls: ratio(full.dynamodb_calls!, mine.dynamodb_calls!),
    ratio_cpu: ratio(full.cpu_ms!, mine.cpu_ms!),
    targets: {
      same_dispatch: mine.dispatched === full.dispatched && mine.dispatched === WOKEN_PENDING,
      rcu_50x_below_full_look: full.rcu! >= 50 * mine.rcu!,
      wall_50x_below_full_look: full.wall_ms! >= 50 * mine.wall_ms!,
    },
  };
  return [tickCase, lookCase];
}

/**
 * `tenant-fairness-*` (pure, no cloud): one tenant's backlog of N pending training requests (a
 * forward_backward of 262,144 tokens and an optim_step per model, all submitted first) and another
 * tenant's lone forward_backward, submitted last, planned as one tick plans (again while a cap cut
 * the plan short), with the default caps (16 such passes per work item). Ours: the planner as it is;
 * baseline `tenant_blind`: the same scene with the tenants erased, which is the order before
 * fairness (oldest pending request first). Where the lone request goes: its work item, its place in
 * the tick's dispatch order, and the requests and tokens a worker runs before reaching it.
 */
async function fairnessCase(name: string, backlog: number, repeats: number): Promise<CaseResult> {
  const side = (tenantBlind: boolean) => async (): Promise<Counts> => {
    const scene = fairnessScene({ backlog, tokensPerRequest: 262_144, tenantBlind });
    const cpu = process.cpuUsage();
    const lone = dispatchOrder(scene);
    const used = process.cpuUsage(cpu);
    return {
      lone_work_item: lone.workItem,
      lone_position: lone.position,
      requests_before_lone: lone.requestsBefore,
      tokens_before_lone: lone.tokensBefore,
      work_items: lone.workItems,
      cpu_ms: (used.user + used.system) / 1000,
    };
  };
  return runCase({
    name,
    params: { backlog, tokens_per_pass: 262_144 },
    ours: side(false),
    baselines: { tenant_blind: side(true) },
    repeats,
  });
}

export async function run({ quick }: { quick: boolean }): Promise<BenchResult> {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';
  logger.setLogLevel('WARN');
  const { endpoints, child } = await startCloudChild();
  try {
    await initSdkWire();
    // BENCH_CASES=name,name runs a subset (for investigating one case); the default runs all of them.
    const only = process.env.BENCH_CASES?.split(',');
    const wanted = (name: string) => only === undefined || only.includes(name);
    const cases: CaseResult[] = [];
    if (wanted('parked-512')) cases.push(await benchCase(endpoints, 'parked-512', 512, true, quick ? 3 : 9));
    if (wanted('parked-10000')) {
      const large = quick ? 2000 : 10_000;
      const note: Record<string, string> = quick ? { quick_note: 'shrunk to N = 2000 under --quick' } : {};
      cases.push(await benchCase(endpoints, 'parked-10000', large, true, 3, note));
    }
    if (wanted('dispatchable-512')) {
      cases.push(await benchCase(endpoints, 'dispatchable-512', 512, false, 3));
    }
    if (wanted('sdk-parked-512')) {
      cases.push(await sdkCase(endpoints, 'sdk-parked-512', 512, true, quick ? 3 : 9));
    }
    if (wanted('sdk-dispatchable-512')) {
      cases.push(await sdkCase(endpoints, 'sdk-dispatchable-512', 512, false, quick ? 3 : 5));
    }
    if (wanted('woken-1-of-1000')) {
      // The 50,000-row scene seeds in ~25 s and its full look takes seconds a repeat: --quick stops at 10,000.
      for (const parkedRows of quick ? [1_000, 10_000] : [1_000, 10_000, 50_000]) {
        cases.push(...(await wokenCase(endpoints, parkedRows, quick ? 3 : 5)));
      }
    }
    if (wanted('tenant-fairness')) {
      cases.push(await fairnessCase('tenant-fairness-46', 46, quick ? 3 : 9));
      cases.push(await fairnessCase('tenant-fairness-460', 460, quick ? 3 : 9));
    }
    console.error(`note: ${GSI_NOTE}`);
    return { name: 'scheduler', machine: machine(), quick, cases };
  } finally {
    await stopCloudChild(child);
  }
}
