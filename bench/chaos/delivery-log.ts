import type { ProcessKind } from './processes.js';

/**
 * Every delivery of a work message, by work item: who handled it, whether it was acknowledged, and
 * whether a failure is explained by something injected (the handling process saw an injected error,
 * hit a crash point, was killed, or was a zombie). The DLQ check attributes each dead-lettered
 * message through it.
 */

export interface Delivery {
  readonly by: ProcessKind;
  /** The message was (to be) deleted: the work item ran to an end. */
  readonly done: boolean;
  readonly explained: boolean;
  /** What the handler said about a failure (kept for unexplained ones). */
  readonly detail?: string;
}

export class DeliveryLog {
  readonly #byWorkItem = new Map<string, Delivery[]>();
  /** Deliveries whose work item could not be told (a body that is not a manifest). */
  unattributed = 0;
  /** The first unexplained failures, for the report. */
  readonly unexplainedDetails: string[] = [];

  record(workItemId: string | undefined, delivery: Delivery): void {
    if (!delivery.done && !delivery.explained && this.unexplainedDetails.length < 20) {
      this.unexplainedDetails.push(`${workItemId} (${delivery.by}): ${delivery.detail ?? 'no detail'}`);
    }
    if (workItemId === undefined) {
      this.unattributed++;
      return;
    }
    const deliveries = this.#byWorkItem.get(workItemId) ?? [];
    deliveries.push(delivery);
    this.#byWorkItem.set(workItemId, deliveries);
  }

  get deliveries(): number {
    let count = this.unattributed;
    for (const deliveries of this.#byWorkItem.values()) count += deliveries.length;
    return count;
  }

  /** Failed deliveries (left for redelivery), and how many of them nothing injected explains. */
  failures(): { failed: number; unexplained: number } {
    let failed = 0;
    let unexplained = 0;
    for (const deliveries of this.#byWorkItem.values()) {
      for (const delivery of deliveries) {
        if (delivery.done) continue;
        failed++;
        if (!delivery.explained) unexplained++;
      }
    }
    return { failed, unexplained };
  }

  /**
   * A dead-lettered message of this work item is explained when it failed at least once and every
   * failed delivery of the work item is explained.
   */
  explainsDeadLetter(workItemId: string): boolean {
    const failed = (this.#byWorkItem.get(workItemId) ?? []).filter((delivery) => !delivery.done);
    return failed.length > 0 && failed.every((delivery) => delivery.explained);
  }
}
