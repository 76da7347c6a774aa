import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { compress } from '@bokuweb/zstd-wasm';
import { create, toBinary } from '@bufbuild/protobuf';
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import { DType, ForwardBackwardRequestSchema } from '../../shared/wire/gen/tinker_public_pb.js';
import {
  emptyJsonDatums,
  emptyProtobufChunks,
  emptyProtobufDatums,
  emptyZstdFrames,
  jsonDatumWithTargetShape,
  shapeOfRank,
} from '../../test/support/wire/hostile-bodies.js';
import type { BenchCase, CaseResult, Counts } from '../harness.js';
import { initSdkWire, type SdkRequestShape, sdkBodies } from './sdk-wire.js';

/**
 * The hostile-input cases of `npm run bench -- intake` (issue 25): each repro beside a well-formed
 * request of the same size on the wire (and, for a zstd body, of the same inflated size), in the
 * same run. Every request runs in a fresh child process, through the API handler against the bench's
 * local cloud: the child builds its body, warms up with one small valid submit, then measures the
 * one request: its answer, handler time, CPU and how far it raised the process's peak RSS
 * (`resourceUsage().maxRSS`, after a GC). A peak is per process, hence one process per request.
 */

const THIS_FILE = fileURLToPath(import.meta.url);

type Wire = 'json' | 'protobuf' | 'zstd';

interface Body {
  readonly wire: Wire;
  readonly bytes: Uint8Array;
}

/** What a child is asked to send: a hostile body or a well-formed one of a wire and size. */
type Request =
  | { readonly kind: 'hostile'; readonly name: HostileName }
  | {
      readonly kind: 'well-formed';
      readonly wire: Wire;
      readonly bytes: number;
      readonly inflated?: boolean;
    };

interface Job {
  readonly request: Request;
  readonly apiKey: string;
  readonly modelId: string;
  /** The warm-up submit takes this seq_id, a well-formed measured one the next. */
  readonly seqId: number;
}

const HOSTILE = {
  /** Issue 25, repro 1: 20,000 empty frames, each declaring an 8 MiB window (180 KB). */
  zstd_empty_frames_20000: (): Body => ({ wire: 'zstd', bytes: emptyZstdFrames(20_000) }),
  /** Repro 2: 2,500,000 empty datums (5 MB), zstd level 19 (a few hundred bytes on the wire). */
  protobuf_empty_datums_2500000_zstd: (): Body => ({
    wire: 'zstd',
    bytes: compress(emptyProtobufDatums(2_500_000), 19),
  }),
  /** The same for chunks: one datum of 2,000,000 empty chunks (4 MB), zstd. */
  protobuf_empty_chunks_2000000_zstd: (): Body => ({
    wire: 'zstd',
    bytes: compress(emptyProtobufChunks(2_000_000), 19),
  }),
  /** Repro 3: JSON `data: [{}] x 400,000` (1.2 MB). */
  json_empty_datums_400000: (modelId: string, seqId: number): Body => ({
    wire: 'json',
    bytes: Buffer.from(emptyJsonDatums(modelId, seqId, 400_000)),
  }),
  /** The smaller repro: target_tokens of a 100,000-dimension shape (protobuf, ~100 KB). */
  protobuf_target_rank_100000: (modelId: string, seqId: number): Body => {
    const tokens = [1, 2, 3, 4];
    const message = create(ForwardBackwardRequestSchema, {
      modelId,
      seqId,
      lossFn: 'cross_entropy',
      data: [
        {
          modelInput: [
            {
              chunk: {
                case: 'encodedText',
                value: { tokens: new Uint8Array(Int32Array.from(tokens).buffer) },
              },
            },
          ],
          lossFnInputs: {
            target_tokens: {
              encoding: { case: 'dense', value: new Uint8Array(BigInt64Array.from([2n, 3n, 4n, 5n]).buffer) },
              dtype: DType.DTYPE_INT64,
              shape: shapeOfRank(100_000, 4).map(BigInt),
            },
          },
        },
      ],
    });
    return { wire: 'protobuf', bytes: toBinary(ForwardBackwardRequestSchema, message) };
  },
  /** And target_tokens of shape [4, 1, 1] (JSON). */
  json_target_rank_3: (modelId: string, seqId: number): Body => ({
    wire: 'json',
    bytes: Buffer.from(
      JSON.stringify({
        model_id: modelId,
        seq_id: seqId,
        forward_backward_input: {
          data: [jsonDatumWithTargetShape([1, 2, 3, 4], [4, 1, 1])],
          loss_fn: 'cross_entropy',
        },
      }),
    ),
  }),
} as const;

