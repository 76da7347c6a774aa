import { PutObjectCommand } from '@aws-sdk/client-s3';
import { DeleteMessageBatchCommand, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import type { AwsClients } from '../../shared/aws/clients.js';
import { transactWrite } from '../../shared/aws/transact.js';
import { config, resetConfig } from '../../shared/base/config.js';
import { mintId, mintRequestId, mintRunId } from '../../shared/base/ids.js';
import { logger } from '../../shared/base/logger.js';
import { storageKeys } from '../../shared/base/storage-keys.js';
import {
  manifestFor,
  type WorkItem,
  type WorkManifest,
  workManifestSchema,
} from '../../shared/domain/planning/work-item.js';
import {
  baseModelId,
  type FutureRow,
  type ModelRow,
  registryKey,
  type SamplingSessionRecord,
} from '../../shared/domain/records.js';
import type { IntakeStore } from '../../shared/repositories/intake/run-intake.js';
import { submitSample } from '../../shared/repositories/intake/sampling.js';
import { submitCreateModel, submitTrainingStep } from '../../shared/repositories/intake/training.js';
import { readModelRow as readModelRowStrongly } from '../../shared/repositories/models.js';
import { serializePayload } from '../../shared/repositories/payloads.js';
import { requireSeqCounter } from '../../shared/repositories/seq-counters.js';
import { resolveTables } from '../../shared/repositories/tables.js';
import type { OptimStepPayload, PassPayload, SamplePayload } from '../../shared/services/api/payloads.js';
import { runTick } from '../../shared/services/scheduler/tick.js';
import {
  commitToken,
  modelCommitTransaction,
  sampleCommitTransaction,
} from '../../shared/services/worker/commit-items.js';
import { loadWorkItem } from '../../shared/services/worker/load-work-item.js';
import { setupTestCloud, type TestCloud } from './cloud.js';

/**
 * Shared by the scheduler and sweeper suites: a fresh cloud with the process pointed at it, intake
 * through the real repositories (so rows, counters and payloads are what the API writes), and a fake
 * worker that reads work items and commits them the way E4 prescribes. S5's coalescing window is off
 * unless `env` sets COALESCE_WINDOW_MS: these suites count what one tick reads and dispatches right
 * after a submit, which a window would turn into a wait and a second read on a fast enough machine
 * (test/integration/scheduler-coalesce.test.ts covers the window).
 */
export async function schedulerCloud(env: Record<string, string> = {}): Promise<TestCloud> {
  const cloud = await setupTestCloud();
  cloud.applyEnv();
  logger.setLogLevel('WARN');
  env = { COALESCE_WINDOW_MS: '0', ...env };
  Object.assign(process.env, env);
  Object.assign(cloud.env, env);
  resetConfig();
  return cloud;
}

export const TENANT = 'tenant-sched';
const SESSION = 'sess-sched';

export type StepType = 'forward' | 'forward_backward' | 'optim_step';

export function stepPayload(type: StepType, seqId: number, size = 1): PassPayload | OptimStepPayload {
  if (type === 'optim_step') {
    return {
      request_type: 'optim_step',
      seq_id: seqId,
      adam_params: {
        learning_rate: 1e-3,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-12,
        weight_decay: 0,
        grad_clip_norm: 0,
      },
    };
  }
  const tokens = Array.from({ length: 4 * size }, (_, index) => (seqId * 31 + index) % 250);
  return {
    request_type: type,
    seq_id: seqId,
    input: {
      data: [
        {
          model_input: { chunks: [{ type: 'encoded_text', tokens }] },
          loss_fn_inputs: {
            target_tokens: { data: tokens.map((t) => t + 1), dtype: 'int64', shape: [tokens.length] },
          },
        },
      ],
      loss_fn: 'cross_entropy',
    },
  };
}

let modelSeqId = 0;

/** What the API's edge would pass the intake, from the environment the test applied. */
function intakeStore(clients: AwsClients): IntakeStore {
  return { clients, tables: resolveTables(['futures', 'models', 'registry']), bucket: config().bucket };
}

/** A model through intake (create_model is seq 1, pending). */
export async function createModel(clients: AwsClients): Promise<{ modelId: string; requestId: string }> {
  const now = Date.now();
  const modelId = mintId('model', now);
  const requestId = mintRequestId(now);
  const payload = serializePayload({
    request_type: 'create_model',
    session_id: SESSION,
    base_model: 'reference/byte-lm',
    lora_config: { rank: 4, train_unembed: true, train_mlp: true, train_attn: true },
  });
  await submitCreateModel(
    {
      requestId,
      modelId,
      tenant: TENANT,
      sessionId: SESSION,
      modelSeqId: modelSeqId++,
      baseModel: 'reference/byte-lm',
      loraConfig: { rank: 4 },
      payload,
      now,
    },
    intakeStore(clients),
  );
  return { modelId, requestId };
}

const lastSeqId = new Map<string, number>();

/** The next training step of a model through intake; returns its request id and what it stored. */
export async function submitStep(
  clients: AwsClients,
  modelId: string,
  type: StepType,
  size = 1,
  requestId: string = mintRequestId(),
): Promise<{ requestId: string; payload: unknown }> {
  const seqId = (lastSeqId.get(modelId) ?? 0) + 1;
  lastSeqId.set(modelId, seqId);
  const now = Date.now();
  const payload = stepPayload(type, seqId, size);
  const serialized = serializePayload(payload);
  const counter = await requireSeqCounter(clients.doc, config().table('registry'), modelId, TENANT);
  await submitTrainingStep(
    {
      requestId,
      tenant: TENANT,
      modelId,
      seqId,
      requestType: type,
      tokens: 4 * size,
      payload: serialized,
      counter,
      now,
    },
    intakeStore(clients),
  );
  return { requestId, payload: JSON.parse(serialized.body as string) as unknown };
}

/** A sampling session on a model's checkpoint (content id given), or on the bare base model. */
export function samplingSession(target?: { modelId: string; checkpointId: string }): SamplingSessionRecord {
  const id = mintId('sampling');
  return {
    pk: registryKey.samplingSession(id),
    sampling_session_id: id,
    tenant: TENANT,
    session_id: SESSION,
    model_id: target?.modelId ?? baseModelId('reference/byte-lm'),
    base_model: 'reference/byte-lm',
    ...(target === undefined ? {} : { checkpoint_id: target.checkpointId }),
    created_at: Date.now(),
  };
}

const sampleSeq = new Map<string, number>();

export async function submitSampleRequest(
  clients: AwsClients,
  session: SamplingSessionRecord,
): Promise<{ requestId: string; payload: unknown }> {
  const seqId = (sampleSeq.get(session.sampling_session_id) ?? 0) + 1;
  sampleSeq.set(session.sampling_session_id, seqId);
  const now = Date.now();
  const requestId = mintRequestId(now);
  const payload: SamplePayload = {
    request_type: 'sample',
    sampling_session_id: session.sampling_session_id,
    seq_id: seqId,
    base_model: session.base_model,
    ...(session.checkpoint_id === undefined
      ? {}
      : { checkpoint: { model_id: session.model_id, content_id: session.checkpoint_id } }),
    num_samples: 1,
    prompt: { chunks: [{ type: 'encoded_text', tokens: [1, 2, 3] }] },
    sampling_params: { max_tokens: 4, temperature: 1, top_k: -1, top_p: 1, seed: seqId },
    prompt_logprobs: false,
    topk_prompt_logprobs: 0,
  };
  const serialized = serializePayload(payload);
  await submitSample(
    {
      requestId,
      tenant: TENANT,
      samplingSession: session,
      seqId,
      tokens: 7,
      payload: serialized,
      now,
      sequences: {
        pk: registryKey.sampleSequences(requestId),
        tenant: TENANT,
        request_id: requestId,
        sampling_session_id: session.sampling_session_id,
        base_model: session.base_model,
        num_samples: 1,
        prompt_tokens: 3,
        max_tokens: 4,
        created_at: now,
      },
    },
    intakeStore(clients),
  );
  return { requestId, payload: JSON.parse(serialized.body as string) as unknown };
}

export async function readWorkItem(clients: AwsClients, workItemId: string): Promise<WorkItem> {
  return loadWorkItem(manifestFor(workItemId), clients.s3, config().bucket);
}

/** Every manifest waiting in the work queue (received and deleted). */
export async function drainManifests(clients: AwsClients): Promise<WorkManifest[]> {
  const manifests: WorkManifest[] = [];
  const QueueUrl = config().workQueueUrl;
  for (;;) {
    const answer = await clients.sqs.send(
      new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 0 }),
    );
    const messages = answer.Messages ?? [];
    if (messages.length === 0) return manifests;
    for (const message of messages) manifests.push(workManifestSchema.parse(JSON.parse(message.Body ?? '')));
    await clients.sqs.send(
      new DeleteMessageBatchCommand({
        QueueUrl,
        Entries: messages.map((message, index) => ({
          Id: String(index),
          ReceiptHandle: message.ReceiptHandle,
        })),
      }),
    );
  }
}

