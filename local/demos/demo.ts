import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { TinkerClient } from '../../shared/client/tinker-client.js';
import { type CheckpointNameRecord, type ModelRow, registryKey } from '../../shared/domain/records.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import { DEFAULT_BASE_MODEL as BASE_MODEL } from '../../shared/services/api/capabilities.js';
import { type LocalStack, startLocalStack } from '../runtime/stack.js';
import { decode, encode, PHRASES, PROMPT, phraseDatum } from './parts/dataset.js';
import { ProgressBar } from './parts/progress.js';
import { runDemo, say, seconds } from './parts/script.js';

/**
 * `npm run demo`: brings up the local stack (the same one `npm start` runs), then, as any Tinker
 * client would, over HTTP: creates a LoRA model on the reference backend, trains it for a few steps
 * on a built-in dataset, saves a sampler checkpoint, samples from it, prints what happened and where,
 * and stops everything.
 */

const TENANT = 'demo';
const STEPS = 30;
const RANK = 32;
const ADAM = { learning_rate: 0.05 } as const;
const CHECKPOINT_NAME = 'demo-final';
const SAMPLING = { max_tokens: 24, temperature: 0.5, top_k: 3, seed: 7 } as const;
const WAIT_MS = 30_000;

interface PassResult {
  readonly metrics: Record<string, number>;
}
interface SampleAnswer {
  readonly sequences: { readonly tokens: number[] }[];
}

async function sampleText(client: TinkerClient, samplingSessionId: string): Promise<string> {
  const future = await client.asample({
    sampling_session_id: samplingSessionId,
    seq_id: 0,
    num_samples: 1,
    prompt: { chunks: [{ type: 'encoded_text', tokens: encode(PROMPT) }] },
    sampling_params: SAMPLING,
  });
  const answer = await client.waitFor<SampleAnswer>(future.request_id, { timeoutMs: WAIT_MS });
  return PROMPT + decode(answer.sequences[0]?.tokens ?? []);
}

