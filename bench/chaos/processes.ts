import { AsyncLocalStorage } from 'node:async_hooks';
import { initializeStackOf } from '../../local/cloud/client-middleware.js';
import type { AwsClients } from '../../shared/aws/clients.js';
import { faultHook } from '../../shared/base/fault-hook.js';
import type { CrashPoints } from '../../test/support/faults.js';

/**
 * Simulated processes inside one Node process. The local runtime runs every Lambda invocation and
 * every worker process in this one process, so a crash cannot be a real exit. Each simulated
 * process (one Lambda invocation, one `npm run worker` loop, one zombie) runs in its own async
 * context; killing it makes every later AWS call made from that context fail before it leaves the
 * process, as if the process had died there: nothing it would still write (a commit, a release for
 * re-plan, a message deletion, a lease renewal) reaches the cloud. Calls already on the wire land.
 */

export type ProcessKind = 'scheduler' | 'sweeper' | 'lambda-worker' | 'process-worker' | 'zombie';

export interface SimProcess {
  readonly id: number;
  readonly kind: ProcessKind;
  /**
   * A crash point hit here kills the process (workers, and scheduler invocations: a death holding the
   * tick lock leaves it to its 10 s lease, which the holder no longer renews, and claims without a
   * work item to their leases). Otherwise the crash is only the exception it throws (the sweeper,
   * whose safety tick then lets go of the lock).
   */
  readonly killOnCrash: boolean;
  dead: boolean;
  /** What killed it: a crash point, or `worker:lambda-timeout`. */
  killedBy?: string;
  /** Injected errors this process saw (an AWS call failed with an injected fault). */
  injected: number;
  /** The work item of the last work message this process received itself (worker processes). */
  workItemId?: string;
}

/** The work item a work message names, or undefined for a body that is not a manifest. */
export function workItemIdOf(body: string | undefined): string | undefined {
  try {
    const parsed = JSON.parse(body ?? '') as { work_item_id?: unknown };
    return typeof parsed.work_item_id === 'string' ? parsed.work_item_id : undefined;
  } catch {
    return undefined;
  }
}

/** An error whose message says it was injected: the fault library's end `(injected)` or `(<operation>, injected)`. */
export function isInjected(error: unknown): boolean {
  return error instanceof Error && (/\binjected\)/.test(error.message) || error.name === 'SimulatedCrash');
}

function killedError(process: SimProcess): Error {
  return Object.assign(
    new Error(`process ${process.kind}#${process.id} was killed at ${process.killedBy} (injected)`),
    { name: 'ProcessKilled', $metadata: {} },
  );
}

const MIDDLEWARE = 'chaosProcessDeath';

export class Processes {
  readonly #storage = new AsyncLocalStorage<SimProcess>();
  #next = 0;
  /** AWS calls per function (`api` for calls outside any simulated process: the API's handler). */
  readonly calls: Record<string, number> = {};
  /** Called when a process is killed (the fleet replaces dead worker processes). */
  onKill: (process: SimProcess) => void = () => {};

  create(kind: ProcessKind, killOnCrash: boolean): SimProcess {
    return { id: ++this.#next, kind, killOnCrash, dead: false, injected: 0 };
  }

  run<T>(process: SimProcess, task: () => T): T {
    return this.#storage.run(process, task);
  }

  current(): SimProcess | undefined {
    return this.#storage.getStore();
  }

  kill(process: SimProcess, cause: string): void {
    if (process.dead) return;
    process.dead = true;
    process.killedBy = cause;
    this.onKill(process);
  }

  /**
   * Adds the death check to the clients, outermost (add it before any fault injector, so a dead
   * process's calls are neither faulted nor counted); counts injected errors per process and notes
   * the work message a process received.
   */
  attach(clients: AwsClients): () => void {
    const stacks = [clients.dynamo, clients.s3, clients.sqs].map(initializeStackOf);
    for (const stack of stacks) {
      stack.add(
        (next, context) => async (args) => {
          const process = this.#storage.getStore();
          if (process?.dead) throw killedError(process);
          const caller = process?.kind ?? 'api';
          this.calls[caller] = (this.calls[caller] ?? 0) + 1;
          try {
            const result = await next(args);
            if (process !== undefined && context.commandName === 'ReceiveMessageCommand') {
              const [message] = (result.output as { Messages?: { Body?: string }[] }).Messages ?? [];
              if (message !== undefined) process.workItemId = workItemIdOf(message.Body);
            }
            return result;
          } catch (error) {
            if (process !== undefined && isInjected(error)) process.injected++;
            throw error;
          }
        },
        { step: 'initialize', priority: 'high', name: MIDDLEWARE, override: true },
      );
    }
    return () => {
      for (const stack of stacks) stack.remove(MIDDLEWARE);
    };
  }

  /**
   * Routes the production hook (`faultHook.crash`) to `points`: an armed point throws its
   * `SimulatedCrash`, and kills the process it was hit in when that process dies on a crash.
   */
  installCrashes(points: CrashPoints): () => void {
    const previous = faultHook.crash;
    faultHook.crash = (point) => {
      try {
        points.maybeCrash(point);
      } catch (error) {
        const process = this.#storage.getStore();
        if (process !== undefined) {
          process.injected++;
          if (process.killOnCrash) this.kill(process, point);
        }
        throw error;
      }
    };
    return () => {
      faultHook.crash = previous;
    };
  }
}
