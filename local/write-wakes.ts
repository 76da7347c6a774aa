import type { HandlerExecutionContext } from '@smithy/types';
import type { AwsClients } from '../shared/aws/clients.js';
import type { FilterPattern } from '../shared/topology.js';
import {
  type InitializeArgs,
  type InitializeNext,
  type InitializeOutput,
  initializeStackOf,
} from './client-middleware.js';
import { matchesPattern } from './event-filter.js';

/**
 * The local runtime noticing its own DynamoDB writes, so its stream triggers read a shard when a
 * record can be there instead of at their next idle poll (Lambda's pollers read about four times a
 * second; README "The wake-up path"). A middleware on every client the handlers get tells
 * `TableWrites` which items a write command named once DynamoDB Local has answered it, whether it
 * succeeded or not (a failed condition writes nothing, a timed-out write may have landed: a spare
 * read costs one GetRecords). Writes through other clients (tests' own, another process) are seen
 * at the idle poll, as before.
 *
 * A trigger is woken only by a write that could make a record its filters let through, judged from
 * what the command says (its kind: a delete makes REMOVE, a put or update INSERT or MODIFY; and the
 * item's key when the input names it): the scheduler's registry trigger wants only the REMOVE of the
 * drain record, and the registry's other writes (API key use, quotas, poll slots, the tick lock)
 * would each cost it a read that delivers nothing. A write skipped here is still read, at the idle
 * poll or with the next woken read, and then filtered as before: only the wake is saved.
 */
export class TableWrites {
  readonly #listeners = new Map<string, Set<Listener>>();

  /**
   * Calls `listener` after each write to `table` that could make a record matching `filters` (any
   * write, with none); answers the function that stops it.
   */
  onWrite(table: string, listener: () => void, filters: readonly FilterPattern[] = []): () => void {
    const listeners = this.#listeners.get(table) ?? new Set();
    const entry: Listener = { wake: listener, filters };
    listeners.add(entry);
    this.#listeners.set(table, listeners);
    return () => void listeners.delete(entry);
  }

  /** Wakes each listener once whose table one of `items` is on and whose filters it could pass. */
  wrote(items: readonly ItemWrite[]): void {
    for (const [table, listeners] of this.#listeners) {
      const onTable = items.filter((item) => item.table === table);
      if (onTable.length === 0) continue;
      for (const listener of listeners) {
        if (onTable.some((item) => mayMatch(item, listener.filters))) listener.wake();
      }
    }
  }
}

interface Listener {
  readonly wake: () => void;
  readonly filters: readonly FilterPattern[];
}

type StreamEventName = 'INSERT' | 'MODIFY' | 'REMOVE';
type KeyValue = { readonly S: string } | { readonly N: string };

/** One item a write command names. */
export interface ItemWrite {
  readonly table: string;
  /** The stream events the write can make. */
  readonly events: readonly StreamEventName[];
  /** The item's key as its stream record's `Keys` carry it; undefined when the input does not say plainly. */
  readonly keys: Readonly<Record<string, KeyValue>> | undefined;
}

type Input = Readonly<Record<string, unknown>>;

const record = (value: unknown): Input =>
  typeof value === 'object' && value !== null ? (value as Input) : {};

const PUT: readonly StreamEventName[] = ['INSERT', 'MODIFY'];
const DELETE: readonly StreamEventName[] = ['REMOVE'];

/**
 * A key or item's attribute as a stream record carries it: the low-level client's attribute value,
 * or the document client's plain string or number (its marshalling runs after this middleware).
 */
function keyValue(value: unknown): KeyValue | undefined {
  if (typeof value === 'string') return { S: value };
  if (typeof value === 'number' || typeof value === 'bigint') return { N: String(value) };
  const typed = record(value);
  if (typeof typed.S === 'string') return { S: typed.S };
  if (typeof typed.N === 'string') return { N: typed.N };
  return undefined;
}

