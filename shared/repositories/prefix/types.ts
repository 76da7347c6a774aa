/**
 * Shapes of the prefix checkpoint store's API: what a worker saves at a cut, what it is told back,
 * and what a restore yields.
 */

import type { PrefixPointer } from '../../domain/prefix-pointer.js';

// Declared in domain/ because futures store it; re-exported as part of the store's API.
export type { PrefixPointer, PrefixSegment } from '../../domain/prefix-pointer.js';

/** What a worker hands to `saveCut` for one unfinished call. */
export interface CutRow {
  readonly callId: string;
  readonly contentId: string;
  readonly weightVersion: number;
  /**
   * Tokens generated since `previous` (all generated tokens when there is no previous cut). Read while
   * the cut is being written, not copied when `saveCut` is called: left unchanged until acknowledged.
   */
  readonly tokens: ArrayLike<number>;
  /** One logprob per token; stored exactly as float32. Left unchanged until acknowledged, likewise. */
  readonly logprobs: ArrayLike<number>;
  /** The call's latest committed prefix, when it was cut before. */
  readonly previous?: PrefixPointer;
  /** Aborted when the call errors or is cancelled: its answer comes at once (P3). */
  readonly signal?: AbortSignal;
}

export type SaveFailureReason =
  /** Nothing generated yet: nothing to resume from, so the cut is refused. */
  | 'zero-tokens'
  /** The row is malformed (lengths, token ids, a previous pointer of another call). */
  | 'invalid-row'
  /** The call's own signal fired before its group committed. */
  | 'cancelled'
  /** The deadline passed before the group's commit was written. */
  | 'deadline'
  /** The whole cut's signal fired before the group's commit was written. */
  | 'aborted'
  /** Writes failed (retries exhausted or a non-retryable error). */
  | 'write-failed'
  /** The commit record says aborted, or was written by someone else, or could not be settled. */
  | 'not-committed';

export type SaveAck =
  | {
      readonly status: 'saved';
      readonly callId: string;
      /** The call's new latest prefix, to be stored on its future. */
      readonly pointer: PrefixPointer;
      readonly groupKey: string;
      readonly rowKeys: readonly string[];
    }
  | {
      readonly status: 'failed';
      readonly callId: string;
      readonly reason: SaveFailureReason;
      readonly message: string;
      /** The group the row was in, when it got that far. */
      readonly groupKey?: string;
    };

export type RegenerateReason =
  | 'content-mismatch'
  | 'not-committed'
  | 'missing'
  | 'expired'
  | 'corrupt'
  | 'mismatch'
  | 'read-failed';

export type RestoreOutcome =
  | {
      readonly kind: 'restored';
      readonly callId: string;
      readonly pointer: PrefixPointer;
      readonly tokens: Uint32Array;
      readonly logprobs: Float32Array;
      /** Weight version of the latest cut (versions never decrease along a prefix). */
      readonly weightVersion: number;
    }
  | {
      /** Not an error: the call generates again from the start (P4a). */
      readonly kind: 'regenerate';
      readonly callId: string;
      readonly reason: RegenerateReason;
      readonly detail: string;
    };

export interface RestoreRequest {
  readonly pointer: PrefixPointer;
  /** The sample's checkpoint content id; the prefix must have been generated with it. */
  readonly contentId: string;
  /** Cancels only this request's result, never the shared read. */
  readonly signal?: AbortSignal;
}
