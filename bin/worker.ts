import { realpathSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import {
  ChangeMessageVisibilityCommand,
  DeleteMessageCommand,
  type Message,
  ReceiveMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import { runUnderWorkerGrants } from '../local/runtime/worker-scope.js';
import { backoffDelay, realSleep } from '../shared/aws/backoff.js';
import { awsClients, resetAwsClients } from '../shared/aws/clients.js';
import type { Backend } from '../shared/backend/backend.js';
import { EngineBackend } from '../shared/backend/engine/engine-backend.js';
import {
  engineName,
  resolveBaseModel,
  startEngineBackend,
} from '../shared/backend/engine/installed-engines.js';
import { ReferenceBackend } from '../shared/backend/reference/reference-backend.js';
import { config, resetConfig } from '../shared/base/config.js';
import { type ResolvedEnvironment, resolveEnvironment, WORKER_ENV_OUTPUTS } from '../shared/base/env-file.js';
import { mintRunId } from '../shared/base/ids.js';
import { logger } from '../shared/base/logger.js';
import { STACK_ENV_OUTPUTS } from '../shared/base/stack-outputs.js';
import { laneQueueId, topology } from '../shared/base/topology.js';
import type { WorkManifest } from '../shared/domain/planning/work-item.js';
import { WorkItemAdmission, type WorkItemModels } from '../shared/services/worker/admission.js';
import {
  describeVerdict,
  GraceStop,
  parseManifest,
  processWorkMessage,
  type WorkerOptions,
} from '../shared/services/worker/index.js';
import { Residency } from '../shared/services/worker/residency.js';
import { WorkLane } from '../shared/services/worker/work-lane.js';

/**
 * `npm run worker`: the worker runtime as a long-running process, for GPU hosts (or any host) that
 * consume the `work` queue instead of the Lambda. Same runtime, same commit protocol; only the driver
 * differs:
 * - a work lane leased at start (S2): the models it trains stay resident in its backend (S1), and the
 *   scheduler sends their work to the lane's queue; without a free lane it holds nothing;
 * - long polling (ReceiveMessage, WaitTimeSeconds 20) of its lane and the shared queue at once, and
 *   up to `--max-work-items` work items running at once (default 4): polling goes on while they run,
 *   so the sample calls of the next work items reach the engine while the first ones decode and share
 *   its decode steps (B1). Two work items naming the same model never run at once, and one whose
 *   manifest names no parts runs alone (shared/services/worker/admission.ts says why);
 * - each message's visibility is extended from its receipt until its work item ended, so a long step,
 *   or a wait for its turn, is not redelivered;
 * - each message is deleted when its own work item ended (committed, or found to be someone else's);
 * - SIGTERM / SIGINT: stop polling (the polls in flight end within `--wait-seconds`; a message they
 *   bring, or one still waiting for its turn, is made visible again at once) and cut the running
 *   samples of every running work item at once (their prefixes are saved within the grace period, and
 *   they go back to pending to resume elsewhere, P1-P6); let the rest of the running work items finish
 *   for up to `--grace-seconds`, then abandon them all without committing (their messages are made
 *   visible at once so other workers continue them); once every one has ended, snapshot and let go of
 *   the models it holds (S3), give the lane back, and exit 0. A second signal abandons at once.
 *
 * Options: `--engine torch --base-model <hub id or folder>` runs the PyTorch + PEFT engine process
 * (shared/backend/engine/installed-engines.ts; `--device`, `--dtype` pass to it; install it with `npm run engine:install`), the
 * base model being one of the pool's BASE_MODELS; `--backend <module>` loads a module exporting
 * `createBackend(): Backend | Promise<Backend>` (default: the reference CPU backend); `--grace-seconds <n>` (default 60); `--wait-seconds <n>` (long
 * poll, default 20); `--max-work-items <n>` (default 4; 1 runs one work item at a time); `--env-file <file>`. Resources come from the same environment variables as the
 * functions' (WORK_QUEUE_URL, MODELS_TABLE, DATA_BUCKET, ...): from `--env-file` (a flat JSON map,
 * NAME=value lines, or `cdk deploy --outputs-file` JSON, whose `WorkerEnv` is used), else the
 * environment, else a running `npm start`'s `.local/env.json`. Against `npm start`'s stack the process
 * runs under the worker's grants, checked locally as its host policy would be on AWS (local/runtime/worker-scope.ts).
 */

export interface WorkerProcessOptions {
  readonly queueUrl: string;
  /**
   * The process's work lane (S2): its queue is polled beside `queueUrl`, both long polls in flight at
   * once, until `lost` aborts (the lease was taken).
   */
  readonly lane?: { readonly queueUrl: string; readonly lost?: AbortSignal };
  readonly backend: Backend;
  readonly sqs: SQSClient;
  /** Stop polling; the running work items still finish, those waiting for their turn go back. */
  readonly stop: AbortSignal;
  /** Abandon the running work items without committing. */
  readonly abandon?: AbortSignal;
  /** Cut the running samples (save their prefixes, back to pending); epoch ms the save must end by. */
  readonly cut?: AbortSignal;
  readonly cutDeadline?: () => number;
  readonly waitTimeSeconds?: number;
  readonly visibilityTimeoutSeconds?: number;
  readonly extendEveryMs?: number;
  /**
   * Checked before each receive while no work item runs (an engine's `ping`, which restarts a dead
   * engine first): while it fails the process takes no work item it could not compute, and retries
   * with backoff.
   */
  readonly healthCheck?: () => Promise<void>;
  /**
   * Work items run at once (default DEFAULT_MAX_WORK_ITEMS; 1: one at a time), never two naming the
   * same model (shared/services/worker/admission.ts).
   */
  readonly maxWorkItems?: number;
  /** Runtime options (clients, lease, hooks, residency); `backend` and `signal` are set by the process. */
  readonly worker?: Omit<WorkerOptions, 'backend' | 'signal' | 'cut' | 'cutDeadline'>;
  readonly print?: (line: string) => void;
}

const RECEIVE_BACKOFF = { baseMs: 200, capMs: 10_000, maxRetries: Number.POSITIVE_INFINITY };

/** One long poll's answer, from the queue it polled; `error` when the receive failed. */
interface Received {
  readonly queueUrl: string;
  readonly messages: readonly Message[];
  readonly error?: unknown;
}

/** Work items a worker process runs at once unless `--max-work-items` says otherwise. */
export const DEFAULT_MAX_WORK_ITEMS = 4;

/**
 * Polls until `stop` aborts; resolves with the number of work items handled, once every one it took
 * has ended.
 */
export async function runWorkerProcess(options: WorkerProcessOptions): Promise<number> {
  const waitTimeSeconds = options.waitTimeSeconds ?? 20;
  const visibility = options.visibilityTimeoutSeconds ?? topology.queues.work.visibilityTimeoutSeconds;
  const print = options.print ?? ((line: string) => process.stdout.write(`${line}\n`));
  const admission = new WorkItemAdmission(options.maxWorkItems ?? DEFAULT_MAX_WORK_ITEMS);
  // A stop lets the polls in flight finish: an aborted long poll may still take a message off the
  // queue (until its visibility timeout) with nobody left to run it. Abandoning aborts them anyway.
  const receive = (queueUrl: string): Promise<Received> =>
    options.sqs
      .send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: 1,
          WaitTimeSeconds: waitTimeSeconds,
          VisibilityTimeout: visibility,
        }),
        options.abandon === undefined ? {} : { abortSignal: options.abandon },
      )
      .then(
        (answer): Received => ({ queueUrl, messages: answer.Messages ?? [] }),
        (error: unknown): Received => ({ queueUrl, messages: [], error }),
      );
  const queues = (): string[] =>
    options.lane === undefined || options.lane.lost?.aborted
      ? [options.queueUrl]
      : [options.lane.queueUrl, options.queueUrl];
  // At most one poll per queue in flight; the one that answers first is handled, the other keeps
  // waiting and is handled on a later turn.
  const polls = new Map<string, Promise<Received>>();
  // The messages taken and not yet ended: running, or waiting for their turn
  // (shared/services/worker/admission.ts).
  const taken = new Set<Promise<void>>();
  // Wakes a turn that waits for a free slot: a work item ended, or the stop came.
  let wake: (() => void) | undefined;
  const slotOrStop = () => new Promise<undefined>((resolve) => (wake = () => resolve(undefined)));
  options.stop.addEventListener('abort', () => wake?.(), { once: true });
  let handled = 0;
  const take = (message: Message, queueUrl: string) => {
    const task = handleMessage(message, queueUrl, options, admission, visibility, print)
      .then(
        (ran) => {
          if (ran) handled += 1;
        },
        (error: unknown) =>
          logger.error('work message handling failed; it will be delivered again', {
            error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
          }),
      )
      .finally(() => {
        taken.delete(task);
        wake?.();
      });
    taken.add(task);
  };
  let errors = 0;
  while (!options.stop.aborted) {
    // New polls only while a work item could start: a message beyond that would wait in this process.
    if (taken.size < admission.limit) {
      try {
        // While work items run, their own requests are the check: a ping would wait behind their
        // engine requests (docs/engine-protocol.md, version 2) and, past its timeout, restart the
        // engine under them.
        if (taken.size === 0) await options.healthCheck?.();
      } catch (error) {
        errors += 1;
        logger.warn('health check failed; retrying', {
          error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
        });
        await realSleep(backoffDelay(errors, RECEIVE_BACKOFF, Math.random) + 100, options.stop);
        continue;
      }
      for (const queueUrl of queues()) if (!polls.has(queueUrl)) polls.set(queueUrl, receive(queueUrl));
    }
    // Full, a turn also ends when a work item does (a slot freed) or at the stop.
    const answer = await Promise.race([
      ...polls.values(),
      ...(taken.size < admission.limit ? [] : [slotOrStop()]),
    ]);
    wake = undefined;
    if (answer === undefined) continue;
    polls.delete(answer.queueUrl);
    if (answer.error !== undefined) {
      if (options.stop.aborted || options.abandon?.aborted) break;
      errors += 1;
      logger.warn('receive failed; retrying', {
        queue: answer.queueUrl,
        error:
          answer.error instanceof Error
            ? `${answer.error.name}: ${answer.error.message}`
            : String(answer.error),
      });
      await realSleep(backoffDelay(errors, RECEIVE_BACKOFF, Math.random) + 100, options.stop);
      continue;
    }
    errors = 0;
    for (const message of answer.messages) {
      if (options.stop.aborted) await giveBack(options, answer.queueUrl, message);
      else take(message, answer.queueUrl);
    }
  }
  // Polls still in flight end within their wait; what they bring goes back at once.
  for (const answer of await Promise.all(polls.values())) {
    for (const message of answer.messages) await giveBack(options, answer.queueUrl, message);
  }
  // The running work items finish or are abandoned (the driver's stop policy); those still waiting
  // for their turn give their messages back.
  while (taken.size > 0) await Promise.all(taken);
  return handled;
}

