import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { startDynamoDbLocal } from './dynamodb-local.js';
import { startFauxqsServer } from './fauxqs.js';

/** Where the local services answer. S3 and SQS share fauxqs's single endpoint. */
export interface CloudEndpoints {
  readonly dynamodb: string;
  readonly s3: string;
  readonly sqs: string;
}

export interface LocalCloud {
  readonly endpoints: CloudEndpoints;
  /** Pid of the DynamoDB Local JVM (the only child process the cloud starts). */
  readonly dynamodbPid: number;
  /** Stops both services; safe to call more than once. */
  stop(): Promise<void>;
}

export interface LocalCloudOptions {
  /**
   * Keep everything under this directory and restore it on the next start: DynamoDB Local's file
   * mode in `dynamodb/`, S3 objects and SQS messages in `s3/` and `sqs/`. Default: all in memory.
   */
  readonly dataDir?: string;
}

/**
 * Starts DynamoDB Local (a guarded JVM, see `watchdog.ts`) and fauxqs (in this process) on free
 * ports of 127.0.0.1 only and resolves once both answer. Nothing is provisioned: see `resources.ts`.
 */
export async function startLocalCloud(options: LocalCloudOptions = {}): Promise<LocalCloud> {
  const { dataDir } = options;
  if (dataDir !== undefined) mkdirSync(join(dataDir, 'dynamodb'), { recursive: true });
  const [dynamo, fauxqs] = await Promise.allSettled([
    startDynamoDbLocal(dataDir === undefined ? {} : { dbPath: join(dataDir, 'dynamodb') }),
    startFauxqsServer(dataDir === undefined ? {} : { dataDir }),
  ]);
  if (dynamo.status === 'rejected' || fauxqs.status === 'rejected') {
    if (dynamo.status === 'fulfilled') await dynamo.value.stop();
    if (fauxqs.status === 'fulfilled') await fauxqs.value.stop();
    throw dynamo.status === 'rejected' ? dynamo.reason : (fauxqs as PromiseRejectedResult).reason;
  }
  let stopping: Promise<void> | undefined;
  return {
    endpoints: { dynamodb: dynamo.value.endpoint, s3: fauxqs.value.endpoint, sqs: fauxqs.value.endpoint },
    dynamodbPid: dynamo.value.pid,
    stop: () => {
      stopping ??= Promise.all([dynamo.value.stop(), fauxqs.value.stop()]).then(() => undefined);
      return stopping;
    },
  };
}