/** The work items the queue names, read from S3, in the order received. */
export async function drainWorkItems(clients: AwsClients): Promise<WorkItem[]> {
  const manifests = await drainManifests(clients);
  return Promise.all(manifests.map((manifest) => readWorkItem(clients, manifest.work_item_id)));
}

/**
 * What a worker's commit does (E4), minus execution: per model the worker's own transaction
 * (`modelCommitTransaction`), which moves the model row to the work item's last seq on condition it
 * still holds this work item and ends every step's future (a fail step with its error); per sample
 * its own commit (the future and its claim). A zombie's commit fails its condition and returns false.
 */
export async function commitWorkItem(clients: AwsClients, workItem: WorkItem): Promise<boolean> {
  const tables = resolveTables(['futures', 'models', 'registry']);
  const now = Date.now();
  const run = mintRunId();
  let allCommitted = true;
  for (const model of workItem.models) {
    const last = model.steps.at(-1)!.seq;
    const stateRef = storageKeys.modelState(model.model_id, model.epoch, run);
    await clients.s3.send(
      new PutObjectCommand({ Bucket: config().bucket, Key: stateRef, Body: `state ${model.epoch}` }),
    );
    const commit = modelCommitTransaction(
      {
        model_id: model.model_id,
        inflight: model.inflight,
        run,
        base_applied_through: model.base_applied_through,
        applied_through: last,
        state_ref: stateRef,
        unloaded: false,
        now,
        steps: model.steps.map((step) => ({
          request_id: step.request_id,
          outcome: step.fail
            ? { status: 'failed', error: step.fail }
            : { status: 'completed', result: { ran: step.request_type, epoch: model.epoch } },
        })),
      },
      tables,
    );
    const outcome = await transactWrite(commit.items, commitToken(model.inflight, run, 0), clients.doc);
    if (!outcome.ok) allCommitted = false;
  }
  for (const sample of workItem.samples) {
    const commit = sampleCommitTransaction(
      sample.request_id,
      sample.claim_token,
      run,
      sample.fail === undefined
        ? { status: 'completed', result: { sampled: true } }
        : { status: 'failed', error: sample.fail },
      now,
      tables,
    );
    await transactWrite(commit.items, commitToken(sample.request_id, sample.claim_token, run), clients.doc);
  }
  return allCommitted;
}

