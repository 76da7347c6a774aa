import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import {
  GetQueueAttributesCommand,
  type Message,
  ReceiveMessageCommand,
  SendMessageCommand,
} from '@aws-sdk/client-sqs';
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { runWorkerProcess } from '../../bin/worker.js';
import {
  createWorkerHandler,
  handler as lambdaWorker,
  type WorkerHandlerOptions,
} from '../../functions/worker/handler.js';
import type { LocalRuntime } from '../../local/runtime/lambda-runtime.js';
import { awsClients } from '../../shared/aws/clients.js';
import { Limiter } from '../../shared/aws/limiter.js';
import type { Backend } from '../../shared/backend/backend.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { FUNCTION_IDS, type FunctionId } from '../../shared/base/topology.js';
import { TinkerClient } from '../../shared/client/tinker-client.js';
import { manifestFor } from '../../shared/domain/planning/work-item.js';
import type { FutureRow } from '../../shared/domain/records.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import type { WorkerOptions } from '../../shared/services/worker/index.js';
import { startCloudRuntime } from './runtime.js';
import { waitFor } from './wait.js';
import type { Answer, WorkerHarness } from './worker-harness.js';

/**
 * The whole pipeline on the local cloud for the end-to-end suites: the local runtime (API over HTTP,
 * scheduler on the futures/models streams, sweeper on its schedule and, when asked, the worker Lambda
 * on the SQS queue) over a worker harness's cloud, plus worker processes (`npm run worker`'s loop)
 * consuming the same queue.
 */

export interface ProcessWorker {
  /** Work items this worker handled (one verdict line each). */
  readonly lines: readonly string[];
  /** Stops polling; the work item in hand finishes first. */
  stop(): Promise<void>;
}

export interface PipelineOptions {
  /** Wire the worker Lambda to the queue (the real functions/worker handler). */
  readonly lambdaWorker: boolean;
  /** Runtime options of the worker Lambda (hooks, cut poll, slice size); the deployed handler's otherwise. */
  readonly lambdaWorkerOptions?: WorkerHandlerOptions['worker'];
  /** Extra variables for the functions (e.g. a short LEASE_SECONDS). */
  readonly env?: Readonly<Record<string, string>>;
  /** The backend of the worker Lambda and the worker processes (default: the reference backend). */
  readonly backend?: Backend;
}

export class Pipeline {
  /** SQS messages the worker Lambda was invoked with. */
  lambdaMessages = 0;
  readonly #workers = new Set<ProcessWorker>();
  /** What the worker Lambda waits for before it runs a batch (see `holdLambdaWorkerUntil`). */
  #lambdaHold: Promise<void> = Promise.resolve();

  private constructor(
    readonly harness: WorkerHarness,
    readonly runtime: LocalRuntime,
    readonly apiUrl: string,
    readonly backend: Backend | undefined,
  ) {}

  static async start(harness: WorkerHarness, options: PipelineOptions): Promise<Pipeline> {
    let pipeline: Pipeline | undefined;
    const worker =
      options.lambdaWorkerOptions === undefined && options.backend === undefined
        ? lambdaWorker
        : createWorkerHandler({
            ...(options.backend === undefined ? {} : { backend: options.backend }),
            ...(options.lambdaWorkerOptions === undefined ? {} : { worker: options.lambdaWorkerOptions }),
          });
    const countedWorker = async (event: SQSEvent, context: Context): Promise<SQSBatchResponse> => {
      if (pipeline) {
        pipeline.lambdaMessages += event.Records.length;
        await pipeline.#lambdaHold;
      }
      return worker(event, context);
    };
    const functions: FunctionId[] = options.lambdaWorker
      ? [...FUNCTION_IDS]
      : FUNCTION_IDS.filter((id) => id !== 'worker');
    const runtime = await startCloudRuntime(harness.cloud, {
      env: options.env,
      functions,
      handlers: options.lambdaWorker ? { worker: countedWorker } : {},
    });
    if (runtime.apiUrl === undefined) {
      await runtime.stop();
      throw new Error('the runtime serves no HTTP API');
    }
    pipeline = new Pipeline(harness, runtime, runtime.apiUrl, options.backend);
    return pipeline;
  }