/** A message taken or received after the stop: visible again at once for another worker. */
async function giveBack(options: WorkerProcessOptions, queueUrl: string, message: Message): Promise<void> {
  await options.sqs
    .send(
      new ChangeMessageVisibilityCommand({
        QueueUrl: queueUrl,
        ReceiptHandle: message.ReceiptHandle,
        VisibilityTimeout: 0,
      }),
    )
    .catch(() => undefined);
}

/**
 * The models a message's work item names (`manifestOf`), for its turn
 * (shared/services/worker/admission.ts): `all` when the manifest does not name them; none when it is
 * no manifest (it fails before touching anything).
 */
function modelsOf(message: Message): WorkItemModels {
  let manifest: WorkManifest;
  try {
    manifest = parseManifest(message.Body ?? '');
  } catch {
    return [];
  }
  return manifest.model_ids ?? 'all';
}

/**
 * One message from its receipt to its settling: its visibility is extended from the start (also while
 * it waits for its turn), it runs when admitted, and it is deleted when its work item ended. Resolves
 * false when the stop came before its turn (the message went back at once, nothing ran).
 */
async function handleMessage(
  message: Message,
  queueUrl: string,
  options: WorkerProcessOptions,
  admission: WorkItemAdmission,
  visibility: number,
  print: (line: string) => void,
): Promise<boolean> {
  const { sqs } = options;
  const receiptHandle = message.ReceiptHandle;
  const setVisibility = (seconds: number) =>
    sqs.send(
      new ChangeMessageVisibilityCommand({
        QueueUrl: queueUrl,
        ReceiptHandle: receiptHandle,
        VisibilityTimeout: seconds,
      }),
    );
  const extender = setInterval(
    () =>
      void setVisibility(visibility).catch((error: unknown) =>
        logger.warn('visibility extension failed', {
          error: error instanceof Error ? error.name : String(error),
        }),
      ),
    options.extendEveryMs ?? (visibility * 1000) / 3,
  );
  let verdict: Awaited<ReturnType<typeof processWorkMessage>>;
  try {
    const release = await admission.admit(
      modelsOf(message),
      options.abandon === undefined ? options.stop : AbortSignal.any([options.stop, options.abandon]),
    );
    if (release === undefined) {
      clearInterval(extender);
      await giveBack(options, queueUrl, message);
      return false;
    }
    try {
      verdict = await processWorkMessage(message.Body ?? '', {
        ...options.worker,
        backend: options.backend,
        ...(options.abandon === undefined ? {} : { signal: options.abandon }),
        ...(options.cut === undefined ? {} : { cut: options.cut }),
        ...(options.cutDeadline === undefined ? {} : { cutDeadline: options.cutDeadline }),
      });
    } finally {
      release();
    }
  } finally {
    clearInterval(extender);
  }
  print(`${new Date().toISOString()} ${describeVerdict(verdict)}`);
  try {
    if (verdict.done) {
      await sqs.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: receiptHandle }));
    } else if (options.abandon?.aborted) {
      // The models are still in flight under this work item: another worker may continue it at once.
      await setVisibility(0);
    }
  } catch (error) {
    logger.warn('message not settled; it will be delivered again', {
      error: error instanceof Error ? error.name : String(error),
    });
  }
  return true;
}

