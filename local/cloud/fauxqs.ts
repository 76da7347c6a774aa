import type { AddressInfo } from 'node:net';
import { buildApp } from 'fauxqs';
import { wakeLongPollsAsManyAsReady } from './fauxqs-long-polls.js';
import { persistentFauxqsStores } from './fauxqs-persistence.js';

export interface Fauxqs {
  /** S3 and SQS share this endpoint. */
  readonly endpoint: string;
  stop(): Promise<void>;
}

/**
 * fauxqs names queues `http://sqs.<region>.<host>:<port>/...`, and the SDK's SQS client sends each
 * request to its QueueUrl's origin whenever that differs from its configured endpoint (unless
 * `useQueueUrlAsEndpoint` is off). `sqs.us-east-1.localhost` does not resolve everywhere, so the host
 * carries a userinfo part: `http://sqs.us-east-1.queue@127.0.0.1:<port>/...` has exactly the
 * endpoint's origin, and every client (explicit endpoint or AWS_ENDPOINT_URL_SQS) reaches fauxqs.
 */
const QUEUE_URL_HOST = 'queue@127.0.0.1';

/**
 * Starts fauxqs in this process, listening on a free port of 127.0.0.1 only. With `dataDir`, its S3
 * objects and SQS messages are kept there and restored from there (`fauxqs-persistence.ts`). Long
 * polls end as SQS's do: one waiting receive per message that arrives (`fauxqs-long-polls.ts`).
 */
export async function startFauxqsServer(options: { readonly dataDir?: string } = {}): Promise<Fauxqs> {
  await wakeLongPollsAsManyAsReady();
  const stores = options.dataDir === undefined ? undefined : await persistentFauxqsStores(options.dataDir);
  const app = buildApp({ logger: false, host: QUEUE_URL_HOST, ...(stores === undefined ? {} : { stores }) });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as AddressInfo;
  return { endpoint: `http://127.0.0.1:${port}`, stop: () => app.close() };
}
