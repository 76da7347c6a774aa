import { isDeepStrictEqual } from 'node:util';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { createWorkerHandler } from '../../functions/worker/handler.js';
import { type RlLossFn, rlPassInput } from '../../shared/client/rl-inputs.js';
import { TinkerClient } from '../../shared/client/tinker-client.js';
import type { FutureRow } from '../../shared/domain/records.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import { DEFAULT_BASE_MODEL as BASE_MODEL } from '../../shared/services/api/capabilities.js';
import { requestCut } from '../../shared/services/ops/control-store.js';
import { type LocalStack, startLocalStack } from '../runtime/stack.js';
import { decode, encode } from './parts/dataset.js';
import { ProgressBar } from './parts/progress.js';
import { groupAdvantages, RL_PROMPTS, type Rollout, reward, rolloutSequence } from './parts/rl-task.js';
import { RolloutCuts } from './parts/rollout-cuts.js';
import { runDemo, say, seconds } from './parts/script.js';

/**
 * `npm run demo:rl`: an RL loop through the whole local stack, over HTTP like any Tinker client. Each
 * round saves a sampler checkpoint, samples a group of rollouts per prompt from it, scores them with a
 * verifiable reward (parts/rl-task.ts), and trains on group-relative advantages with a policy-gradient
 * forward_backward (importance_sampling, the sampler's logprobs as `logprobs`) and an optim_step. In
 * one round the operator's cut (`cut#<pool>`, what `tinker-serverless cut` writes) lands while the
 * rollouts generate: their prefixes are saved, restored and resumed (P1-P6), and one cut request is
 * sampled again uninterrupted to show the answer is the same. Exits 0 only if the reward rose.
 */

const TENANT = 'demo-rl';
const ROUNDS = 12;
const GROUP = 8;
const RANK = 8;
const ADAM = { learning_rate: 0.1 } as const;
/** Temperature 1, no top-k: the rollouts come from the policy whose logprobs the sampler reports. */
const SAMPLING = { max_tokens: 32, temperature: 1 } as const;
/** New tokens per backend call: a rollout of 32 tokens has three slice boundaries for a cut to land on. */
const SLICE_TOKENS = 8;
const CUT_POLL_MS = 50;
const CUT_ROUND = 1;
const LOSS_FN: RlLossFn = 'importance_sampling';
/** The least rise of the mean reward that passes (the run, seeded throughout, rises by about 0.9). */
const MIN_RISE = 0.25;
const WAIT_MS = 30_000;

interface SampleAnswer {
  readonly sequences: readonly (Rollout & { readonly stop_reason: string })[];
}

interface Group {
  readonly prompt: string;
  readonly requestId: string;
  readonly body: Parameters<TinkerClient['asample']>[0];
  readonly answer: SampleAnswer;
}

const mean = (values: readonly number[]) => values.reduce((sum, v) => sum + v, 0) / values.length;

/** One group of rollouts per prompt, all submitted at once; seeds differ per round and prompt. */
async function sampleGroups(
  client: TinkerClient,
  samplingSessionId: string,
  round: number,
): Promise<Group[]> {
  const submitted = await Promise.all(
    RL_PROMPTS.map(async (prompt, index) => {
      const body = {
        sampling_session_id: samplingSessionId,
        seq_id: index,
        num_samples: GROUP,
        prompt: { chunks: [{ type: 'encoded_text' as const, tokens: encode(prompt) }] },
        sampling_params: { ...SAMPLING, seed: 1000 * round + index },
      };
      return { prompt, body, requestId: (await client.asample(body)).request_id };
    }),
  );
  return Promise.all(
    submitted.map(async (group) => ({
      ...group,
      answer: await client.waitFor<SampleAnswer>(group.requestId, { timeoutMs: WAIT_MS }),
    })),
  );
}

