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

/**
 * Starts DynamoDB Local (a guarded JVM, see `watchdog.ts`) and fauxqs (in this process) on free
 * loopback ports and resolves once both answer. Nothing is provisioned: see `resources.ts`.
 */
export async function startLocalCloud(): Promise<LocalCloud> {
  const [dynamo, fauxqs] = await Promise.allSettled([startDynamoDbLocal(), startFauxqsServer()]);
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