type HostileName = keyof typeof HOSTILE;

function sdkBody(wire: Wire, modelId: string, seqId: number, shape: SdkRequestShape): Uint8Array {
  const bodies = sdkBodies(modelId, seqId, seqId, shape);
  return wire === 'json' ? Buffer.from(bodies.json) : wire === 'zstd' ? bodies.zstd : bodies.protobuf;
}

/**
 * A well-formed SDK request (bench/support/sdk-wire.ts) of about `bytes` on the wire, or with
 * `inflated`, a zstd one whose protobuf is about `bytes`: 512-token datums, fewer tokens in one
 * datum when even one is too large.
 */
function wellFormed(wire: Wire, bytes: number, inflated: boolean, modelId: string, seqId: number): Body {
  const sizeOf = (shape: SdkRequestShape) =>
    sdkBody(inflated ? 'protobuf' : wire, modelId, seqId, shape).length;
  const one: SdkRequestShape = { datums: 1, tokensPerDatum: 512, promptTokens: 128 };
  const perDatum = sizeOf(one);
  const tokens = Math.max(8, Math.min(512, Math.floor((512 * bytes) / perDatum)));
  const shape: SdkRequestShape =
    perDatum > bytes
      ? { datums: 1, tokensPerDatum: tokens, promptTokens: Math.floor(tokens / 4) }
      : { ...one, datums: Math.min(1024, Math.max(1, Math.round(bytes / perDatum))) };
  return { wire, bytes: sdkBody(wire, modelId, seqId, shape) };
}

function bodyOf(job: Job, seqId: number): Body {
  const { request } = job;
  if (request.kind === 'hostile') return HOSTILE[request.name](job.modelId, seqId);
  return wellFormed(request.wire, request.bytes, request.inflated === true, job.modelId, seqId);
}

function event(body: Body, apiKey: string): APIGatewayProxyEventV2 {
  const path = '/api/v1/forward_backward';
  const headers: Record<string, string> =
    body.wire === 'json'
      ? { 'content-type': 'application/json' }
      : {
          'content-type': 'application/x-protobuf',
          ...(body.wire === 'zstd' ? { 'content-encoding': 'zstd' } : {}),
        };
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: path,
    rawQueryString: '',
    headers: { ...headers, 'x-api-key': apiKey },
    body: Buffer.from(body.bytes).toString(body.wire === 'json' ? 'utf8' : 'base64'),
    isBase64Encoded: body.wire !== 'json',
    requestContext: {
      accountId: 'local',
      apiId: 'local',
      domainName: 'localhost',
      domainPrefix: 'localhost',
      http: { method: 'POST', path, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: 'bench' },
      requestId: `bench-${Date.now()}`,
      routeKey: '$default',
      stage: '$default',
      time: '',
      timeEpoch: Date.now(),
    },
  };
}

if (process.argv.includes('--hostile-child')) await serveOne();