async function loadBackend(args: readonly string[]): Promise<Backend & { stop?: () => Promise<void> }> {
  const modulePath = flag(args, '--backend');
  const engine = flag(args, '--engine');
  if (engine !== undefined) {
    if (modulePath !== undefined) throw new Error('give --engine or --backend, not both');
    const raw = flag(args, '--base-model');
    if (raw === undefined)
      throw new Error("--engine needs --base-model <hub id or folder>, one of the pool's BASE_MODELS");
    const device = flag(args, '--device');
    const dtype = flag(args, '--dtype');
    return startEngineBackend(engineName(engine), {
      baseModel: resolveBaseModel(raw),
      worker: `npm run worker (pid ${process.pid})`,
      ...(device === undefined ? {} : { device }),
      ...(dtype === undefined ? {} : { dtype }),
    });
  }
  if (modulePath === undefined) return new ReferenceBackend();
  const module = (await import(pathToFileURL(resolve(modulePath)).href)) as { createBackend?: unknown };
  if (typeof module.createBackend !== 'function') {
    throw new Error(`${modulePath} does not export createBackend()`);
  }
  return (await (module.createBackend as () => Backend | Promise<Backend>)()) as Backend;
}

function flag(args: readonly string[], name: string): string | undefined {
  const index = args.indexOf(name);
  return index >= 0 ? args[index + 1] : undefined;
}

