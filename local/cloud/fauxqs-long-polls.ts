import type { BuildAppOptions } from 'fauxqs';
import { fauxqsClass } from './fauxqs-internals.js';

type FauxqsQueue = ReturnType<NonNullable<BuildAppOptions['stores']>['sqsStore']['createQueue']>;

/** What the rule reads of a queue; `notifyWaiters` is private in fauxqs's types. */
type WaitingQueue = Pick<FauxqsQueue, 'messages' | 'pollWaiters' | 'isFifo'> & { notifyWaiters(): void };

interface SqsQueueClass {
  readonly prototype: WaitingQueue & { [PATCHED]?: true };
}

const PATCHED = Symbol.for('tinker-serverless.fauxqs.wake-as-many-as-ready');

/**
 * Makes fauxqs answer long polls as SQS does: a message that arrives is handed to one waiting
 * receive, and the others keep waiting. fauxqs instead ends every waiting receive of the queue
 * whenever a message becomes available; all but one then answer empty at once and their pollers
 * ask again, so with the worker's eight pollers each message cost about eight receives (the bench's
 * single closed loop: ~9.6 SQS calls a request, ~8 of them empty receives), all of them CPU of
 * this one process (the SDK client and the server both run here). Receives are woken oldest
 * first, as many as there are ready messages; the ones woken still take what they find, as before.
 * FIFO queues (whose readiness depends on message groups) keep fauxqs's own rule. Idempotent.
 */
export async function wakeLongPollsAsManyAsReady(): Promise<void> {
  const queueClass = await fauxqsClass<SqsQueueClass>('sqs/sqsStore.js', 'SqsQueue');
  const prototype = queueClass.prototype;
  if (prototype[PATCHED]) return;
  const wakeAll = prototype.notifyWaiters;
  if (typeof wakeAll !== 'function') throw new Error('fauxqs no longer has SqsQueue.notifyWaiters');
  const passQueued = new WeakSet<WaitingQueue>();
  prototype.notifyWaiters = function wakeAsManyAsReady(this: WaitingQueue) {
    if (this.isFifo()) {
      wakeAll.call(this);
      return;
    }
    // One pass per burst of notices (a batch send notices each message): a receive woken here takes
    // its messages in a job queued now, so a second pass queued later sees them taken and wakes no
    // receive for a message already promised to another.
    if (passQueued.has(this)) return;
    passQueued.add(this);
    queueMicrotask(() => {
      passQueued.delete(this);
      for (let ready = this.messages.length; ready > 0; ready--) {
        const waiter = this.pollWaiters.shift();
        if (waiter === undefined) return;
        clearTimeout(waiter.timer);
        waiter.resolve();
      }
    });
  };
  prototype[PATCHED] = true;
}
