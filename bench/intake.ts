import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { handler } from '../functions/api/handler.js';
import { localAwsClients } from '../local/aws-clients.js';
import { startLocalCloud } from '../local/cloud.js';
import { envFor, provisionResources } from '../local/resources.js';
import { checkForwardInput, parseRequest } from '../shared/api/request-checks.js';
import { forwardBackwardRequest } from '../shared/api/schemas.js';
import { awsClients, resetAwsClients } from '../shared/aws/clients.js';
import { passInputFromJson } from '../shared/backend/pass-input.js';
import { config, resetConfig } from '../shared/config.js';
import { type IdempotencyRecord, registryKey } from '../shared/domain/records.js';
import { mintRequestId, sha256Hex } from '../shared/ids.js';
import { canonicalJson } from '../shared/payload-store.js';
import { createApiKey, tenantForApiKey } from '../shared/repositories/api-keys.js';
import { pendingFutureRow } from '../shared/repositories/futures.js';
import { putOnce } from '../shared/repositories/intake.js';
import { requireSeqCounter } from '../shared/repositories/seq-counters.js';
import { transactWrite } from '../shared/repositories/transact.js';
import { topology } from '../shared/topology.js';
import { type BenchCase, type BenchResult, type Counts, machine, runCase } from './harness.js';
import { attachMeter, createMeter } from './metering.js';

/**
 * `npm run bench -- intake`: forward_backward submits of ~76 KiB through the API handler on the local
 * cloud. Ours: payload to S3, then one transaction of three small items. Baseline: the same validation
 * and reads, with the payload stored inline in the futures row (as a single-table design like SkyRL's
 * keeps `request_data` in its row). Per submit: latency p50/p99, AWS calls and consumed capacity
 * (deterministic), and submits per second, sequentially and with concurrent clients.
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

function event(path: string, body: string, apiKey: string): APIGatewayProxyEventV2 {
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: path,
    rawQueryString: '',
    headers: { 'content-type': 'application/json', 'x-api-key': apiKey },
    body,
    isBase64Encoded: false,
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
  const answer = await handler(event(path, typeof body === 'string' ? body : JSON.stringify(body), apiKey));
  if (answer.statusCode !== 200) throw new Error(`${path} answered ${answer.statusCode}: ${answer.body}`);
  return JSON.parse(answer.body ?? '{}') as Record<string, string>;
}

/** The baseline: same auth, validation and counter read; the payload goes inline into the row. */
async function inlineSubmit(body: string, apiKey: string): Promise<void> {
  const { doc } = awsClients();
  const tenant = await tenantForApiKey(apiKey, doc);
  if (tenant === undefined) throw new Error('bad key');
  const request = parseRequest(forwardBackwardRequest, JSON.parse(body));
  const tokens = checkForwardInput(
    passInputFromJson(request.forward_backward_input, 'forward_backward_input'),
    'forward_backward_input',
    config().tunables,
  );
  const counter = await requireSeqCounter(request.model_id, tenant, doc);
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
      putOnce(idem),
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

export async function run(options: { quick: boolean }): Promise<BenchResult> {
  const cloud = await startLocalCloud();
  try {
    const provisioned = await provisionResources(
      topology,
      `bench${Date.now().toString(36)}`,
      localAwsClients(cloud.endpoints),
    );
    Object.assign(process.env, envFor(topology, provisioned, cloud.endpoints), {
      POWERTOOLS_LOG_LEVEL: 'ERROR',
    });
    resetConfig();
    resetAwsClients();
    const dynamoMeter = createMeter();
    const s3Meter = createMeter();
    attachMeter(awsClients().dynamo, dynamoMeter, { dynamo: true });
    attachMeter(awsClients().s3, s3Meter);
    const apiKey = await createApiKey('bench');
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
    const sequentialSubmits = options.quick ? 20 : 200;
    const clientsConcurrent = 8;
    const perClient = options.quick ? 5 : 40;
    const repeats = options.quick ? 1 : 3;

    /** Runs `lanes` concurrent clients, each submitting `perLane` steps in order to its own model. */
    const measure = (lanes: number, perLane: number, submit: (body: string) => Promise<void>) => {
      let models: string[] = [];
      return {
        prepare: async () => {
          models = await Promise.all(Array.from({ length: lanes }, () => newModel()));
        },
        subject: async (): Promise<Counts> => {
          const bodies = models.map((model) =>
            Array.from({ length: perLane }, (_, i) => forwardBackwardBody(model, i + 1)),
          );
          dynamoMeter.reset();
          s3Meter.reset();
          const latencies: number[] = [];
          const started = performance.now();
          await Promise.all(
            bodies.map(async (lane) => {
              for (const body of lane) {
                const begin = performance.now();
                await submit(body);
                latencies.push(performance.now() - begin);
              }
            }),
          );
          const seconds = (performance.now() - started) / 1000;
          const submits = lanes * perLane;
          latencies.sort((a, b) => a - b);
          return {
            submits,
            submits_per_s: round(submits / seconds, 1),
            p50_ms: round(percentile(latencies, 50), 2),
            p99_ms: round(percentile(latencies, 99), 2),
            ddb_calls_per_submit: round(dynamoMeter.calls / submits),
            s3_calls_per_submit: round(s3Meter.calls / submits),
            rcu_per_submit: round(dynamoMeter.rcu / submits),
            wcu_per_submit: round(dynamoMeter.wcu / submits),
          };
        },
      };
    };

    const ours = (body: string) => call('/api/v1/forward_backward', body, apiKey).then(() => undefined);
    const inline = (body: string) => inlineSubmit(body, apiKey);

    const cases: BenchCase[] = [];
    for (const [name, lanes, perLane] of [
      ['sequential', 1, sequentialSubmits],
      ['concurrent', clientsConcurrent, perClient],
    ] as const) {
      const oursRun = measure(lanes, perLane, ours);
      const baselineRun = measure(lanes, perLane, inline);
      cases.push({
        name: `forward_backward_${name}`,
        params: { clients: lanes, submits_per_client: perLane, request_bytes: sampleBytes },
        ours: oursRun.subject,
        baselines: { inline_payload: baselineRun.subject },
        repeats,
        // Fresh models for whichever side runs next (the harness does not say which).
        prepare: async () => {
          await Promise.all([oursRun.prepare(), baselineRun.prepare()]);
        },
      });
    }

    const results = [];
    for (const benchCase of cases) results.push(await runCase(benchCase));
    return { name: 'intake', machine: machine(), quick: options.quick, cases: results };
  } finally {
    await cloud.stop();
  }
}
