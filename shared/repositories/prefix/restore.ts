import type { Clock } from '../../aws/backoff.js';
import { GroupRecordCache } from './group-cache.js';
import { segmentRowKeys } from './pointer.js';
import type { ReadBatcher } from './read-batcher.js';
import type { RestoreOutcome, RestoreRequest } from './types.js';
import { type ReadResult, verifyPrefix } from './verify.js';

/**
 * Restores (P4, P4a): each request reads, through the shared batcher, every key its pointer names
 * (its segments' commit records, asked for early so they lead the batch, and its rows, in one round),
 * then judges what came back on its own, as soon as its own keys are in. Group records are parsed
 * once per batch for all the requests that share them. Cancelling a request drops only its own
 * result; the shared read goes on for everyone else.
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
  /** Keyed by the items a batch read, so shared records are parsed once per batch, never reused later. */
  private readonly groups = new GroupRecordCache();

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
    const nowSeconds = (): number => Math.floor(this.clock.now() / 1000);
    if (pointer.contentId !== contentId) {
      return verifyPrefix(pointer, contentId, new Map(), nowSeconds());
    }
    let groupKeys: string[];
    let rowKeys: string[];
    try {
      groupKeys = [...new Set(pointer.segments.map((segment) => segment.group))];
      rowKeys = pointer.segments.flatMap((segment) => segmentRowKeys(pointer.callId, segment));
    } catch (error) {
      return { kind: 'regenerate', callId: pointer.callId, reason: 'mismatch', detail: String(error) };
    }
    const keys = [...groupKeys, ...rowKeys];
    const values = await Promise.all([
      ...this.batcher.load(groupKeys, { early: true }),
      ...this.batcher.load(rowKeys),
    ]);
    const items = new Map<string, ReadResult>(keys.map((key, index) => [key, values[index] ?? null]));
    return verifyPrefix(pointer, contentId, items, nowSeconds(), this.groups);
  }
}