/** The key attributes of `item` (a `Key`, or a put's whole `Item`), when every one reads plainly. */
function keysOf(item: unknown, keyNames: (table: string) => readonly string[] | undefined, table: string) {
  const names = keyNames(table);
  if (names === undefined) return undefined;
  const keys: Record<string, KeyValue> = {};
  for (const name of names) {
    const value = keyValue(record(item)[name]);
    if (value === undefined) return undefined;
    keys[name] = value;
  }
  return keys;
}

/**
 * The items a DynamoDB write command names (none for reads, nor for a transaction's ConditionCheck,
 * which writes nothing). `keyNames` answers a table's key attribute names (undefined: not known,
 * so no key is read).
 */
export function itemsWritten(
  operation: string,
  input: Input,
  keyNames: (table: string) => readonly string[] | undefined = () => undefined,
): ItemWrite[] {
  const item = (table: unknown, events: readonly StreamEventName[], key: unknown): ItemWrite[] =>
    typeof table === 'string' ? [{ table, events, keys: keysOf(key, keyNames, table) }] : [];
  switch (operation) {
    case 'PutItem':
      return item(input.TableName, PUT, input.Item);
    case 'UpdateItem':
      return item(input.TableName, PUT, input.Key);
    case 'DeleteItem':
      return item(input.TableName, DELETE, input.Key);
    case 'BatchWriteItem':
      return Object.entries(record(input.RequestItems)).flatMap(([table, requests]) =>
        (Array.isArray(requests) ? requests : []).flatMap((request) => {
          const { PutRequest, DeleteRequest } = record(request);
          if (PutRequest !== undefined) return item(table, PUT, record(PutRequest).Item);
          if (DeleteRequest !== undefined) return item(table, DELETE, record(DeleteRequest).Key);
          return [];
        }),
      );
    case 'TransactWriteItems':
      return (Array.isArray(input.TransactItems) ? input.TransactItems : []).flatMap((entry) => {
        const { Put, Update, Delete } = record(entry);
        if (Put !== undefined) return item(record(Put).TableName, PUT, record(Put).Item);
        if (Update !== undefined) return item(record(Update).TableName, PUT, record(Update).Key);
        if (Delete !== undefined) return item(record(Delete).TableName, DELETE, record(Delete).Key);
        return [];
      });
    default:
      return [];
  }
}

/**
 * Whether a record of `item` could pass one of `filters`: only the pattern's `eventName` and
 * `dynamodb.Keys` are judged (the images depend on the item's state, so they may always match).
 */
export function mayMatch(item: ItemWrite, filters: readonly FilterPattern[]): boolean {
  if (filters.length === 0) return true;
  return filters.some((pattern) => {
    const names = pattern.eventName;
    if (Array.isArray(names) && !item.events.some((event) => names.includes(event))) return false;
    const keys = record(pattern.dynamodb).Keys;
    if (keys === undefined || item.keys === undefined || Array.isArray(keys)) return true;
    return matchesPattern(item.keys, keys as FilterPattern);
  });
}

const MIDDLEWARE_NAME = 'localWriteWakes';

/**
 * Adds the write watch to a set of clients (the document client shares the DynamoDB client's stack).
 * `keyNames` answers a table's key attribute names, so that a write's key can be judged.
 */
export function watchWritesOn(
  clients: AwsClients,
  writes: TableWrites,
  keyNames: (table: string) => readonly string[] | undefined,
): void {
  const middleware =
    (next: InitializeNext, context: HandlerExecutionContext): InitializeNext =>
    async (args: InitializeArgs): Promise<InitializeOutput> => {
      const operation = context.commandName?.replace(/Command$/, '') ?? '';
      const items = itemsWritten(operation, args.input as Input, keyNames);
      if (items.length === 0) return next(args);
      try {
        return await next(args);
      } finally {
        writes.wrote(items);
      }
    };
  initializeStackOf(clients.dynamo).add(middleware, {
    step: 'initialize',
    priority: 'high',
    name: MIDDLEWARE_NAME,
    override: true,
  });
}
