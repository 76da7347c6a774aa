import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Context } from 'aws-lambda';
import { InfrastructureError } from '../../../shared/base/errors.js';
import { logger } from '../../../shared/base/logger.js';
import type { FunctionId, Topology } from '../../../shared/base/topology.js';
import { LOCAL_REGION } from '../../cloud/resources.js';
import { type AccessPolicy, runAsFunction } from '../grant-enforcement.js';

/**
 * A Lambda handler as the runtime sees it. `never` lets any handler signature be injected
 * (an SQS handler, an HTTP handler, a test fake); the runtime supplies the event its trigger defines.
 */
export type LocalHandler = (event: never, context: Context) => unknown;
export type HandlerOverrides = Partial<Record<FunctionId, LocalHandler>>;

/** One invocation as it ran: what the e2e bench reads to say where a request's time went. */
export interface InvocationTrace {
  readonly functionId: FunctionId;
  readonly event: unknown;
  /** Epoch ms when the handler was called and when it settled. */
  readonly startedAt: number;
  readonly endedAt: number;
  readonly ok: boolean;
}

export type InvocationObserver = (trace: InvocationTrace) => void;

const REPOSITORY_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** A handler ran past its function's timeout, as Lambda would end it. */
export class InvocationTimeoutError extends InfrastructureError {
  override readonly name = 'InvocationTimeoutError';
  constructor(functionId: FunctionId, seconds: number) {
    super(`${functionId} timed out after ${seconds} s`, { context: { function_id: functionId, seconds } });
  }
}

/**
 * Invokes the topology's functions in this process, with a Lambda-like context and timeout. Each
 * handler runs inside its function's scope (`grant-enforcement.ts`): with an `access` policy, its SDK
 * calls are checked against its grants as its IAM role would check them.
 */
export class Invoker {
  readonly #topology: Topology;
  readonly #overrides: HandlerOverrides;
  readonly #access: AccessPolicy | undefined;
  readonly #loaded = new Map<FunctionId, Promise<LocalHandler>>();
  readonly #inflight = new Set<Promise<unknown>>();
  readonly #observe: InvocationObserver | undefined;

  constructor(
    topology: Topology,
    overrides: HandlerOverrides = {},
    access?: AccessPolicy,
    observe?: InvocationObserver,
  ) {
    this.#topology = topology;
    this.#overrides = overrides;
    this.#access = access;
    this.#observe = observe;
  }

  /** Loads a handler module now (so start-up fails fast on a broken entry). */
  load(functionId: FunctionId): Promise<LocalHandler> {
    let loading = this.#loaded.get(functionId);
    if (loading === undefined) {
      loading = this.#import(functionId);
      this.#loaded.set(functionId, loading);
    }
    return loading;
  }

  async #import(functionId: FunctionId): Promise<LocalHandler> {
    const injected = this.#overrides[functionId];
    if (injected !== undefined) return injected;
    const entry = this.#topology.functions[functionId].entry;
    const module = (await import(pathToFileURL(resolve(REPOSITORY_ROOT, entry)).href)) as {
      handler?: unknown;
    };
    if (typeof module.handler !== 'function') {
      throw new Error(`${entry} does not export a function named handler`);
    }
    return module.handler as LocalHandler;
  }

  /** Runs one invocation; rejects with the handler's error or an `InvocationTimeoutError`. */
  async invoke(functionId: FunctionId, event: unknown): Promise<unknown> {
    const handler = await this.load(functionId);
    const { timeoutSeconds, memoryMb } = this.#topology.functions[functionId];
    const startedAt = Date.now();
    const deadline = startedAt + timeoutSeconds * 1000;
    const scope = { functionId, ...(this.#access === undefined ? {} : { access: this.#access }) };
    const run = Promise.resolve().then(() =>
      runAsFunction(scope, () =>
        (handler as (event: unknown, context: Context) => unknown)(
          event,
          lambdaContext(functionId, memoryMb, deadline),
        ),
      ),
    );
    this.#inflight.add(run);
    const forget = (): void => void this.#inflight.delete(run);
    run.then(forget, forget);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new InvocationTimeoutError(functionId, timeoutSeconds)),
        timeoutSeconds * 1000,
      );
    });
    let ok = false;
    try {
      const answer = await Promise.race([run, timeout]);
      ok = true;
      return answer;
    } finally {
      clearTimeout(timer);
      this.#observe?.({ functionId, event, startedAt, endedAt: Date.now(), ok });
    }
  }

  /** Waits for running invocations to settle, at most `timeoutMs` (a handler cannot be killed). */
  async drain(timeoutMs: number): Promise<void> {
    if (this.#inflight.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.#inflight]),
      new Promise<void>((resolve) => {
        timer = setTimeout(() => {
          logger.warn('local runtime stopped with invocations still running', {
            running: this.#inflight.size,
          });
          resolve();
        }, timeoutMs);
      }),
    ]);
    clearTimeout(timer);
  }
}

function lambdaContext(functionId: FunctionId, memoryMb: number, deadline: number): Context {
  const functionName = `local-${functionId}`;
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:${LOCAL_REGION}:000000000000:function:${functionName}`,
    memoryLimitInMB: String(memoryMb),
    awsRequestId: randomUUID(),
    logGroupName: `/aws/lambda/${functionName}`,
    logStreamName: 'local',
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: () => undefined,
    fail: () => undefined,
    succeed: () => undefined,
  };
}
