import type { Clock } from './backoff.js';
import { pointerKeys } from './pointer.js';
import type { ReadBatcher } from './read-batcher.js';
import type { RestoreOutcome, RestoreRequest } from './types.js';
import { type ReadResult, verifyPrefix } from './verify.js';

/**
 * Restores (P4, P4a): each request reads, through the shared batcher, every key its pointer names
 * (commit records and rows, in one round), then judges what came back on its own. Cancelling a
 * request drops only its own result; the shared read goes on for everyone else.
 */

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('The restore was cancelled', 'AbortError');
}

function untilAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return work;
  if (signal.aborted) return Promise.reject(abortReason(signal));
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(abortReason(signal));
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

export class PrefixReader {
  constructor(
    private readonly batcher: ReadBatcher,
    private readonly clock: Clock,
  ) {}

  /**
   * Resolves with `restored` or `regenerate`; rejects only with the request's own abort reason.
   * The request joins whatever shared read is forming within the batching window.
   */
  restore(request: RestoreRequest): Promise<RestoreOutcome> {
    return untilAborted(this.read(request), request.signal);
  }

  /**
   * For a worker that knows all its restores up front: reads them at once, without the window.
   * One promise per request, so cancelling one still leaves the others theirs.
   */
  restoreMany(requests: readonly RestoreRequest[]): Promise<RestoreOutcome>[] {
    const results = requests.map((request) => this.restore(request));
    this.batcher.flush();
    return results;
  }

  private async read(request: RestoreRequest): Promise<RestoreOutcome> {
    const { pointer, contentId } = request;
    if (pointer.contentId !== contentId) {
      return verifyPrefix(pointer, contentId, new Map(), Math.floor(this.clock.now() / 1000));
    }
    let keys: string[];
    try {
      keys = pointerKeys(pointer);
    } catch (error) {
      return { kind: 'regenerate', callId: pointer.callId, reason: 'mismatch', detail: String(error) };
    }
    const values = await this.batcher.loadMany(keys);
    const items = new Map<string, ReadResult>(keys.map((key, index) => [key, values[index] ?? null]));
    return verifyPrefix(pointer, contentId, items, Math.floor(this.clock.now() / 1000));
  }
}
