import type { AckSlot } from './ack-slot.js';
import type { EncodedCutRow, EncodedItem } from './codec/cut-row.js';
import type { CutRow, SaveFailureReason } from './types.js';

/** One group of a cut being saved (P1-P3): its calls, its writes, and how far it got. */

export interface PendingCall {
  readonly input: CutRow;
  readonly slot: AckSlot;
  /** Set once encoded; a call cancelled or failed before its turn is never encoded. */
  row?: EncodedCutRow;
}

export type EncodedCall = PendingCall & { readonly row: EncodedCutRow };

export const isEncoded = (call: PendingCall): call is EncodedCall => call.row !== undefined;

export interface BatchEntry {
  readonly call: PendingCall;
  readonly item: EncodedItem;
}

export type GroupPhase = 'writing' | 'committing' | 'done';

export class GroupRun {
  phase: GroupPhase = 'writing';
  failure: SaveFailureReason | undefined;
  /** Calls not cancelled: the ones a commit would vouch for. */
  readonly live: Set<PendingCall>;
  /** Items whose write was started: what a rollback may have to delete. */
  readonly started = new Set<EncodedItem>();
  readonly controller = new AbortController();
  /** This group's BatchWriteItem calls, queued as its rows are encoded; none of them rejects. */
  readonly writes: Promise<void>[] = [];
  /** Items encoded for this group. */
  items = 0;
  /** Resolves once every row of the group was encoded and queued, or the group stopped. */
  readonly queued: Promise<void>;
  finishQueueing!: () => void;

  constructor(
    readonly key: string,
    readonly calls: readonly PendingCall[],
  ) {
    this.live = new Set(calls);
    this.queued = new Promise((resolve) => {
      this.finishQueueing = resolve;
    });
  }

  /** Fails the group while its commit is not sent yet; its calls are answered at once. */
  fail(reason: SaveFailureReason, message: string): void {
    if (this.phase !== 'writing') return;
    this.phase = 'done';
    this.failure = reason;
    this.controller.abort(new Error(message));
    for (const call of this.calls) {
      call.slot.settle({ status: 'failed', callId: call.input.callId, reason, message, groupKey: this.key });
    }
  }
}
