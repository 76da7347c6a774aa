import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { handler } from '../functions/api/handler.js';
import { localAwsClients } from '../local/cloud/aws-clients.js';
import { envFor, provisionResources } from '../local/cloud/resources.js';
import { awsClients, resetAwsClients } from '../shared/aws/clients.js';
import { transactWrite } from '../shared/aws/transact.js';
import { passInputFromJson } from '../shared/backend/pass-input.js';
import { config, resetConfig } from '../shared/base/config.js';
import { mintRequestId, sha256Hex } from '../shared/base/ids.js';
import { topology } from '../shared/base/topology.js';
import { type IdempotencyRecord, registryKey } from '../shared/domain/records.js';
import { createApiKey, tenantForApiKey } from '../shared/repositories/api-keys.js';
import { pendingFutureRow } from '../shared/repositories/futures.js';
import { putOnce } from '../shared/repositories/intake/run-intake.js';
import { canonicalJson } from '../shared/repositories/payloads.js';
import { requireSeqCounter } from '../shared/repositories/seq-counters.js';
import { checkForwardInput, parseRequest } from '../shared/services/api/request-checks.js';
import { forwardBackwardRequest } from '../shared/services/api/schemas.js';
import {
  type BenchCase,
  type BenchResult,
  type CaseResult,
  type Counts,
  machine,
  runCase,
} from './harness.js';
import { attachMeter, createMeter } from './metering.js';
import { startCloudChild, stopCloudChild } from './support/cloud-child.js';
import { hostileCases } from './support/hostile-intake.js';
import { initSdkWire, SDK_4X512, sdkBodies } from './support/sdk-wire.js';

/**
 * `npm run bench -- intake`: forward_backward submits through the API handler on the local cloud
 * (run in a child process, so cpu_ms counts the API's own work). Two groups of cases, same run:
 *  - `forward_backward_*`: ~76 KiB JSON submits. Ours: payload to S3 (now as the canonical protobuf
 *    pass), then one transaction of three small items. Baseline: the same validation and reads,
 *    with the payload stored inline in the futures row (as a single-table design like SkyRL's keeps
 *    `request_data` in its row).
 *  - `sdk_4x512_*`: a 4 x 512-token forward_backward as the SDK sends it (bench/support/sdk-wire.ts).
 *    Ours: SDK 0.25.0 as it talks to us (protobuf, `Content-Encoding: zstd`: stored as received).
 *    Baselines: the same request from SDK 0.24.1 (JSON), and from SDK 0.25.0 without compression
 *    (protobuf); both are stored as the canonical protobuf pass.
 * Binary bodies reach the handler base64-encoded with `isBase64Encoded: true`, as API Gateway
 * delivers them. Per submit: CPU of this process (process.cpuUsage around the submits, bodies built
 * before), bytes stored in S3 (metered PutObject bodies), AWS calls and consumed capacity
 * (deterministic), latency p50/p99, and submits per second, sequentially and with concurrent clients.
 *  - `hostile_*` (issue 25): each hostile input beside a well-formed request of its size, one
 *    request per child process: answer, handler time, CPU, peak RSS growth (bench/support/hostile-intake.ts).
 * `BENCH_CASES=hostile` (or `forward_backward`, `sdk`) runs the cases whose names start so.
 */

const TOKENS_PER_DATUM = 1_420;
const DATUMS = 4;

function forwardBackwardBody(modelId: string, seqId: number): string {
  const data = Array.from({ length: DATUMS }, (_, d) => {
    const tokens = Array.from(
      { length: TOKENS_PER_DATUM },
      (_, i) => (i * 7919 + d * 104729 + seqId) % 50_000,
    );
    return {
      loss_fn_inputs: {
        target_tokens: { data: tokens.map((t) => (t + 1) % 50_000), dtype: 'int64', shape: [tokens.length] },
        weights: { data: tokens.map((_, i) => (i < 64 ? 0 : 1)), dtype: 'float32', shape: [tokens.length] },
      },
      model_input: { chunks: [{ tokens, type: 'encoded_text' }] },
    };
  });
  return JSON.stringify({
    forward_backward_input: { data, loss_fn: 'cross_entropy', loss_fn_config: null },
    model_id: modelId,
    seq_id: seqId,
    type: 'forward_backward',
  });
}