async function main(keep: (stack: LocalStack) => LocalStack): Promise<void> {
  const started = performance.now();
  say('tinker-serverless RL demo: a policy-gradient loop through the local stack, over its HTTP API.');
  say();
  const cuts = new RolloutCuts();
  // The worker Lambda as deployed, with its cut poll and slices shortened so a cut lands mid-rollout.
  const worker = createWorkerHandler({
    worker: { onEvent: cuts.onEvent, cutPollMs: CUT_POLL_MS, sampleSliceTokens: SLICE_TOKENS },
  });
  const stack = keep(
    await startLocalStack({ prefix: 'demo-rl', streamPollIntervalMs: 50, runtime: { handlers: { worker } } }),
  );
  const { apiUrl, resources, clients } = stack;
  const pool = stack.env.POOL as string;
  say(`[1/5] Local stack up in ${seconds(started)}: DynamoDB Local + fauxqs + api/scheduler/worker/sweeper`);

  const client = new TinkerClient({
    baseUrl: apiUrl,
    apiKey: await createApiKey(clients.doc, resources.tables.registry, TENANT),
  });
  const { session_id } = await client.createSession({ tags: ['demo-rl'] });
  const created = await client.createModel({
    session_id,
    model_seq_id: 0,
    base_model: BASE_MODEL,
    lora_config: { rank: RANK, seed: 1 },
  });
  await client.waitFor(created.request_id, { timeoutMs: WAIT_MS });
  const modelId = created.model_id;
  say(`[2/5] Model ${modelId} created (${BASE_MODEL}, rank-${RANK} LoRA) for tenant "${TENANT}"`);

  say(
    `[3/5] ${ROUNDS} rounds: sampler checkpoint, ${RL_PROMPTS.length} prompts x ${GROUP} rollouts ` +
      `(max_tokens ${SAMPLING.max_tokens}), reward = share of lowercase/space bytes, ` +
      `advantage = reward - group mean, forward_backward (loss_fn ${LOSS_FN}), optim_step (Adam lr ${ADAM.learning_rate})`,
  );
  let seqId = 0;
  const saveSampler = async (round: number): Promise<string> => {
    const saved = await client.saveWeightsForSampler({
      model_id: modelId,
      seq_id: ++seqId,
      path: `rl-${round}`,
    });
    return (await client.waitFor<{ path: string }>(saved.request_id, { timeoutMs: WAIT_MS })).path;
  };

  const rewards: number[] = [];
  const texts: string[] = [];
  const operatorCuts: number[] = [];
  let exact: { requestId: string; rollouts: number } | undefined;
  const bar = new ProgressBar(ROUNDS);
  let path = await saveSampler(0);
  const loopStarted = performance.now();
  bar.start('reward -');
  for (let round = 0; ; round++) {
    const session = await client.createSamplingSession({
      session_id,
      sampling_session_seq_id: round,
      model_path: path,
    });
    // Until a cut has landed, from CUT_ROUND on: the operator's cut while this round's rollouts generate.
    const cutting =
      round >= CUT_ROUND && cuts.cutRequests.length === 0
        ? cuts.cutAtNextSlice(() =>
            requestCut(clients.doc, resources.tables.registry, pool, 'npm run demo:rl'),
          )
        : undefined;
    const groups = await sampleGroups(client, session.sampling_session_id, round);
    cuts.cancel();
    if (cutting !== undefined && (await cutting)) operatorCuts.push(round);

    // P6, seen from the client: a cut request sampled again, uninterrupted, answers the same.
    const cutGroup =
      exact === undefined ? groups.find((g) => cuts.cutRequests.includes(g.requestId)) : undefined;
    if (cutGroup !== undefined) {
      const again = await client.asample({ ...cutGroup.body, seq_id: RL_PROMPTS.length });
      const answer = await client.waitFor<SampleAnswer>(again.request_id, { timeoutMs: WAIT_MS });
      if (!isDeepStrictEqual(answer, cutGroup.answer)) {
        throw new Error(
          `the resumed rollouts of ${cutGroup.requestId} differ from an uninterrupted run (P6)`,
        );
      }
      exact = { requestId: cutGroup.requestId, rollouts: answer.sequences.length };
    }

    const scored = groups.map((group) => {
      const groupRewards = group.answer.sequences.map((rollout) => reward(rollout.tokens));
      return { group, groupRewards, advantages: groupAdvantages(groupRewards) };
    });
    rewards.push(mean(scored.flatMap((s) => s.groupRewards)));
    texts.push(RL_PROMPTS[0] + decode(groups[0]?.answer.sequences[0]?.tokens ?? []));
    const first = rewards[0] as number;
    if (round > 0)
      bar.update(round, `reward ${(rewards.at(-1) as number).toFixed(3)}  (started at ${first.toFixed(3)})`);
    if (round === ROUNDS) break;

    const input = rlPassInput(
      scored.flatMap(({ group, advantages }) =>
        group.answer.sequences.map((rollout, i) =>
          rolloutSequence(group.prompt, rollout, advantages[i] as number),
        ),
      ),
      LOSS_FN,
    );
    const pass = await client.forwardBackward({
      model_id: modelId,
      seq_id: ++seqId,
      forward_backward_input: input,
    });
    await client.optimStep({ model_id: modelId, seq_id: ++seqId, adam_params: ADAM });
    const saved = saveSampler(round + 1);
    await client.waitFor(pass.request_id, { timeoutMs: WAIT_MS });
    path = await saved;
  }
  bar.finish();
  const loopTime = seconds(loopStarted);

  say(
    `[4/5] Operator cut (cut#${pool}) written in round ${operatorCuts.join(', ') || '-'} while rollouts generated: ` +
      `${cuts.cut} rollouts cut mid-generation (prefixes saved), ${cuts.resumed} resumed from their prefixes`,
  );
  if (exact === undefined) throw new Error('no sample request was cut while its rollouts generated');
  const row = (
    await clients.doc.send(
      new GetCommand({
        TableName: resources.tables.futures,
        Key: { request_id: exact.requestId },
        ConsistentRead: true,
      }),
    )
  ).Item as FutureRow | undefined;
  say(
    `[5/5] ${exact.requestId} sampled again without a cut: the same tokens and logprobs for all ${exact.rollouts} rollouts ` +
      `(its future's prefix_ref: ${row?.prefix_ref?.cuts ?? 0} cut, ${row?.prefix_ref?.sequences.filter(Boolean).length ?? 0} prefixes)`,
  );

  const before = rewards[0] as number;
  const after = rewards.at(-1) as number;
  say();
  say('What happened:');
  const rows: [string, string][] = [
    [
      'reward',
      `${before.toFixed(3)} -> ${after.toFixed(3)} over ${ROUNDS} steps (${loopTime}; at least +${MIN_RISE} required)`,
    ],
    ['loss_fn', LOSS_FN],
    [
      'rollouts',
      `${(ROUNDS + 1) * RL_PROMPTS.length * GROUP} (${RL_PROMPTS.length} prompts x ${GROUP} per round, ${ROUNDS + 1} rounds)`,
    ],
    ['cut and resumed', `${Math.min(cuts.cut, cuts.resumed)} rollouts (${cuts.regenerated} started over)`],
    ['before', JSON.stringify(texts[0])],
    ['after', JSON.stringify(texts.at(-1))],
    ['prefixes', `${resources.tables.prefixes} (saved at the cut, read back on resume)`],
  ];
  const width = Math.max(...rows.map(([label]) => label.length));
  for (const [label, value] of rows) say(`  ${label.padEnd(width)}  ${value}`);
  say();
  say(`Stopping the local stack (total ${seconds(started)})...`);
  await stack.stop();
  if (after - before < MIN_RISE) {
    throw new Error(`the mean reward rose by ${(after - before).toFixed(3)}, less than ${MIN_RISE}`);
  }
  if (Math.min(cuts.cut, cuts.resumed) === 0) throw new Error('no rollout was cut and resumed');
  say('Stopped.');
}

runDemo('demo:rl', main);
