/**
 * The commit signal: how a waiting `retrieve_future` learns that its future turned terminal without
 * re-reading the row on a timer. The worker announces the request ids each commit made terminal;
 * `retrieve_future` watches the one it waits for. A wake-up is a hint, never the answer: the waiter
 * then reads the row strongly, so a lost, late or spurious wake-up only changes how soon it answers.
 *
 * A port with nothing behind it by default: on AWS the api and the worker are separate Lambdas and
 * no commit reaches a waiting poll, so `watch` answers undefined and retrieve_future polls on its
 * own short schedule (shared/services/api/retrieve.ts). The local runtime, which runs both handlers in one
 * process, installs `InProcessCommitSignal` (local/runtime/lambda-runtime.ts), and the poll becomes the slow
 * fallback for what it cannot see: a worker in another process, a request failed by the scheduler.
 */

export interface CommitWatch {
  /**
   * Resolves true once the request's commit is announced, or at once if it was announced since the
   * watch began or the last wait ended; false after `ms`.
   */
  wait(ms: number): Promise<boolean>;
  /** Stops listening; a watch must be closed once its waiter is done. */
  close(): void;
}

export interface CommitSignal {
  /** Told the request ids a commit made terminal, once it landed. */
  committed(requestIds: Iterable<string>): void;
  /** Starts listening for `requestId`; undefined when nothing in this process announces commits. */
  watch(requestId: string): CommitWatch | undefined;
}

/** AWS: nothing to hear and nothing to tell. */
export const NO_COMMIT_SIGNAL: CommitSignal = {
  committed: () => {},
  watch: () => undefined,
};

/** One process: the worker's announcements wake the api's waiters directly. */
export class InProcessCommitSignal implements CommitSignal {
  readonly #watchers = new Map<string, Set<() => void>>();

  committed(requestIds: Iterable<string>): void {
    for (const requestId of requestIds) {
      for (const wake of this.#watchers.get(requestId) ?? []) wake();
    }
  }

  watch(requestId: string): CommitWatch {
    let announced = false;
    let settle: ((woken: boolean) => void) | undefined;
    const wake = (): void => {
      announced = true;
      settle?.(true);
    };
    const watchers = this.#watchers.get(requestId) ?? new Set();
    watchers.add(wake);
    this.#watchers.set(requestId, watchers);
    return {
      wait: (ms) =>
        new Promise<boolean>((resolve) => {
          if (announced) {
            announced = false;
            resolve(true);
            return;
          }
          const timer = setTimeout(() => settle?.(false), ms);
          settle = (woken) => {
            clearTimeout(timer);
            settle = undefined;
            announced = false;
            resolve(woken);
          };
        }),
      close: () => {
        watchers.delete(wake);
        if (watchers.size === 0 && this.#watchers.get(requestId) === watchers)
          this.#watchers.delete(requestId);
        settle?.(false);
      },
    };
  }

  /** Requests with at least one waiter (tests: every watch is closed). */
  get watched(): number {
    return this.#watchers.size;
  }
}

let installed: CommitSignal = NO_COMMIT_SIGNAL;

/** The signal the worker and retrieve_future use unless given one. */
export function commitSignal(): CommitSignal {
  return installed;
}

/** Local only: the local runtime installs an in-process signal; nothing installs one on AWS. */
export function installCommitSignal(signal: CommitSignal): void {
  installed = signal;
}