/** A worker handler for the local runtime: commits each work item it receives and records it. */
export function fakeWorker(clients: AwsClients, seen: WorkItem[]) {
  return async (event: SQSEvent): Promise<SQSBatchResponse> => {
    for (const record of event.Records) {
      const manifest = workManifestSchema.parse(JSON.parse(record.body));
      const workItem = await readWorkItem(clients, manifest.work_item_id);
      seen.push(workItem);
      await commitWorkItem(clients, workItem);
    }
    return { batchItemFailures: [] };
  };
}

export async function readModelRow(clients: AwsClients, modelId: string): Promise<ModelRow> {
  return (await readModelRowStrongly(clients.doc, config().table('models'), modelId)) as ModelRow;
}

export async function readFutureRow(clients: AwsClients, requestId: string): Promise<FutureRow> {
  const answer = await clients.doc.send(
    new GetCommand({
      TableName: config().table('futures'),
      Key: { request_id: requestId },
      ConsistentRead: true,
    }),
  );
  return answer.Item as FutureRow;
}

/** Request ids of a work item's training steps, model by model, in seq order. */
export function stepIds(workItem: WorkItem): Record<string, string[]> {
  return Object.fromEntries(
    workItem.models.map((model) => [model.model_id, model.steps.map((s) => s.request_id)]),
  );
}

/** A model whose create_model was dispatched by a tick and committed: idle at planned = applied = 1. */
export async function readyModel(clients: AwsClients): Promise<string> {
  const { modelId } = await createModel(clients);
  await runTick();
  for (const workItem of await drainWorkItems(clients)) await commitWorkItem(clients, workItem);
  return modelId;
}