/** A request body as API Gateway hands it to the Lambda: text, or base64 for a binary one. */
interface WireBody {
  readonly body: string;
  readonly isBase64Encoded: boolean;
  readonly headers: Readonly<Record<string, string>>;
}

function jsonBody(body: string): WireBody {
  return { body, isBase64Encoded: false, headers: { 'content-type': 'application/json' } };
}

function protobufBody(bytes: Uint8Array, zstd: boolean): WireBody {
  return {
    body: Buffer.from(bytes).toString('base64'),
    isBase64Encoded: true,
    headers: {
      'content-type': 'application/x-protobuf',
      ...(zstd ? { 'content-encoding': 'zstd' } : {}),
    },
  };
}

function event(path: string, wire: WireBody, apiKey: string): APIGatewayProxyEventV2 {
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: path,
    rawQueryString: '',
    headers: { ...wire.headers, 'x-api-key': apiKey },
    body: wire.body,
    isBase64Encoded: wire.isBase64Encoded,
    requestContext: {
      accountId: 'local',
      apiId: 'local',
      domainName: 'localhost',
      domainPrefix: 'localhost',
      http: { method: 'POST', path, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'bench' },
      requestId: mintRequestId(),
      routeKey: '$default',
      stage: '$default',
      time: '',
      timeEpoch: Date.now(),
    },
  };
}

async function call(path: string, body: unknown, apiKey: string): Promise<Record<string, string>> {
  const wire = typeof body === 'object' && body !== null && 'isBase64Encoded' in body;
  const answer = await handler(
    event(
      path,
      wire ? (body as WireBody) : jsonBody(typeof body === 'string' ? body : JSON.stringify(body)),
      apiKey,
    ),
  );
  if (answer.statusCode !== 200) throw new Error(`${path} answered ${answer.statusCode}: ${answer.body}`);
  return JSON.parse(answer.body ?? '{}') as Record<string, string>;
}