async function main(args: readonly string[]): Promise<number> {
  const graceSeconds = Number(flag(args, '--grace-seconds') ?? 60);
  if (!Number.isFinite(graceSeconds) || graceSeconds < 0) throw new Error('--grace-seconds must be >= 0');
  const waitTimeSeconds = Number(flag(args, '--wait-seconds') ?? 20);
  if (!Number.isInteger(waitTimeSeconds) || waitTimeSeconds < 0 || waitTimeSeconds > 20) {
    throw new Error('--wait-seconds must be an integer from 0 to 20');
  }
  const maxWorkItems = Number(flag(args, '--max-work-items') ?? DEFAULT_MAX_WORK_ITEMS);
  if (!Number.isInteger(maxWorkItems) || maxWorkItems < 1) {
    throw new Error('--max-work-items must be a positive integer');
  }
  const environment = useEnvironment(flag(args, '--env-file'));
  const backend = await loadBackend(args);
  const policy = new GraceStop(graceSeconds * 1000);
  const onSignal = (signal: NodeJS.Signals) => {
    if (policy.terminate() === 'abandoned') return;
    process.stdout.write(
      `${signal}: no new work items; cutting running samples, finishing the rest (up to ${graceSeconds} s)\n`,
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  const run = async () => {
    const queueUrl = config().workQueueUrl;
    // Models stay resident in this process (S1) when it leases a work lane, so their work reaches it
    // (S2); without one (every lane held, or RESIDENT_MODELS=0) it writes the state at every commit.
    const worker = `w-${mintRunId()}`;
    const lane =
      config().tunables.residentModels > 0
        ? await WorkLane.acquire(
            { doc: awsClients().doc, registryTable: config().table('registry'), pool: config().pool },
            worker,
          )
        : undefined;
    const residency =
      lane === undefined
        ? undefined
        : new Residency(backend, undefined, undefined, { worker, lane: lane.lane });
    const laneQueueUrl = lane === undefined ? undefined : config().queueUrl(laneQueueId(lane.lane));
    process.stdout.write(
      `worker (${backend.name} backend, up to ${maxWorkItems} work items at once) polling ${queueUrl}${laneQueueUrl === undefined ? '; no work lane: models are not kept resident' : ` and its lane ${lane?.lane} (${laneQueueUrl}); models stay resident`}\n`,
    );
    try {
      return await runWorkerProcess({
        queueUrl,
        ...(laneQueueUrl === undefined || lane === undefined
          ? {}
          : { lane: { queueUrl: laneQueueUrl, lost: lane.lost } }),
        backend,
        sqs: awsClients().sqs,
        stop: policy.stop,
        abandon: policy.abandon,
        cut: policy.cut,
        cutDeadline: policy.cutDeadline,
        waitTimeSeconds,
        maxWorkItems,
        ...(residency === undefined ? {} : { worker: { residency } }),
        ...(backend instanceof EngineBackend ? { healthCheck: () => backend.ping() } : {}),
      });
    } finally {
      // Snapshots of what it holds, then the lane back: another worker takes both at once (S3).
      if (residency !== undefined) {
        process.stdout.write(`letting go of ${residency.size} resident models\n`);
        await residency.letGoAll();
      }
      await lane?.release();
    }
  };
  let handled: number;
  if (environment.localStack) {
    process.stdout.write(
      `worker: ${environment.source} is the local stack's: calls are checked against the worker's grants\n`,
    );
    handled = await runUnderWorkerGrants(process.env, run);
  } else {
    handled = await run();
  }
  policy.dispose();
  await backend.stop?.();
  process.stdout.write(`worker stopped after ${handled} work items\n`);
  awsClients().sqs.destroy();
  return 0;
}

/** The process's variables (see the header): applied to process.env before anything reads config(). */
function useEnvironment(envFile: string | undefined): ResolvedEnvironment {
  const environment = resolveEnvironment({
    envFile,
    env: process.env,
    readyVariable: topology.queues.work.envVar ?? 'WORK_QUEUE_URL',
    needs: `the variables of the stack's ${STACK_ENV_OUTPUTS.worker} output`,
    outputs: WORKER_ENV_OUTPUTS,
  });
  Object.assign(process.env, environment.variables);
  resetConfig();
  resetAwsClients();
  return environment;
}

function isEntryPoint(): boolean {
  const entry = process.argv[1];
  return entry !== undefined && realpathSync(entry) === realpathSync(fileURLToPath(import.meta.url));
}

if (isEntryPoint()) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: unknown) => {
      process.stderr.write(`worker: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exit(1);
    },
  );
}
