import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { hashString, seedWords, uniformAt } from '../../shared/backend/reference/prng.js';

/**
 * SQS's at-least-once delivery, which fauxqs never shows: after the scheduler's SendMessage to the
 * work queue succeeds, the same manifest is, by seeded chance, delivered again at once (a duplicate)
 * or a few seconds later (a late delivery, typically after its work item committed or was
 * re-planned). The copies are sent with a separate, fault-free client.
 */

export interface DeliveryChaosOptions {
  readonly seed: number;
  readonly queueUrl: string;
  /** Chance per manifest of an immediate duplicate. */
  readonly duplicate: number;
  /** Chance per manifest of a late copy. */
  readonly late: number;
  readonly lateDelayMs: { readonly min: number; readonly max: number };
  /** Sends the copies (fault-free). */
  readonly sender: SQSClient;
}

type Handler = (args: { input: object }) => Promise<{ output: object }>;
interface Stack {
  add(
    middleware: (next: Handler, context: { commandName?: string }) => Handler,
    options: { step: 'initialize'; priority: 'low'; name: string; override: boolean },
  ): void;
  remove(name: string): boolean;
}

const MIDDLEWARE = 'chaosDeliveries';

export class DeliveryChaos {
  readonly counts = { duplicateDelivery: 0, lateDelivery: 0 };
  #enabled = true;
  #sends = 0;
  readonly #pending = new Set<Promise<void>>();
  readonly #seed: [number, number];

  constructor(private readonly options: DeliveryChaosOptions) {
    this.#seed = seedWords(options.seed);
  }

  /** Inside any fault injector (low priority): only a send that really landed is copied. */
  attach(sqs: SQSClient): () => void {
    const stack = sqs.middlewareStack as unknown as Stack;
    stack.add(
      (next, context) => async (args) => {
        const result = await next(args);
        const input = args.input as { QueueUrl?: string; MessageBody?: string };
        if (
          this.#enabled &&
          context.commandName === 'SendMessageCommand' &&
          input.QueueUrl === this.options.queueUrl &&
          input.MessageBody !== undefined
        ) {
          this.#copy(input.MessageBody);
        }
        return result;
      },
      { step: 'initialize', priority: 'low', name: MIDDLEWARE, override: true },
    );
    return () => void stack.remove(MIDDLEWARE);
  }

  off(): void {
    this.#enabled = false;
  }

  /** Resolves once every late copy scheduled so far was sent. */
  async flush(): Promise<void> {
    while (this.#pending.size > 0) await Promise.allSettled([...this.#pending]);
  }

  #draw(call: number, kind: string): number {
    return uniformAt(this.#seed[0], this.#seed[1], hashString(kind), call);
  }

  #copy(body: string): void {
    const call = this.#sends++;
    if (this.#draw(call, 'duplicate') < this.options.duplicate) {
      this.counts.duplicateDelivery++;
      this.#track(this.#send(body));
    }
    if (this.#draw(call, 'late') < this.options.late) {
      this.counts.lateDelivery++;
      const { min, max } = this.options.lateDelayMs;
      const delay = min + (max - min) * this.#draw(call, 'late-delay');
      this.#track(new Promise((resolve) => setTimeout(resolve, delay)).then(() => this.#send(body)));
    }
  }

  #track(sending: Promise<void>): void {
    const tracked = sending.catch(() => undefined);
    this.#pending.add(tracked);
    void tracked.finally(() => this.#pending.delete(tracked));
  }

  async #send(body: string): Promise<void> {
    await this.options.sender.send(
      new SendMessageCommand({ QueueUrl: this.options.queueUrl, MessageBody: body }),
    );
  }
}