  /**
   * The worker Lambda runs no batch until `released` settles (its messages stay in flight meanwhile),
   * so another consumer of the queue gets work items however the pollers' timing falls.
   */
  holdLambdaWorkerUntil(released: Promise<unknown>): void {
    this.#lambdaHold = released.then(
      () => {},
      () => {},
    );
  }

  get queueUrl(): string {
    return this.harness.cloud.names.queueUrls.work;
  }

  /** A Tinker client for a new API key of `tenant`. */
  async client(tenant: string): Promise<TinkerClient> {
    const apiKey = await createApiKey(
      this.harness.cloud.clients.doc,
      this.harness.cloud.names.tables.registry,
      tenant,
    );
    return new TinkerClient({ baseUrl: this.apiUrl, apiKey });
  }

  /**
   * A worker process loop (bin/worker.ts) on the work queue, in this process, under the
   * worker's grants and environment (what `ExternalWorkerPolicyArn` and `WorkerEnv` give a host).
   */
  startProcessWorker(worker: Omit<WorkerOptions, 'backend' | 'signal'> = {}): ProcessWorker {
    const stop = new AbortController();
    const lines: string[] = [];
    const running = this.runtime.runAs('worker', () =>
      runWorkerProcess({
        queueUrl: this.queueUrl,
        backend: this.backend ?? new ReferenceBackend(),
        sqs: awsClients().sqs,
        stop: stop.signal,
        waitTimeSeconds: 1,
        worker,
        print: (line) => lines.push(line),
      }),
    );
    const handle: ProcessWorker = {
      lines,
      stop: async () => {
        stop.abort();
        await running;
        this.#workers.delete(handle);
      },
    };
    this.#workers.add(handle);
    return handle;
  }

  async stop(): Promise<void> {
    await Promise.all([...this.#workers].map((worker) => worker.stop()));
    await this.runtime.stop();
  }

  /** Messages on the work queue, visible or in flight. */
  async queueDepth(): Promise<number> {
    const answer = await this.harness.cloud.clients.sqs.send(
      new GetQueueAttributesCommand({
        QueueUrl: this.queueUrl,
        AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
      }),
    );
    const attributes = answer.Attributes ?? {};
    return (
      Number(attributes.ApproximateNumberOfMessages ?? 0) +
      Number(attributes.ApproximateNumberOfMessagesNotVisible ?? 0)
    );
  }

  /** Receives one work message as a worker would, keeping it invisible for `visibilitySeconds`. */
  async receiveWork(visibilitySeconds: number): Promise<Message> {
    return waitFor(
      'a work message',
      async () => {
        const answer = await this.harness.cloud.clients.sqs.send(
          new ReceiveMessageCommand({
            QueueUrl: this.queueUrl,
            MaxNumberOfMessages: 1,
            WaitTimeSeconds: 1,
            VisibilityTimeout: visibilitySeconds,
          }),
        );
        return answer.Messages?.[0];
      },
      20_000,
      0,
    );
  }

  /** Sends the manifests of written work items again, as a duplicate SQS delivery would. */
  async resendManifests(workItemIds: readonly string[]): Promise<void> {
    for (const id of workItemIds) {
      await this.harness.cloud.clients.sqs.send(
        new SendMessageCommand({ QueueUrl: this.queueUrl, MessageBody: JSON.stringify(manifestFor(id)) }),
      );
    }
  }

  /** Ids of the work items the scheduler wrote, oldest first. */
  async workItemIds(): Promise<string[]> {
    const ids: string[] = [];
    let token: string | undefined;
    do {
      const page = await this.harness.cloud.clients.s3.send(
        new ListObjectsV2Command({
          Bucket: this.harness.cloud.names.bucket,
          Prefix: 'work/',
          ContinuationToken: token,
        }),
      );
      for (const object of page.Contents ?? []) {
        const match = /^work\/(.+)\.json$/.exec(object.Key ?? '');
        if (match?.[1]) ids.push(match[1]);
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return ids.sort();
  }
}

/** Waits until every future is completed or failed (R1's "every future reaches a terminal state"). */
export async function waitTerminal(
  harness: WorkerHarness,
  ids: readonly string[],
  timeoutMs: number,
): Promise<void> {
  const pending = new Set(ids);
  await waitFor(
    `${ids.length} futures to end`,
    async () => {
      await Promise.all(
        [...pending].map(async (id) => {
          const row = (await harness.future(id)) as FutureRow | undefined;
          if (row !== undefined && row.status !== 'pending') pending.delete(id);
        }),
      );
      return pending.size === 0;
    },
    timeoutMs,
    250,
  ).catch((error: unknown) => {
    throw new Error(`${(error as Error).message}; still pending: ${[...pending].slice(0, 10).join(', ')}`);
  });
}

/**
 * What retrieve_future answers over HTTP for each submission, asked by the tenant that submitted it;
 * a failure reduced to its category, as the oracle states it.
 */
export async function answersOverHttp(
  harness: WorkerHarness,
  clients: ReadonlyMap<string, TinkerClient>,
): Promise<Map<string, Answer>> {
  const limiter = new Limiter(8);
  const answered = await Promise.all(
    harness.submissions.map((submission) =>
      limiter.run(async (): Promise<[string, Answer]> => {
        const row = (await harness.future(submission.request_id)) as FutureRow;
        const client = clients.get(row.tenant);
        if (client === undefined) throw new Error(`no client for tenant ${row.tenant}`);
        const answer = await client.raw('POST', '/api/v1/retrieve_future', {
          request_id: submission.request_id,
        });
        if (answer.status !== 200) throw new Error(`retrieve_future answered ${answer.status}`);
        const body = answer.body as Record<string, unknown>;
        return [
          submission.request_id,
          'error' in body && 'category' in body ? { category: body.category } : body,
        ];
      }),
    ),
  );
  return new Map(answered);
}
