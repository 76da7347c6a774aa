import type { HandlerExecutionContext } from '@smithy/types';
import type { AwsClients } from '../shared/aws/clients.js';
import {
  type InitializeArgs,
  type InitializeNext,
  type InitializeOutput,
  initializeStackOf,
} from './client-middleware.js';

/**
 * The local runtime noticing its own DynamoDB writes, so its stream triggers read a shard when a
 * record can be there instead of at their next idle poll (Lambda's pollers read about four times a
 * second; README "The wake-up path"). A middleware on every client the handlers get tells
 * `TableWrites` which tables a write command named once DynamoDB Local has answered it, whether it
 * succeeded or not (a failed condition writes nothing, a timed-out write may have landed: a spare
 * read costs one GetRecords). Writes through other clients (tests' own, another process) are seen
 * at the idle poll, as before.
 */
export class TableWrites {
  readonly #listeners = new Map<string, Set<() => void>>();

  /** Calls `listener` after each write to `table`; answers the function that stops it. */
  onWrite(table: string, listener: () => void): () => void {
    const listeners = this.#listeners.get(table) ?? new Set();
    listeners.add(listener);
    this.#listeners.set(table, listeners);
    return () => void listeners.delete(listener);
  }

  wrote(tables: Iterable<string>): void {
    for (const table of new Set(tables)) {
      for (const listener of this.#listeners.get(table) ?? []) listener();
    }
  }
}

type Input = Readonly<Record<string, unknown>>;

const record = (value: unknown): Input =>
  typeof value === 'object' && value !== null ? (value as Input) : {};

/** The tables a DynamoDB write command names; none for reads. */
export function tablesWritten(operation: string, input: Input): string[] {
  switch (operation) {
    case 'PutItem':
    case 'UpdateItem':
    case 'DeleteItem':
      return typeof input.TableName === 'string' ? [input.TableName] : [];
    case 'BatchWriteItem':
      return Object.keys(record(input.RequestItems));
    case 'TransactWriteItems':
      return (Array.isArray(input.TransactItems) ? input.TransactItems : []).flatMap((item) =>
        Object.values(record(item)).flatMap((body) => {
          const table = record(body).TableName;
          return typeof table === 'string' ? [table] : [];
        }),
      );
    default:
      return [];
  }
}

const MIDDLEWARE_NAME = 'localWriteWakes';

/** Adds the write watch to a set of clients (the document client shares the DynamoDB client's stack). */
export function watchWritesOn(clients: AwsClients, writes: TableWrites): void {
  const middleware =
    (next: InitializeNext, context: HandlerExecutionContext): InitializeNext =>
    async (args: InitializeArgs): Promise<InitializeOutput> => {
      const operation = context.commandName?.replace(/Command$/, '') ?? '';
      const tables = tablesWritten(operation, args.input as Input);
      if (tables.length === 0) return next(args);
      try {
        return await next(args);
      } finally {
        writes.wrote(tables);
      }
    };
  initializeStackOf(clients.dynamo).add(middleware, {
    step: 'initialize',
    priority: 'high',
    name: MIDDLEWARE_NAME,
    override: true,
  });
}