/** Child mode: one measured request, its figures printed as one JSON line. */
async function serveOne(): Promise<never> {
  const job = JSON.parse(process.env.HOSTILE_JOB ?? '') as Job;
  await initSdkWire();
  const { handler } = await import('../../functions/api/handler.js');
  const warm = await handler(event(wellFormed('zstd', 12_000, false, job.modelId, job.seqId), job.apiKey));
  if (warm.statusCode !== 200) throw new Error(`warm-up answered ${warm.statusCode}: ${warm.body}`);
  const body = bodyOf(job, job.seqId + 1);
  const request = event(body, job.apiKey);
  (globalThis as { gc?: () => void }).gc?.();
  const peakBefore = process.resourceUsage().maxRSS;
  const cpu = process.cpuUsage();
  const started = performance.now();
  const answer = await handler(request);
  const handlerMs = performance.now() - started;
  const used = process.cpuUsage(cpu);
  const peakAfter = process.resourceUsage().maxRSS;
  const error =
    answer.statusCode === 200 ? undefined : (JSON.parse(answer.body ?? '{}') as { error?: string });
  process.stdout.write(
    `${JSON.stringify({
      status: answer.statusCode,
      error: error?.error?.slice(0, 120),
      wire_bytes: body.bytes.length,
      handler_ms: handlerMs,
      cpu_ms: (used.user + used.system) / 1000,
      peak_rss_growth_mib: (peakAfter - peakBefore) / 1024,
    })}\n`,
  );
  process.exit(0);
}

async function runChild(job: Job): Promise<Counts & { error?: string }> {
  const child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', THIS_FILE, '--hostile-child'], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, HOSTILE_JOB: JSON.stringify(job) },
  });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  const line = out.trim().split('\n').pop() ?? '';
  if (code !== 0 || line === '') throw new Error(`hostile child exited ${code}: ${out}`);
  return JSON.parse(line) as Counts & { error?: string };
}

export interface HostileContext {
  readonly apiKey: string;
  readonly modelId: string;
  readonly repeats: number;
}

/** The cases: each repro beside well-formed requests of its size (wire, and inflated for zstd). */
export async function hostileCases(context: HostileContext): Promise<{
  cases: BenchCase[];
  /** A case's result with the hostile side's answer and its cost over each baseline's. */
  annotate: (result: CaseResult) => CaseResult;
}> {
  await initSdkWire();
  // Two seq_ids per child (warm-up, then the measured one), increasing across the whole run.
  let nextSeq = 1;
  const answers = new Map<string, string>();
  const side = (caseName: string, request: Request) => async (): Promise<Counts> => {
    const seqId = nextSeq;
    nextSeq += 2;
    const { error, ...counts } = await runChild({ request, seqId, ...context });
    if (request.kind === 'hostile') answers.set(caseName, `${counts.status} ${error ?? ''}`);
    return counts as Counts;
  };
  const cases = (Object.keys(HOSTILE) as HostileName[]).map((name): BenchCase => {
    const hostile = HOSTILE[name](context.modelId, 1);
    const baselines: Record<string, () => Promise<Counts>> = {
      same_wire_bytes: side(name, { kind: 'well-formed', wire: hostile.wire, bytes: hostile.bytes.length }),
    };
    if (hostile.wire === 'zstd') {
      // Inflating is bounded by MAX_BODY_BYTES (W3), so also beside a request that inflates as far.
      baselines.same_inflated_bytes = side(name, {
        kind: 'well-formed',
        wire: 'zstd',
        bytes: 4_900_000,
        inflated: true,
      });
    }
    return {
      name: `hostile_${name}`,
      params: { wire: hostile.wire, wire_bytes: hostile.bytes.length },
      ours: side(name, { kind: 'hostile', name }),
      baselines,
      repeats: context.repeats,
    };
  });
  const annotate = (result: CaseResult): CaseResult => {
    if (!String(result.name).startsWith('hostile_')) return result;
    const ours = result.ours as Counts;
    const ratios: Record<string, number> = {};
    for (const [key, value] of Object.entries(result)) {
      if (!key.startsWith('baseline')) continue;
      const baseline = value as Counts;
      const label = key === 'baseline' ? 'same_wire_bytes' : key.replace(/^baseline_/, '');
      ratios[`ratio_handler_ms_over_${label}`] = ratio(ours.handler_ms, baseline.handler_ms);
      ratios[`ratio_cpu_ms_over_${label}`] = ratio(ours.cpu_ms, baseline.cpu_ms);
    }
    return { ...result, answer: answers.get(String(result.name).replace(/^hostile_/, '')) ?? '', ...ratios };
  };
  return { cases, annotate };
}

function ratio(value: number | undefined, over: number | undefined): number {
  return Math.round(((value ?? 0) / Math.max(over ?? 0, 1e-3)) * 100) / 100;
}
