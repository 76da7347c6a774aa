import { GetObjectCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import { BatchGetCommand } from '@aws-sdk/lib-dynamodb';
import { phraseDatum } from '../local/demos/parts/dataset.js';
import type { InvocationTrace } from '../local/runtime/lambda-runtime.js';
import { startLocalStack } from '../local/runtime/stack.js';
import type { SampleRequest } from '../shared/backend/backend.js';
import {
  type ForwardBackwardInputJson,
  type ModelInputJson,
  modelInputFromJson,
  passInputFromJson,
} from '../shared/backend/pass-input.js';
import { ReferenceBackend } from '../shared/backend/reference/reference-backend.js';
import { TinkerClient } from '../shared/client/tinker-client.js';
import { decodeWorkItemFile } from '../shared/domain/planning/work-item-file.js';
import { createApiKey } from '../shared/repositories/api-keys.js';
import { DEFAULT_BASE_MODEL } from '../shared/services/api/capabilities.js';
import { type BenchResult, type CaseResult, type Counts, machine, runCase } from './harness.js';
import { AwsCallCounter, callsBetween, callsPerRequest } from './support/aws-calls.js';
import { cpuMeter } from './support/cpu.js';
import { type ClientTiming, HOPS, hopBreakdown, type WorkItemHeader } from './support/hops.js';
import { sessionFuturesCase } from './support/session-futures-case.js';

/**
 * `npm run bench -- e2e [--quick]`: a mixed workload through the whole local stack, as `npm start`
 * runs it (HTTP API -> futures/models streams -> scheduler -> S3 work item + SQS manifest -> worker
 * Lambda on the reference backend -> commit -> retrieve_future). Several models at once, each with
 * rounds of forward_backward + optim_step and, every other round, a sample from the base model; two
 * client behaviours: `closed_loop` (the SDK's training loop: submit a round, wait for it) and `burst`
 * (submit everything, then wait). Measured: requests per second, submit-to-result latency (p50/p99)
 * as the client sees it, submit-to-commit latency as the futures rows record it (without
 * retrieve_future's polling backoff), work items per request (batching), and where each request's
 * time went, hop by hop (`bench/support/hops.ts`).
 *
 * `single_closed_loop` is the same rounds for one model alone: the SDK-style step of issue #16
 * without six loops sharing the machine's cores.
 *
 * Beside the latencies, per request: AWS calls (`calls_per_request_<service>` for dynamodb,
 * dynamodb_streams, s3 and sqs; `calls_per_request_<caller>` for each function and the runtime's
 * `triggers`; `calls_per_request` in all), counted by a middleware on every SDK client the stack
 * uses (local/runtime/lambda-runtime.ts `onSdkClient`, bench/support/aws-calls.ts), and CPU ms of this Node
 * process (`cpu_ms_per_request_node`: api, scheduler, worker, fauxqs, triggers and the client share
 * it) and of DynamoDB Local's JVM (`cpu_ms_per_request_ddb_local`, from /proc; absent without it),
 * over the measured loop only. Calls depend little on timing; idle polls and wake-ups do a little.
 *
 * `session_futures` (bench/support/session-futures-case.ts, on a stack of its own without wake-ups):
 * many concurrent samples per sampling session, waited for through one session poll (W9) against one
 * retrieve_future poll per sample; reads per waiting client per second and p50/p99 latency.
 *
 * Knobs for investigation: `E2E_CASES=mixed|session_futures` runs one group only; `E2E_REPEATS=N` (default 3, 1 with --quick); `E2E_CALL_DETAIL=on` prints
 * each measured run's calls per request by caller, service and operation to stderr.
 * `E2E_WAKE_UPS=off` runs the stack without its wake-ups (local/runtime/lambda-runtime.ts `wakeUps`): retrieve_future
 * re-reads on the schedule it uses on AWS and the stream triggers sleep between empty reads.
 * `E2E_STREAM_LANES=on` delivers a shard's stream batches side by side as the topology's
 * `parallelizationFactor` declares (local/runtime/lambda-runtime.ts `streamLanes`; off by default).
 *
 * Baseline (`backend_direct`): the same requests, in the same per-model order, run directly on the
 * reference backend in this one process: no API, storage, streams, scheduler or queue. The ratio is
 * the control plane's overhead, on a backend whose steps take about a millisecond; on a GPU backend
 * the same overhead sits beside steps that take far longer.
 */

interface Shape {
  readonly models: number;
  readonly rounds: number;
  readonly sampleEvery: number;
}

const TEXTS = [
  'the cat sat on the mat.',
  'a bird sang in the tree.',
  'la na la na la.',
  'it rains, it pours.',
];
const ADAM = { learning_rate: 0.02 };
const SAMPLE_TOKENS = 8;

function batch(model: number, round: number) {
  const data = [0, 1].map((i) => phraseDatum(TEXTS[(model + round + i) % TEXTS.length] as string));
  return { data, loss_fn: 'cross_entropy' as const } satisfies ForwardBackwardInputJson;
}

function sampleRequest(model: number, round: number) {
  return {
    num_samples: 1,
    prompt: { chunks: [{ type: 'encoded_text' as const, tokens: [...Buffer.from('the ', 'utf8')] }] },
    sampling_params: {
      max_tokens: SAMPLE_TOKENS,
      temperature: 1,
      top_k: -1,
      top_p: 1,
      seed: model * 1000 + round,
    },
  } satisfies Omit<SampleRequest, 'prompt'> & { prompt: ModelInputJson };
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number;
}

const round3 = (value: number) => Math.round(value * 1000) / 1000;

/** Latencies (ms) per request type -> the counts a side reports. */
function summarize(latencies: Map<string, number[]>, wallMs: number): Counts {
  const all = [...latencies.values()].flat().sort((a, b) => a - b);
  const counts: Counts = {
    requests: all.length,
    requests_per_s: round3(all.length / (wallMs / 1000)),
    p50_ms: round3(percentile(all, 50)),
    p99_ms: round3(percentile(all, 99)),
  };
  for (const [type, values] of latencies) {
    const sorted = [...values].sort((a, b) => a - b);
    counts[`${type}_p50_ms`] = round3(percentile(sorted, 50));
    counts[`${type}_p99_ms`] = round3(percentile(sorted, 99));
  }
  return counts;
}

function record(latencies: Map<string, number[]>, type: string, ms: number): void {
  latencies.set(type, [...(latencies.get(type) ?? []), ms]);
}

export async function run(options: { quick: boolean }): Promise<BenchResult> {
  const repeats = Number(process.env.E2E_REPEATS ?? (options.quick ? 1 : 3));
  if (!Number.isInteger(repeats) || repeats < 1) throw new Error('E2E_REPEATS must be a positive integer');
  const only = process.env.E2E_CASES?.split(',').map((name) => name.trim());
  const wanted = (name: string) => only === undefined || only.includes(name);
  const cases: CaseResult[] = wanted('mixed') ? await mixedCases(options, repeats) : [];
  // On a stack of its own, without wake-ups: its reads are the ones AWS would bill.
  if (wanted('session_futures')) cases.push(await sessionFuturesCase({ quick: options.quick, repeats }));
  return { name: 'e2e', machine: machine(), quick: options.quick, cases };
}

async function mixedCases(options: { quick: boolean }, repeats: number): Promise<CaseResult[]> {
  const shape: Shape = options.quick
    ? { models: 3, rounds: 4, sampleEvery: 2 }
    : { models: 6, rounds: 10, sampleEvery: 2 };
  const callDetail = process.env.E2E_CALL_DETAIL === 'on';
  const wakeUps = process.env.E2E_WAKE_UPS !== 'off';
  const streamLanes = process.env.E2E_STREAM_LANES === 'on';
  const traces: InvocationTrace[] = [];
  const calls = new AwsCallCounter();
  const stack = await startLocalStack({
    prefix: `bench-e2e-${Date.now().toString(36)}`,
    runtime: {
      wakeUps,
      streamLanes,
      onInvocation: (trace) => void traces.push(trace),
      onSdkClient: calls.install,
    },
  });
  const startCpu = cpuMeter(stack.cloud.dynamodbPid);
  const onSignal = () => void stack.stop().finally(() => process.exit(130));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const { clients, resources } = stack;
    const apiKey = await createApiKey(clients.doc, resources.tables.registry, 'bench');
    const client = new TinkerClient({ baseUrl: stack.apiUrl, apiKey });
    const { session_id } = await client.createSession({ tags: ['bench'] });
    let modelSeq = 0;
    let samplingSeq = 0;
    const backend = new ReferenceBackend();

    // Fresh models for each measured run of either side (prepared untimed).
    let remote: { modelId: string; samplingSessionId: string }[] = [];
    let local: Awaited<ReturnType<ReferenceBackend['createModel']>>[] = [];
    const prepare = (models: number) => async () => {
      remote = await Promise.all(
        Array.from({ length: models }, async (_, m) => {
          const created = await client.createModel({
            session_id,
            model_seq_id: modelSeq++,
            base_model: DEFAULT_BASE_MODEL,
            lora_config: { rank: 8, seed: m },
          });
          const sampling = await client.createSamplingSession({
            session_id,
            sampling_session_seq_id: samplingSeq++,
            base_model: DEFAULT_BASE_MODEL,
          });
          await client.waitFor(created.request_id);
          return { modelId: created.model_id, samplingSessionId: sampling.sampling_session_id };
        }),
      );
      local = await Promise.all(
        Array.from({ length: models }, (_, m) =>
          backend.createModel({ base_model: DEFAULT_BASE_MODEL, lora_config: { rank: 8, seed: m } }),
        ),
      );
    };

    const workItems = async () =>
      (await clients.s3.send(new ListObjectsV2Command({ Bucket: resources.bucket, Prefix: 'work/' })))
        .KeyCount ?? 0;

    /** The headers of the work items written since the last call (their request ids, when built). */
    const seenItems = new Set<string>();
    const newWorkItems = async (): Promise<WorkItemHeader[]> => {
      const headers: WorkItemHeader[] = [];
      let token: string | undefined;
      do {
        const page = await clients.s3.send(
          new ListObjectsV2Command({ Bucket: resources.bucket, Prefix: 'work/', ContinuationToken: token }),
        );
        for (const { Key } of page.Contents ?? []) {
          if (Key === undefined || seenItems.has(Key)) continue;
          seenItems.add(Key);
          const object = await clients.s3.send(new GetObjectCommand({ Bucket: resources.bucket, Key }));
          const item = decodeWorkItemFile(
            await (object.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray(),
          ) as {
            work_item_id: string;
            created_at: number;
            models: { steps: { request_id: string }[] }[];
            samples: { request_id: string }[];
          };
          headers.push({
            work_item_id: item.work_item_id,
            created_at: item.created_at,
            requestIds: [
              ...item.models.flatMap((model) => model.steps.map((step) => step.request_id)),
              ...item.samples.map((sample) => sample.request_id),
            ],
          });
        }
        token = page.NextContinuationToken;
      } while (token !== undefined);
      return headers;
    };

    /**
     * Submit-to-commit per request as the futures rows record it (created at intake, updated by the
     * commit): the client's latency minus the time retrieve_future took to notice; and each
     * request's commit time, for the hop breakdown.
     */
    const committedAt = new Map<string, number>();
    const serverLatencies = async (ids: readonly string[]): Promise<number[]> => {
      const latencies: number[] = [];
      for (let first = 0; first < ids.length; first += 100) {
        const keys = ids.slice(first, first + 100).map((request_id) => ({ request_id }));
        let pending: Record<string, { Keys: Record<string, unknown>[] }> = {
          [resources.tables.futures]: { Keys: keys },
        };
        while (Object.keys(pending).length > 0) {
          const answer = await clients.doc.send(new BatchGetCommand({ RequestItems: pending }));
          for (const row of answer.Responses?.[resources.tables.futures] ?? []) {
            latencies.push((row.updated_at as number) - (row.created_at as number));
            committedAt.set(row.request_id as string, row.updated_at as number);
          }
          pending = (answer.UnprocessedKeys ?? {}) as typeof pending;
        }
      }
      return latencies.sort((a, b) => a - b);
    };

    /** One model's requests in order, as [type, submit] pairs; `submit` answers the request id. */
    const requestsOf = (m: number, modelId: string, samplingSessionId: string) => {
      let seqId = 0;
      const rounds: [string, () => Promise<string>][][] = [];
      for (let r = 0; r < shape.rounds; r++) {
        const round: [string, () => Promise<string>][] = [];
        const passSeq = ++seqId;
        const stepSeq = ++seqId;
        round.push([
          'forward_backward',
          async () =>
            (
              await client.forwardBackward({
                model_id: modelId,
                seq_id: passSeq,
                forward_backward_input: batch(m, r),
              })
            ).request_id,
        ]);
        round.push([
          'optim_step',
          async () =>
            (await client.optimStep({ model_id: modelId, seq_id: stepSeq, adam_params: ADAM })).request_id,
        ]);
        if (r % shape.sampleEvery === 0) {
          round.push([
            'sample',
            async () =>
              (
                await client.asample({
                  sampling_session_id: samplingSessionId,
                  seq_id: r,
                  ...sampleRequest(m, r),
                })
              ).request_id,
          ]);
        }
        rounds.push(round);
      }
      return rounds;
    };

    /**
     * `closed_loop`: each model submits a round, waits for all of it, then submits the next (the SDK's
     * training loop). `burst`: each model submits everything at once, then waits (latency includes
     * waiting behind the model's earlier requests, as R1 requires).
     */
    const ours = (mode: 'closed_loop' | 'burst') => async (): Promise<Counts> => {
      const latencies = new Map<string, number[]>();
      const ids: string[] = [];
      const timings: ClientTiming[] = [];
      await newWorkItems();
      traces.length = 0;
      const itemsBefore = await workItems();
      const callsBefore = calls.snapshot();
      const endCpu = startCpu();
      const started = performance.now();
      type Submitted = { type: string; id: string; sent: number; answered: number };
      const submitAll = async (round: readonly [string, () => Promise<string>][]) => {
        const submitted: Submitted[] = [];
        for (const [type, submit] of round) {
          const sent = Date.now();
          const id = await submit();
          submitted.push({ type, id, sent, answered: Date.now() });
        }
        return submitted;
      };
      const waitAll = (modelId: string, submitted: readonly Submitted[]) =>
        Promise.all(
          submitted.map(async ({ type, id, sent, answered }) => {
            await client.waitFor(id);
            const done = Date.now();
            record(latencies, type, done - sent);
            ids.push(id);
            timings.push({
              requestId: id,
              modelId: type === 'sample' ? undefined : modelId,
              sent,
              answered,
              done,
            });
          }),
        );
      await Promise.all(
        remote.map(async ({ modelId, samplingSessionId }, m) => {
          const rounds = requestsOf(m, modelId, samplingSessionId);
          if (mode === 'burst') {
            await waitAll(modelId, await submitAll(rounds.flat()));
            return;
          }
          for (const round of rounds) await waitAll(modelId, await submitAll(round));
        }),
      );
      const wall = performance.now() - started;
      const cpu = endCpu();
      const measuredCalls = callsBetween(callsBefore, calls.snapshot());
      const counts = summarize(latencies, wall);
      const requests = counts.requests ?? 0;
      const perRequest = (value: number) => round3(value / Math.max(requests, 1));
      const costs: Counts = {
        ...callsPerRequest(measuredCalls, requests),
        cpu_ms_per_request_node: perRequest(cpu.cpu_ms_client),
      };
      // NaN where /proc is not there to read the JVM's times.
      if (Number.isFinite(cpu.cpu_ms_ddb_local)) {
        costs.cpu_ms_per_request_ddb_local = perRequest(cpu.cpu_ms_ddb_local);
      }
      if (callDetail) {
        process.stderr.write(`e2e ${mode} (${requests} requests): calls per request\n`);
        for (const count of measuredCalls) {
          const share = perRequest(count.calls).toFixed(3).padStart(8);
          process.stderr.write(
            `  ${share}  ${count.caller.padEnd(9)} ${count.service.padEnd(16)} ${count.operation}\n`,
          );
        }
      }
      const items = (await workItems()) - itemsBefore;
      const server = await serverLatencies(ids);
      const hops = hopBreakdown({
        requests: timings,
        committedAt,
        workItems: await newWorkItems(),
        traces,
      });
      const hopCounts: Counts = { hops_unmatched: hops.unmatched };
      for (const hop of HOPS) {
        const values = [...(hops.perRequest.get(hop) ?? [])].sort((a, b) => a - b);
        hopCounts[`hop_${hop}_p50_ms`] = round3(percentile(values, 50));
        hopCounts[`hop_${hop}_p99_ms`] = round3(percentile(values, 99));
      }
      const delivery = [...hops.streamDelivery].sort((a, b) => a - b);
      hopCounts.stream_delivery_p50_ms = round3(percentile(delivery, 50));
      hopCounts.stream_delivery_p99_ms = round3(percentile(delivery, 99));
      return {
        ...counts,
        commit_p50_ms: round3(percentile(server, 50)),
        commit_p99_ms: round3(percentile(server, 99)),
        work_items: items,
        requests_per_work_item: round3((counts.requests ?? 0) / Math.max(items, 1)),
        ...hopCounts,
        ...costs,
      };
    };

    /** The same requests on the backend in this process; in `burst` every request counts from the start. */
    const baseline = (mode: 'closed_loop' | 'burst') => async (): Promise<Counts> => {
      const latencies = new Map<string, number[]>();
      const started = performance.now();
      await Promise.all(
        local.map(async (initial, m) => {
          let state = initial;
          const since = (t: number) => performance.now() - (mode === 'burst' ? started : t);
          for (let r = 0; r < shape.rounds; r++) {
            const roundStart = performance.now();
            // Converted from JSON per call, as the worker converts each stored payload.
            state = (await backend.forwardBackward(state, passInputFromJson(batch(m, r), 'input'))).state;
            record(latencies, 'forward_backward', since(roundStart));
            state = (await backend.optimStep(state, ADAM)).state;
            record(latencies, 'optim_step', since(roundStart));
            if (r % shape.sampleEvery === 0) {
              const sampler = await backend.loadSampler(DEFAULT_BASE_MODEL, null);
              const request = sampleRequest(m, r);
              await backend.sample(sampler, {
                ...request,
                prompt: modelInputFromJson(request.prompt, 'prompt'),
              });
              record(latencies, 'sample', since(roundStart));
            }
          }
        }),
      );
      return summarize(latencies, performance.now() - started);
    };

    const cases: CaseResult[] = [];
    const runs = [
      { name: 'mixed_closed_loop', mode: 'closed_loop', models: shape.models },
      { name: 'mixed_burst', mode: 'burst', models: shape.models },
      { name: 'single_closed_loop', mode: 'closed_loop', models: 1 },
    ] as const;
    for (const { name, mode, models } of runs) {
      cases.push(
        await runCase({
          name,
          params: {
            models,
            rounds_per_model: shape.rounds,
            sample_every_rounds: shape.sampleEvery,
            measured:
              'ours: the whole local stack as npm start runs it (HTTP API, streams, scheduler, SQS, worker Lambda)',
            wake_ups: wakeUps ? 'on' : 'off',
            stream_lanes: streamLanes ? 'declared' : 'off',
            compared_with:
              'baseline (backend_direct): the same requests on the reference backend in one process',
          },
          ours: ours(mode),
          baselines: { backend_direct: baseline(mode) },
          repeats,
          prepare: prepare(models),
        }),
      );
    }
    return cases;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await stack.stop();
  }
}
