import { GetQueueAttributesCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { AwsClients } from '../../aws/clients.js';
import type { Config } from '../../base/config.js';
import { planLimitsFrom } from '../../domain/planning/limits.js';
import { scanLiveIndex } from '../../repositories/live-index.js';
import { readModels } from '../../repositories/models.js';
import { readCutRequest, readDrain } from './control-store.js';
import { type PoolQueueStatus, type QueueDepth, queueStatus } from './queue-status.js';

/** Clients and configuration come from the reader's edge: the CLI, the api's status route, `npm start`'s page. */
export interface ReadPoolStatusOptions {
  /** Default: the configured pool (`POOL`). */
  readonly pool?: string;
  readonly now?: () => number;
  readonly clients: Pick<AwsClients, 'doc' | 'sqs'>;
  readonly config: Config;
}

/**
 * Reads a pool's queue picture the way a tick reads its snapshot (R5): one scan of the `live` index
 * (every shard), the named model rows strongly consistent, plus the pool's controls and the depths of
 * the work queue and both dead-letter queues (their URLs are required config: see `Config.queueUrl`).
 * Reads no payload and writes nothing, so it is safe to poll.
 */
export async function readPoolStatus(options: ReadPoolStatusOptions): Promise<PoolQueueStatus> {
  const { config: settings, clients } = options;
  const pool = options.pool ?? settings.pool;
  const { doc } = clients;
  // Every variable is read before any request starts: a missing one fails the read, naming it.
  const futuresTable = settings.table('futures');
  const registryTable = settings.table('registry');
  const modelsTable = settings.table('models');
  const workQueueUrl = settings.workQueueUrl;
  const workDlqUrl = settings.queueUrl('workDlq');
  const streamDlqUrl = settings.queueUrl('streamDlq');
  const [scan, drain, cut, workQueue, workDlq, streamDlq] = await Promise.all([
    scanLiveIndex(doc, futuresTable, pool, settings.liveShards),
    readDrain(doc, registryTable, pool),
    readCutRequest(doc, registryTable, pool, true),
    readQueueDepth(clients.sqs, workQueueUrl),
    readQueueDepth(clients.sqs, workDlqUrl),
    readQueueDepth(clients.sqs, streamDlqUrl),
  ]);
  // Base-model samples (`base:<name>`) have no model row to read.
  const modelIds = new Set(scan.rows.map((row) => row.model_id).filter((id) => !id.startsWith('base:')));
  const models = await readModels(doc, modelsTable, modelIds);
  const now = (options.now ?? Date.now)();
  return queueStatus({
    pool,
    now,
    live: scan.rows,
    models,
    leaseMs: settings.tunables.leaseSeconds * 1000,
    limits: planLimitsFrom(settings.tunables),
    ...(drain === undefined ? {} : { drain }),
    ...(cut === undefined ? {} : { cut }),
    workQueue,
    deadLetters: { work_dlq: workDlq, stream_dlq: streamDlq },
  });
}

export async function readQueueDepth(sqs: SQSClient, queueUrl: string): Promise<QueueDepth> {
  const answer = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
    }),
  );
  const attributes = answer.Attributes ?? {};
  return {
    visible: Number(attributes.ApproximateNumberOfMessages ?? 0),
    in_flight: Number(attributes.ApproximateNumberOfMessagesNotVisible ?? 0),
  };
}