async function main(keep: (stack: LocalStack) => LocalStack): Promise<void> {
  const started = performance.now();
  say('tinker-serverless demo: the local stack, driven through its HTTP API like any Tinker client.');
  say();
  const stack = keep(await startLocalStack({ prefix: 'demo', streamPollIntervalMs: 50 }));
  const { apiUrl, resources, clients } = stack;
  say(`[1/6] Local stack up in ${seconds(started)}: DynamoDB Local + fauxqs + api/scheduler/worker/sweeper`);
  say(`      API base URL ${apiUrl}`);

  const apiKey = await createApiKey(clients.doc, resources.tables.registry, TENANT);
  const client = new TinkerClient({ baseUrl: apiUrl, apiKey });
  say(
    `[2/6] API key created for tenant "${TENANT}" (only its hash is stored, in ${resources.tables.registry})`,
  );

  const { session_id } = await client.createSession({ tags: ['demo'] });
  const created = await client.createModel({
    session_id,
    model_seq_id: 0,
    base_model: BASE_MODEL,
    lora_config: { rank: RANK, seed: 1 },
  });
  await client.waitFor(created.request_id, { timeoutMs: WAIT_MS });
  const modelId = created.model_id;
  say(`[3/6] Model ${modelId} created: ${BASE_MODEL} with a rank-${RANK} LoRA adapter`);

  say(
    `[4/6] Training on ${PHRASES.length} phrases: ${STEPS} steps of forward_backward + optim_step ` +
      `(cross-entropy, Adam lr ${ADAM.learning_rate})`,
  );
  const data = PHRASES.map(phraseDatum);
  const bar = new ProgressBar(STEPS);
  const losses: number[] = [];
  let seqId = 0;
  const trainStarted = performance.now();
  bar.start('loss -');
  // Pipelined like the Tinker cookbook's loop: step i+1 is submitted before step i's result is read,
  // so the scheduler can plan it the moment step i commits.
  const submitStep = async (): Promise<string> => {
    const pass = await client.forwardBackward({
      model_id: modelId,
      seq_id: ++seqId,
      forward_backward_input: { data, loss_fn: 'cross_entropy' },
    });
    await client.optimStep({ model_id: modelId, seq_id: ++seqId, adam_params: ADAM });
    return pass.request_id;
  };
  let next = await submitStep();
  for (let step = 1; step <= STEPS; step++) {
    const current = next;
    if (step < STEPS) next = await submitStep();
    const result = await client.waitFor<PassResult>(current, { timeoutMs: WAIT_MS });
    const loss = result.metrics['loss:mean'] ?? Number.NaN;
    losses.push(loss);
    bar.update(step, `loss ${loss.toFixed(3)}  (started at ${(losses[0] ?? loss).toFixed(3)})`);
  }
  bar.finish();
  const trainTime = seconds(trainStarted);

  const saved = await client.saveWeightsForSampler({
    model_id: modelId,
    seq_id: ++seqId,
    path: CHECKPOINT_NAME,
  });
  const { path } = await client.waitFor<{ path: string }>(saved.request_id, { timeoutMs: WAIT_MS });
  say(`[5/6] Sampler checkpoint saved: ${path}`);

  const trained = await client.createSamplingSession({
    session_id,
    sampling_session_seq_id: 0,
    model_path: path,
  });
  const base = await client.createSamplingSession({
    session_id,
    sampling_session_seq_id: 1,
    base_model: BASE_MODEL,
  });
  const [trainedText, baseText] = await Promise.all([
    sampleText(client, trained.sampling_session_id),
    sampleText(client, base.sampling_session_id),
  ]);
  say(
    `[6/6] Sampled from the checkpoint (prompt "${PROMPT}", seed ${SAMPLING.seed}, temperature ${SAMPLING.temperature}, top_k ${SAMPLING.top_k}):`,
  );
  say(`      trained: "${trainedText}"`);
  say(`      base:    "${baseText}"   (the untrained base model, same prompt and seed)`);

  const get = async <T>(table: string, key: Record<string, string>) =>
    (await clients.doc.send(new GetCommand({ TableName: table, Key: key, ConsistentRead: true }))).Item as
      | T
      | undefined;
  const model = await get<ModelRow>(resources.tables.models, { model_id: modelId });
  const checkpoint = await get<CheckpointNameRecord>(resources.tables.registry, {
    pk: registryKey.checkpointName(modelId, 'sampler', CHECKPOINT_NAME),
  });
  const workItems = await clients.s3.send(
    new ListObjectsV2Command({ Bucket: resources.bucket, Prefix: 'work/' }),
  );
  const s3 = (key: string | undefined) => (key === undefined ? '-' : `s3://${resources.bucket}/${key}`);
  const first = losses[0] ?? Number.NaN;
  const last = losses.at(-1) ?? Number.NaN;

  say();
  say('What happened, and where:');
  const rows: [string, string][] = [
    ['API base URL', apiUrl],
    [
      'tenant / model',
      `${TENANT} / ${modelId} (seq ${model?.applied_through ?? '?'} applied, epoch ${model?.epoch ?? '?'})`,
    ],
    ['loss', `${first.toFixed(3)} -> ${last.toFixed(3)} over ${STEPS} steps (${trainTime})`],
    ['checkpoint', path],
    ['checkpoint blob', s3(checkpoint?.blob_key)],
    ['model state', s3(model?.state_ref)],
    [
      'work items',
      `${workItems.KeyCount ?? 0} under ${s3('work/')}, each announced on queue ${resources.queues.work}`,
    ],
    ['request payloads', s3('payloads/')],
    ['futures', `${resources.tables.futures} (GSI live: what the scheduler plans from)`],
    ['models', `${resources.tables.models} (epoch, applied_through, state_ref, lease)`],
    [
      'registry',
      `${resources.tables.registry} (API key hash, sessions, seq counters, idempotency, checkpoint names)`,
    ],
  ];
  const width = Math.max(...rows.map(([label]) => label.length));
  for (const [label, value] of rows) say(`  ${label.padEnd(width)}  ${value}`);
  say();
  say(`Stopping the local stack (total ${seconds(started)})...`);
  await stack.stop();
  say('Stopped. To keep a stack running and point the Tinker SDK at it, run `npm start`.');
}

runDemo('demo', main);
