import { startLocalStack } from '../../local/runtime/stack.js';
import { TinkerClient } from '../../shared/client/tinker-client.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import { DEFAULT_BASE_MODEL } from '../../shared/services/api/capabilities.js';
import { type CaseResult, type Counts, runCase } from '../harness.js';
import { AwsCallCounter, type CallCount, callsBetween } from './aws-calls.js';

/**
 * The e2e case `session_futures` (W9): many concurrent samples per sampling session, waited for with
 * the session poll on (`ours`: one `retrieve_futures` long poll per session, then one
 * `retrieve_future` per completion, as SDK 0.26+ does) and off (`baseline`: one `retrieve_future` long
 * poll per sample, as 0.24/0.25 do), in the same run on the same stack.
 *
 * The stack runs without its wake-ups (local/runtime/lambda-runtime.ts `wakeUps: false`): no commit reaches a poll,
 * so both sides re-read on the schedule they use on AWS, and the reads counted are the ones AWS would
 * bill. Measured per side: `reads_per_waiting_client_per_s`, the api's DynamoDB reads (GetItem,
 * Query, BatchGetItem) from the last submit to the last result, per waiting sampling client and
 * second; `reads_per_sample`; and each sample's submit-to-result latency (p50/p99).
 */

const READS = new Set(['GetItem', 'Query', 'BatchGetItem']);

function readsOf(calls: readonly CallCount[]): number {
  return calls
    .filter((count) => count.caller === 'api' && count.service === 'dynamodb' && READS.has(count.operation))
    .reduce((total, count) => total + count.calls, 0);
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number;
}

const round3 = (value: number) => Math.round(value * 1000) / 1000;

export async function sessionFuturesCase(options: {
  readonly quick: boolean;
  readonly repeats: number;
}): Promise<CaseResult> {
  const clients = options.quick ? 2 : 4;
  const samplesPerClient = options.quick ? 16 : 32;
  const maxTokens = 48;
  const calls = new AwsCallCounter();
  const stack = await startLocalStack({
    prefix: `bench-sf-${Date.now().toString(36)}`,
    runtime: { wakeUps: false, onSdkClient: calls.install },
  });
  try {
    const apiKey = await createApiKey(stack.clients.doc, stack.resources.tables.registry, 'bench-sf');
    const client = new TinkerClient({ baseUrl: stack.apiUrl, apiKey });
    const { session_id } = await client.createSession({ tags: ['bench'], sdk_version: '0.32.0' });
    let samplingSeq = 0;
    let samplers: string[] = [];
    const prepare = async () => {
      samplers = await Promise.all(
        Array.from({ length: clients }, async () => {
          const answer = await client.createSamplingSession({
            session_id,
            sampling_session_seq_id: samplingSeq++,
            base_model: DEFAULT_BASE_MODEL,
          });
          return answer.sampling_session_id;
        }),
      );
    };

    const side = (poll: 'session' | 'per_future') => async (): Promise<Counts> => {
      const latencies: number[] = [];
      const submitted = await Promise.all(
        samplers.map((sampler) =>
          Promise.all(
            Array.from({ length: samplesPerClient }, async (_, n) => {
              const sent = Date.now();
              const { request_id } = await client.asample({
                sampling_session_id: sampler,
                seq_id: n + 1,
                num_samples: 1,
                prompt: { chunks: [{ type: 'encoded_text', tokens: [72, 105, 32, n % 100] }] },
                sampling_params: { max_tokens: maxTokens, temperature: 1, seed: n },
              });
              return { request_id, sent };
            }),
          ),
        ),
      );
      const before = calls.snapshot();
      const waitStart = performance.now();
      await Promise.all(
        samplers.map(async (sampler, index) => {
          const mine = submitted[index] ?? [];
          const sentAt = new Map(mine.map((entry) => [entry.request_id, entry.sent]));
          if (poll === 'per_future') {
            await Promise.all(
              mine.map(async ({ request_id, sent }) => {
                await client.waitFor(request_id);
                latencies.push(Date.now() - sent);
              }),
            );
            return;
          }
          const fetches: Promise<void>[] = [];
          let cursor = 0;
          let seen = 0;
          while (seen < mine.length) {
            const answer = await client.retrieveFutures({
              target: { type: 'sampling_session', sampling_session_id: sampler },
              prev_cursor: cursor,
            });
            cursor = answer.cursor;
            for (const completion of answer.completions) {
              const sent = sentAt.get(completion.request_id);
              if (sent === undefined) continue;
              seen += 1;
              fetches.push(
                client.retrieveFuture(completion.request_id).then(() => {
                  latencies.push(Date.now() - sent);
                }),
              );
            }
          }
          await Promise.all(fetches);
        }),
      );
      const waitSeconds = (performance.now() - waitStart) / 1000;
      const reads = readsOf(callsBetween(before, calls.snapshot()));
      latencies.sort((a, b) => a - b);
      return {
        samples: latencies.length,
        reads_per_waiting_client_per_s: round3(reads / clients / Math.max(waitSeconds, 1e-3)),
        reads_per_sample: round3(reads / Math.max(latencies.length, 1)),
        p50_ms: round3(percentile(latencies, 50)),
        p99_ms: round3(percentile(latencies, 99)),
      };
    };

    return await runCase({
      name: 'session_futures',
      params: {
        sampling_clients: clients,
        samples_per_client: samplesPerClient,
        max_tokens: maxTokens,
        wake_ups: 'off (polls re-read as on AWS)',
        measured:
          'ours: one retrieve_futures long poll per sampling session, then retrieve_future per completion',
        compared_with: 'baseline (per_future_poll): one retrieve_future long poll per sample (SDK 0.24/0.25)',
      },
      ours: side('session'),
      baselines: { per_future_poll: side('per_future') },
      repeats: options.repeats,
      prepare,
    });
  } finally {
    await stack.stop();
  }
}