/** The baseline: same auth, validation and counter read; the payload goes inline into the row. */
async function inlineSubmit(body: string, apiKey: string): Promise<void> {
  const { doc } = awsClients();
  const tenant = await tenantForApiKey(doc, config().table('registry'), apiKey);
  if (tenant === undefined) throw new Error('bad key');
  const request = parseRequest(forwardBackwardRequest, JSON.parse(body));
  const tokens = checkForwardInput(
    passInputFromJson(request.forward_backward_input, 'forward_backward_input'),
    'forward_backward_input',
    config().tunables,
  );
  const counter = await requireSeqCounter(doc, config().table('registry'), request.model_id, tenant);
  const payload = canonicalJson(request);
  const digest = sha256Hex(payload);
  const requestId = mintRequestId();
  const now = Date.now();
  const row = {
    ...pendingFutureRow({
      requestId,
      tenant,
      modelId: request.model_id,
      seq: counter.seq + 1,
      requestType: 'forward_backward',
      tokens,
      payloadKey: '',
      payloadDigest: digest,
      now,
    }),
    payload,
  };
  const idem: IdempotencyRecord = {
    pk: registryKey.trainingIdem(request.model_id, request.seq_id),
    tenant,
    request_id: requestId,
    payload_digest: digest,
  };
  const outcome = await transactWrite(
    [
      { Put: { TableName: config().table('futures'), Item: row } },
      {
        Update: {
          TableName: config().table('registry'),
          Key: { pk: registryKey.seqCounter(request.model_id) },
          UpdateExpression: 'SET #seq = :next, last_seq_id = :seq_id',
          ConditionExpression: '#seq = :prev AND last_seq_id < :seq_id',
          ExpressionAttributeNames: { '#seq': 'seq' },
          ExpressionAttributeValues: {
            ':next': counter.seq + 1,
            ':prev': counter.seq,
            ':seq_id': request.seq_id,
          },
        },
      },
      putOnce(config().table('registry'), idem),
    ],
    `${requestId}.0`,
    doc,
  );
  if (!outcome.ok) throw new Error('baseline transaction lost a race; the bench keeps models disjoint');
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

function round(value: number, digits = 3): number {
  const factor = 10 ** digits;
  return Math.round(value * factor) / factor;
}

/** A BPE tokenizer's vocabulary (Qwen3's), above every token id the bodies hold. */
const BENCH_VOCAB = 151_936;

export async function run(options: { quick: boolean }): Promise<BenchResult> {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';
  const { endpoints, child } = await startCloudChild();
  try {
    await initSdkWire();
    const provisioned = await provisionResources(
      topology,
      `bench${Date.now().toString(36)}`,
      localAwsClients(endpoints),
    );
    Object.assign(process.env, envFor(topology, provisioned, endpoints), {
      POWERTOOLS_LOG_LEVEL: 'ERROR',
      // The bodies carry BPE-sized token ids, as the SDK sends them for a real model: the model's
      // vocabulary is declared that size so intake's B2 check takes them (nothing here executes).
      BASE_MODELS: JSON.stringify([{ name: 'reference/byte-lm', vocab_size: BENCH_VOCAB }]),
    });
    resetConfig();
    resetAwsClients();
    const dynamoMeter = createMeter();
    const s3Meter = createMeter();
    attachMeter(awsClients().dynamo, dynamoMeter, { dynamo: true });
    attachMeter(awsClients().s3, s3Meter);
    const apiKey = await createApiKey(awsClients().doc, config().table('registry'), 'bench');
    const { session_id: sessionId } = await call('/api/v1/create_session', { tags: ['bench'] }, apiKey);
    let modelSeqId = 0;
    const newModel = async () =>
      (
        await call(
          '/api/v1/create_model',
          {
            session_id: sessionId,
            model_seq_id: modelSeqId++,
            base_model: 'reference/byte-lm',
            lora_config: { rank: 8 },
          },
          apiKey,
        )
      ).model_id!;

    const sampleBytes = Buffer.byteLength(forwardBackwardBody('model-x', 1));
    const sample = sdkBodies('model-x', 1, 1);
    const sequentialSubmits = options.quick ? 20 : 200;
    const clientsConcurrent = 8;
    const perClient = options.quick ? 5 : 40;
    const repeats = options.quick ? 1 : 3;

    /**
     * Runs `lanes` concurrent clients, each submitting `perLane` steps in order to its own model.
     * `body(model, lane, step)` builds a body before the measured window (the client's work).
     */
    const measure = <B>(
      lanes: number,
      perLane: number,
      body: (model: string, lane: number, step: number) => B,
      submit: (body: B) => Promise<void>,
    ) => {
      let models: string[] = [];
      return {
        prepare: async () => {
          models = await Promise.all(Array.from({ length: lanes }, () => newModel()));
        },
        subject: async (): Promise<Counts> => {
          const bodies = models.map((model, lane) =>
            Array.from({ length: perLane }, (_, i) => body(model, lane, i + 1)),
          );
          dynamoMeter.reset();
          s3Meter.reset();
          const latencies: number[] = [];
          const started = performance.now();
          const cpu = process.cpuUsage();
          await Promise.all(
            bodies.map(async (lane) => {
              for (const body of lane) {
                const begin = performance.now();
                await submit(body);
                latencies.push(performance.now() - begin);
              }
            }),
          );
          const used = process.cpuUsage(cpu);
          const seconds = (performance.now() - started) / 1000;
          const submits = lanes * perLane;
          latencies.sort((a, b) => a - b);
          return {
            submits,
            submits_per_s: round(submits / seconds, 1),
            p50_ms: round(percentile(latencies, 50), 2),
            p99_ms: round(percentile(latencies, 99), 2),
            cpu_ms_per_submit: round((used.user + used.system) / 1000 / submits),
            stored_bytes_per_submit: round(s3Meter.bytesOut / submits, 1),
            ddb_calls_per_submit: round(dynamoMeter.calls / submits),
            s3_calls_per_submit: round(s3Meter.calls / submits),
            rcu_per_submit: round(dynamoMeter.rcu / submits),
            wcu_per_submit: round(dynamoMeter.wcu / submits),
          };
        },
      };
    };

    const ours = (body: string | WireBody) =>
      call('/api/v1/forward_backward', body, apiKey).then(() => undefined);
    const inline = (body: string) => inlineSubmit(body, apiKey);
    const legacyBody = (model: string, _lane: number, step: number) => forwardBackwardBody(model, step);
    // The same tokens on every side: the salt names (lane, step), not the model.
    const sdk = (model: string, lane: number, step: number) => sdkBodies(model, step, lane * 100_000 + step);

    const cases: BenchCase[] = [];
    for (const [name, lanes, perLane] of [
      ['sequential', 1, sequentialSubmits],
      ['concurrent', clientsConcurrent, perClient],
    ] as const) {
      const sides = {
        ours: measure(lanes, perLane, legacyBody, ours),
        inline: measure(lanes, perLane, legacyBody, inline),
      };
      cases.push({
        name: `forward_backward_${name}`,
        params: { clients: lanes, submits_per_client: perLane, request_bytes: sampleBytes },
        ours: sides.ours.subject,
        baselines: { inline_payload: sides.inline.subject },
        repeats,
        // Fresh models for whichever side runs next (the harness does not say which).
        prepare: async () => {
          await Promise.all(Object.values(sides).map((side) => side.prepare()));
        },
      });
    }
    for (const [name, lanes, perLane] of [
      ['sequential', 1, sequentialSubmits],
      ['concurrent', clientsConcurrent, perClient],
    ] as const) {
      const sides = {
        zstd: measure(lanes, perLane, (...at) => protobufBody(sdk(...at).zstd, true), ours),
        json: measure(lanes, perLane, (...at) => jsonBody(sdk(...at).json), ours),
        protobuf: measure(lanes, perLane, (...at) => protobufBody(sdk(...at).protobuf, false), ours),
      };
      cases.push({
        name: `sdk_4x512_${name}`,
        params: {
          clients: lanes,
          submits_per_client: perLane,
          datums: SDK_4X512.datums,
          tokens_per_datum: SDK_4X512.tokensPerDatum,
          request_bytes_zstd: sample.zstd.length,
          request_bytes_json_0241: Buffer.byteLength(sample.json),
          request_bytes_protobuf: sample.protobuf.length,
          ours: 'SDK 0.25.0: protobuf, Content-Encoding zstd (level 3), stored as received',
          baseline: 'SDK 0.24.1: JSON, stored as the canonical protobuf pass',
          baseline_protobuf: 'SDK 0.25.0 without compression: protobuf, stored in canonical form',
        },
        ours: sides.zstd.subject,
        baselines: { json_0241: sides.json.subject, protobuf: sides.protobuf.subject },
        repeats,
        prepare: async () => {
          await Promise.all(Object.values(sides).map((side) => side.prepare()));
        },
      });
    }

    const hostile = await hostileCases({ apiKey, modelId: await newModel(), repeats });
    cases.push(...hostile.cases);

    const only = process.env.BENCH_CASES?.split(',');
    const results = [];
    for (const benchCase of cases) {
      if (only !== undefined && !only.some((prefix) => benchCase.name.startsWith(prefix))) continue;
      results.push(hostile.annotate(await runCase(benchCase)));
    }
    return {
      name: 'intake',
      machine: machine(),
      quick: options.quick,
      cases: results.map((result) => annotate(result)),
    };
  } finally {
    await stopCloudChild(child);
  }
}

/** For the SDK cases: stored bytes and CPU of each baseline over ours. */
function annotate(result: CaseResult): CaseResult {
  if (!String(result.name).startsWith('sdk_')) return result;
  const ours = result.ours as Counts;
  const ratios: Record<string, number> = {};
  for (const [key, value] of Object.entries(result)) {
    if (!key.startsWith('baseline')) continue;
    const side = value as Counts;
    const label = key === 'baseline' ? 'json_0241' : key.replace(/^baseline_/, '');
    ratios[`ratio_stored_bytes_${label}`] = round(
      side.stored_bytes_per_submit! / Math.max(ours.stored_bytes_per_submit!, 1),
      2,
    );
    ratios[`ratio_cpu_${label}`] = round(
      side.cpu_ms_per_submit! / Math.max(ours.cpu_ms_per_submit!, 1e-3),
      2,
    );
  }
  return { ...result, ...ratios };
}
