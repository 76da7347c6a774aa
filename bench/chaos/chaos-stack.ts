import { ChangeMessageVisibilityCommand, SetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import type { Context, ScheduledEvent } from 'aws-lambda';
import { handler as sweeperHandler } from '../../functions/sweeper/handler.js';
import type { ProvisionedResources } from '../../local/cloud/resources.js';
import { RolloutCuts } from '../../local/demos/parts/rollout-cuts.js';
import type { HandlerOverrides, LocalRuntime } from '../../local/runtime/lambda-runtime.js';
import { type AwsClients, awsClients } from '../../shared/aws/clients.js';
import type { Backend } from '../../shared/backend/backend.js';
import { LANE_QUEUE_IDS, laneQueueId } from '../../shared/base/topology.js';
import type { ModelRow } from '../../shared/domain/records.js';
import { requestCut } from '../../shared/services/ops/control-store.js';
import { createSchedulerHandler, type SchedulerEvent } from '../../shared/services/scheduler/invocation.js';
import type { WorkerEvent } from '../../shared/services/worker/index.js';
import { CrashPoints, createFaultInjector, type FaultInjector } from '../../test/support/faults.js';
import { DeliveryChaos } from './deliveries.js';
import { DeliveryLog } from './delivery-log.js';
import { CommitEffects } from './effects.js';
import { LambdaWorker } from './lambda-worker.js';
import { type ChaosSettings, CRASH_ARMING, chaosEnv, FAULT_RATES, LAMBDA_TIMEOUT_POINT } from './plan.js';
import { ProcessFleet } from './process-fleet.js';
import { Processes } from './processes.js';
import { ZombieAgent } from './zombie.js';

/**
 * The local stack with the chaos wired in: the runtime (HTTP API, stream and queue triggers, the
 * schedule) with the scheduler, sweeper and worker handlers each run as a simulated process; the
 * handlers' shared SDK clients with the death check, the fault injector and the observers of what
 * really landed; crash points routed to the production hook; worker processes beside the worker
 * Lambda (some of whose invocations time out or turn zombie); a frequent sweeper. `calm()` turns
 * every injection off, `stop()` stops it all.
 */

export interface ChaosTarget {
  /** The functions' environment for the provisioned resources (names, endpoints, region). */
  readonly env: Readonly<Record<string, string>>;
  /** Fault-free clients for the harness's own reads and checks. */
  readonly admin: AwsClients;
  readonly names: ProvisionedResources;
  /** CPU seconds the DynamoDB Local JVM used so far, when the target knows its pid. */
  readonly cpuSeconds?: () => number;
  startRuntime(options: {
    readonly handlers: HandlerOverrides;
    readonly env: Readonly<Record<string, string>>;
  }): Promise<LocalRuntime>;
}

export class ChaosStack {
  readonly log = new DeliveryLog();
  readonly processes = new Processes();
  readonly harnessCrashes: Record<string, number> = {};
  readonly worker = { sample_cuts: 0, sample_resumes: 0 };
  /** The operator's cuts, landed while samples generate (P1-P6 under the chaos). */
  readonly cuts = new RolloutCuts();
  #cutting: Promise<void> = Promise.resolve();
  #cutsOn = false;
  readonly sweeps = { runs: 0, failed: 0 };
  readonly injector: FaultInjector;
  readonly points: CrashPoints;
  readonly effects: CommitEffects;
  readonly deliveries: DeliveryChaos;
  readonly lambda: LambdaWorker;
  readonly fleet: ProcessFleet;
  readonly zombies: ZombieAgent;
  #runtime: LocalRuntime | undefined;
  #undo: (() => void)[] = [];
  #sweeping = false;
  #sweeper: Promise<void> = Promise.resolve();
  #stopped: Promise<void> | undefined;

  constructor(
    readonly target: ChaosTarget,
    readonly settings: ChaosSettings,
    readonly seed: number,
    /** Each worker's backend: the zombies', the worker Lambda's, each worker process's. */
    backend: () => Backend,
  ) {
    const { names, admin } = target;
    const onEvent = (event: WorkerEvent) => {
      if (event.kind === 'sample-cut') this.worker.sample_cuts++;
      if (event.kind === 'sample-resumed' && event.sequences.some((sequence) => sequence.from === 'restored'))
        this.worker.sample_resumes++;
      return this.cuts.onEvent(event);
    };
    this.injector = createFaultInjector({ seed, rates: FAULT_RATES });
    this.points = new CrashPoints(seed);
    this.effects = new CommitEffects({ futures: names.tables.futures, models: names.tables.models });
    this.deliveries = new DeliveryChaos({
      seed,
      queueUrl: names.queueUrls.work,
      duplicate: settings.duplicateDelivery,
      late: settings.lateDelivery,
      lateDelayMs: settings.lateDelayMs,
      sender: admin.sqs,
    });
    this.zombies = new ZombieAgent({
      processes: this.processes,
      backend: backend(),
      readModel: async (modelId) =>
        (
          await admin.doc.send(
            new GetCommand({
              TableName: names.tables.models,
              Key: { model_id: modelId },
              ConsistentRead: true,
            }),
          )
        ).Item as ModelRow | undefined,
      sliceTokens: settings.sliceTokens,
      count: settings.zombies,
      maxStallMs: 30_000,
      holdMessage: async (receiptHandle, seconds) => {
        await admin.sqs.send(
          new ChangeMessageVisibilityCommand({
            QueueUrl: names.queueUrls.work,
            ReceiptHandle: receiptHandle,
            VisibilityTimeout: seconds,
          }),
        );
      },
    });
    this.lambda = new LambdaWorker({
      processes: this.processes,
      backend: backend(),
      log: this.log,
      seed,
      timeoutShare: settings.lambdaTimeout,
      timeoutAfterMs: settings.timeoutAfterMs,
      sliceTokens: settings.sliceTokens,
      cutPollMs: settings.cutPollMs,
      onEvent,
      onTimeout: () => this.#countCrash(LAMBDA_TIMEOUT_POINT),
      zombies: this.zombies,
      zombieShare: settings.zombieShare,
    });
    this.fleet = new ProcessFleet({
      processes: this.processes,
      backend,
      log: this.log,
      queueUrl: names.queueUrls.work,
      // Looked up when a loop starts: the runtime resets the shared clients when it starts.
      sqs: () => awsClients().sqs,
      runAsWorker: (run) => this.runtime.runAs('worker', run),
      visibilitySeconds: settings.visibilitySeconds,
      sliceTokens: settings.sliceTokens,
      cutPollMs: settings.cutPollMs,
      onEvent,
      residency: {
        policy: settings.residency,
        laneLeaseMs: settings.leaseSeconds * 1000,
        registryTable: names.tables.registry,
        pool: target.env.POOL ?? 'default',
        laneQueueUrl: (lane) => names.queueUrls[laneQueueId(lane)],
      },
    });
    this.processes.onKill = (process) => {
      if (process.kind === 'process-worker') this.fleet.killed(process);
    };
  }

  get runtime(): LocalRuntime {
    if (this.#runtime === undefined) throw new Error('the chaos stack is not started');
    return this.#runtime;
  }

  get crashes(): Record<string, number> {
    return { ...this.points.crashes, ...this.harnessCrashes };
  }

  get crashTotal(): number {
    return Object.values(this.crashes).reduce((sum, count) => sum + count, 0);
  }

  async start(logLevel: string): Promise<void> {
    const { admin, names } = this.target;
    const scheduler = createSchedulerHandler();
    const handlers: HandlerOverrides = {
      scheduler: (event: SchedulerEvent, context: Context) =>
        this.processes.run(this.processes.create('scheduler', true), () => scheduler(event, context)),
      sweeper: (event: ScheduledEvent, context: Context) =>
        this.processes.run(this.processes.create('sweeper', false), () => sweeperHandler(event, context)),
      worker: this.lambda.handler,
    };
    // An unacknowledged message comes back after seconds, not the deployed 10 minutes: on the shared
    // queue and on the lanes of the worker processes' held models (S2).
    for (const queueUrl of [names.queueUrls.work, ...LANE_QUEUE_IDS.map((id) => names.queueUrls[id])]) {
      await admin.sqs.send(
        new SetQueueAttributesCommand({
          QueueUrl: queueUrl,
          Attributes: { VisibilityTimeout: String(this.settings.visibilitySeconds) },
        }),
      );
    }
    this.#runtime = await this.target.startRuntime({ handlers, env: chaosEnv(this.settings, logLevel) });

    // The handlers' shared clients (the runtime reset them): the death check outermost, then the
    // faults, then the observers of what really landed.
    const clients = awsClients();
    this.#undo.push(
      this.processes.attach(clients),
      this.injector.attach(clients),
      this.effects.attach(clients.dynamo),
      this.deliveries.attach(clients.sqs),
    );
    for (const [point, arming] of Object.entries(CRASH_ARMING)) this.points.arm(point, arming);
    this.#undo.push(this.processes.installCrashes(this.points));

    this.fleet.start(this.settings.processWorkers);
    this.#cutsOn = true;
    this.#cutting = (async () => {
      // From outside any worker (the operator's CLI writes the same record); a held slice that was
      // its sample's last cuts nothing, so it is tried again until enough requests were cut.
      const pool = this.target.env.POOL ?? 'default';
      const cut = () => requestCut(admin.doc, this.target.names.tables.registry, pool, 'chaos');
      while (this.#cutsOn && this.cuts.cutRequests.length < this.settings.operatorCuts) {
        await this.cuts.cutAtNextSlice(cut).catch(() => undefined);
      }
    })();
    this.#sweeping = true;
    this.#sweeper = (async () => {
      while (this.#sweeping) {
        this.sweeps.runs++;
        await this.runtime.runSchedule('sweeper').catch(() => this.sweeps.failed++);
        await new Promise((resolve) => setTimeout(resolve, this.settings.sweepEveryMs));
      }
    })();
  }

  /** Turns every injection off and waits for the late deliveries. */
  async calm(): Promise<void> {
    this.#cutsOn = false;
    this.cuts.cancel();
    await this.#cutting;
    this.zombies.calm();
    this.injector.off();
    this.points.disarm();
    this.deliveries.off();
    this.lambda.calm();
    await this.deliveries.flush();
  }

  /** Stops the sweeper, the worker processes and the runtime, and takes the chaos off the clients. */
  stop(): Promise<void> {
    this.#stopped ??= (async () => {
      await this.calm();
      this.#sweeping = false;
      await this.#sweeper;
      await this.fleet.stop();
      await this.#runtime?.stop();
      for (const undo of this.#undo.reverse()) undo();
      this.#undo = [];
    })();
    return this.#stopped;
  }

  #countCrash(point: string): void {
    this.harnessCrashes[point] = (this.harnessCrashes[point] ?? 0) + 1;
  }
}
